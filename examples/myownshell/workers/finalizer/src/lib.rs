//! MyOwnShell's finalizer: runs when a MyOwnShell is deleted, before the host releases it.
//!
//! There is nothing outside the cluster to clean up: the Deployment carries a controller
//! ownerReference to the MyOwnShell and is garbage-collected after it. Like the tutorial's
//! finalizer, this one logs; it also records the time in `status.finalizedAt`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use myownshell_types::{MyOwnShell, MyOwnShellStatus};
use wasmpilot_guest::{Context, Finalized, FinalizerWorker, Inputs, WorkerError};

/// Logs the deletion, records `status.finalizedAt` (the host's clock) and lets it proceed.
#[derive(Default)]
pub struct Finalizer;

impl FinalizerWorker for Finalizer {
    type Resource = MyOwnShell;

    fn finalize(
        &self,
        ctx: &Context,
        shell: MyOwnShell,
        _inputs: &Inputs,
    ) -> Result<Finalized, WorkerError> {
        let deployment = shell
            .status
            .as_ref()
            .and_then(|s| s.deployment.clone())
            .unwrap_or_else(|| "(none yet)".to_owned());
        ctx.info(
            "successfully finalized MyOwnShell; its Deployment is garbage-collected",
            &[
                ("shell", &shell.metadata.name.as_deref().unwrap_or_default()),
                ("deployment", &deployment),
            ],
        );
        Ok(Finalized::done().status(MyOwnShellStatus {
            finalized_at: Some(Time(ctx.now())),
            ..MyOwnShellStatus::default()
        }))
    }
}

wasmpilot_guest::export!(finalizer = Finalizer);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use wasmpilot_guest::testing::{objects_from_yaml, FinalizeTest};

    fn shell(index: usize) -> Value {
        objects_from_yaml(include_str!("../../testdata/shells.yaml")).unwrap()[index].clone()
    }

    #[test]
    fn records_the_time_and_is_done() {
        let mut shell = shell(1);
        shell["metadata"]["deletionTimestamp"] = json!("2025-06-01T11:59:58Z");
        let report = FinalizeTest::new(shell)
            .now("2025-06-01T12:00:00Z")
            .run(&Finalizer)
            .unwrap();
        assert!(report.done);
        assert_eq!(report.requeue_after, None);
        assert_eq!(
            report.status,
            Some(json!({ "finalizedAt": "2025-06-01T12:00:00Z" }))
        );
        let log = &report.logs[0];
        assert!(log.message.contains("successfully finalized"), "{log}");
        assert_eq!(log.field("shell"), Some("sample"));
        assert_eq!(log.field("deployment"), Some("sample"));
    }

    #[test]
    fn a_shell_deleted_before_its_first_sync_is_finalized_too() {
        let report = FinalizeTest::new(shell(0)).run(&Finalizer).unwrap();
        assert!(report.done);
        assert_eq!(report.logs[0].field("deployment"), Some("(none yet)"));
    }
}
