//! MyOwnShell's Ready phase: stay Ready while the observed Deployment is the one Syncing
//! applies for the current spec; go back to Syncing when it is missing or differs (a new
//! `spec.size` or `spec.image`, or someone scaled or edited the Deployment).

use myownshell_types::phases::ready::{Export, Inputs, Next, Outcome, Worker};
use myownshell_types::{desired_deployment, differences, find_deployment, MyOwnShell};
use serde_json::json;
use wasmpilot_guest::{Context, WorkerError};

/// Compares the Deployment in the `deployments` input with [`desired_deployment`].
#[derive(Default)]
pub struct Ready;

impl Worker for Ready {
    type Resource = MyOwnShell;

    fn sync(
        &self,
        ctx: &Context,
        shell: MyOwnShell,
        inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        let desired = desired_deployment(&shell)
            .map_err(|err| WorkerError::fatal(format!("invalid MyOwnShell: {err}")))?;
        let name = desired.metadata.name.as_deref().unwrap_or_default();
        let deployments = inputs.deployments()?;
        let Some(observed) = find_deployment(&desired, &deployments) else {
            ctx.info(
                "the Deployment is missing, syncing again",
                &[("deployment", &name)],
            );
            return Ok(Outcome::next(Next::Syncing));
        };
        let diffs = differences(&desired, observed, shell.metadata.uid.as_deref());
        if !diffs.is_empty() {
            ctx.info(
                "the Deployment differs from the spec, syncing again",
                &[("deployment", &name), ("differences", &diffs.join("; "))],
            );
            return Ok(Outcome::next(Next::Syncing));
        }
        let ready = observed
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        ctx.debug(
            "the Deployment is in sync",
            &[
                ("deployment", &name),
                ("replicas", &shell.spec.size),
                ("ready", &ready),
            ],
        );
        // Only a changed value makes the host write the status: no churn while nothing moves.
        Ok(Outcome::next(Next::Ready).status(json!({ "readyReplicas": ready })))
    }
}

wasmpilot_guest::export!(phase = Export<Ready>);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use wasmpilot_guest::testing::{objects_from_yaml, FailedRun, SyncReport, SyncTest};

    fn shell(index: usize) -> Value {
        objects_from_yaml(include_str!("../../testdata/shells.yaml")).unwrap()[index].clone()
    }

    fn deployments() -> Vec<Value> {
        objects_from_yaml(include_str!("../../testdata/deployments.yaml")).unwrap()
    }

    fn run(shell: &Value, deployments: &[Value]) -> Result<SyncReport, FailedRun> {
        SyncTest::new(shell)
            .input("deployments", deployments)
            .run(&Export(Ready))
    }

    fn differences_logged(report: &SyncReport) -> String {
        report
            .logs
            .iter()
            .find_map(|r| r.field("differences"))
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn stays_ready_and_reports_ready_pods_when_in_sync() {
        let report = run(&shell(1), &deployments()).unwrap();
        assert_eq!(report.next_phase, "Ready");
        assert_eq!(report.status, Some(json!({ "readyReplicas": 1 })));
        assert!(report.outputs.is_empty());
    }

    #[test]
    fn a_new_size_means_syncing() {
        let mut shell = shell(1);
        shell["spec"]["size"] = json!(3);
        shell["metadata"]["generation"] = json!(2);
        let report = run(&shell, &deployments()).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        assert_eq!(report.status, None);
        assert_eq!(differences_logged(&report), "spec.replicas is 2, want 3");
    }

    #[test]
    fn a_scaled_or_edited_deployment_means_syncing() {
        let mut deployments = deployments();
        deployments[0]["spec"]["replicas"] = json!(9);
        deployments[0]["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine");
        let report = run(&shell(1), &deployments).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        assert_eq!(
            differences_logged(&report),
            "spec.replicas is 9, want 2; container shell runs image alpine, want busybox:1.36"
        );
    }

    #[test]
    fn a_missing_deployment_means_syncing() {
        // Only the same-named Deployment of another namespace and an unrelated one remain.
        let report = run(&shell(1), &deployments()[1..]).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        assert!(report.logged("the Deployment is missing"));
        let report = SyncTest::new(shell(1))
            .empty_input("deployments")
            .run(&Export(Ready))
            .unwrap();
        assert_eq!(report.next_phase, "Syncing");
    }

    #[test]
    fn a_same_named_deployment_of_someone_else_means_syncing() {
        let mut deployments = deployments();
        deployments[0]["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
        let report = run(&shell(1), &deployments).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        assert_eq!(
            differences_logged(&report),
            "it is not controlled by this MyOwnShell"
        );
    }

    #[test]
    fn no_ready_pods_yet_is_zero() {
        let mut deployments = deployments();
        deployments[0]["status"] = json!({ "replicas": 2, "unavailableReplicas": 2 });
        let report = run(&shell(1), &deployments).unwrap();
        assert_eq!(report.next_phase, "Ready");
        assert_eq!(report.status, Some(json!({ "readyReplicas": 0 })));
    }

    #[test]
    fn an_invalid_shell_or_input_is_fatal() {
        let failed = run(&shell(2), &deployments()).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(failed.error.message().contains("spec.size is 50"));

        let failed = SyncTest::new(shell(1))
            .input_json("deployments", [r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"sample"},"spec":{"replicas":"two"}}"#.to_owned()])
            .run(&Export(Ready))
            .unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("input `deployments`"),
            "{failed}"
        );
    }
}
