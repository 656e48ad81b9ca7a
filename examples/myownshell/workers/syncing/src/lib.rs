//! MyOwnShell's Syncing phase: the Deployment of `spec.size` busybox pods, then `Ready`.

use myownshell_types::phases::syncing::{Export, Inputs, Next, Outcome, Worker};
use myownshell_types::{desired_deployment, MyOwnShell, MyOwnShellStatus};
use wasmpilot_guest::{Context, WorkerError};

/// Returns the Deployment [`desired_deployment`] builds (the host server-side applies it,
/// owned by the MyOwnShell) and records its name and size in the status.
#[derive(Default)]
pub struct Syncing;

impl Worker for Syncing {
    type Resource = MyOwnShell;

    fn sync(&self, ctx: &Context, shell: MyOwnShell, _: Inputs) -> Result<Outcome, WorkerError> {
        let deployment = desired_deployment(&shell)
            .map_err(|err| WorkerError::fatal(format!("invalid MyOwnShell: {err}")))?;
        let name = deployment.metadata.name.clone().unwrap_or_default();
        ctx.info(
            "applying the Deployment",
            &[
                ("deployment", &name),
                ("replicas", &shell.spec.size),
                ("image", &shell.spec.image),
            ],
        );
        let status = MyOwnShellStatus {
            deployment: Some(name),
            synced_size: Some(shell.spec.size),
            ..MyOwnShellStatus::default()
        };
        Ok(Outcome::next(Next::Ready)
            .deployment(&deployment)?
            .status(status))
    }
}

wasmpilot_guest::export!(phase = Export<Syncing>);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::{json, Value};
    use wasmpilot_guest::testing::{objects_from_yaml, SyncTest};

    fn shell(index: usize) -> Value {
        objects_from_yaml(include_str!("../../testdata/shells.yaml")).unwrap()[index].clone()
    }

    #[test]
    fn outputs_the_deployment_and_moves_to_ready() {
        let report = SyncTest::new(shell(0))
            .phase("Syncing")
            .run(&Export(Syncing))
            .unwrap();
        assert_eq!(report.next_phase, "Ready");
        assert_eq!(report.outputs.len(), 1);
        let deployment = &report.typed_outputs::<Deployment>("Deployment")[0];
        assert_eq!(deployment.metadata.name.as_deref(), Some("sample"));
        assert_eq!(deployment.metadata.namespace.as_deref(), Some("default"));
        // The host sets the ownerReference; a worker must not.
        assert!(deployment.metadata.owner_references.is_none());
        let spec = deployment.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(2));
        let output = report.output("Deployment", "sample").unwrap();
        assert_eq!(output["apiVersion"], "apps/v1");
        assert_eq!(
            output["spec"]["selector"],
            json!({ "matchLabels": { "app": "sample" } })
        );
        assert_eq!(
            output["spec"]["template"]["metadata"]["labels"],
            json!({ "app": "sample" })
        );
        assert_eq!(
            output["spec"]["template"]["spec"]["containers"][0]["image"],
            "busybox:1.36"
        );
        assert_eq!(
            report.status,
            Some(json!({ "deployment": "sample", "syncedSize": 2 }))
        );
        assert!(report.logged("applying the Deployment"));
    }

    #[test]
    fn follows_a_size_and_image_change() {
        let mut shell = shell(1);
        shell["spec"] = json!({ "size": 5, "image": "busybox:1.37" });
        let report = SyncTest::new(shell)
            .phase("Syncing")
            .run(&Export(Syncing))
            .unwrap();
        let output = report.output("Deployment", "sample").unwrap();
        assert_eq!(output["spec"]["replicas"], 5);
        assert_eq!(
            output["spec"]["template"]["spec"]["containers"][0]["image"],
            "busybox:1.37"
        );
        assert_eq!(report.status.unwrap()["syncedSize"], 5);
    }

    #[test]
    fn size_zero_is_a_deployment_of_zero_replicas() {
        let mut shell = shell(0);
        shell["spec"]["size"] = json!(0);
        let report = SyncTest::new(shell)
            .phase("Syncing")
            .run(&Export(Syncing))
            .unwrap();
        assert_eq!(
            report.output("Deployment", "sample").unwrap()["spec"]["replicas"],
            0
        );
    }

    #[test]
    fn an_invalid_shell_is_fatal_and_outputs_nothing() {
        let failed = SyncTest::new(shell(2))
            .phase("Syncing")
            .run(&Export(Syncing))
            .unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("between 0 and 10"),
            "{failed}"
        );
    }
}
