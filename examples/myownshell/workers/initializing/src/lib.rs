//! MyOwnShell's Initializing phase: check that the spec can become a Deployment, then Syncing.

use myownshell_types::phases::initializing::{Export, Inputs, Next, Outcome, Worker};
use myownshell_types::{desired_deployment, MyOwnShell};
use wasmpilot_guest::{Context, WorkerError};

/// Moves a new MyOwnShell to `Syncing`; a spec that cannot become a Deployment is a fatal
/// error (reported as a Condition and an Event, retried when the MyOwnShell changes).
#[derive(Default)]
pub struct Initializing;

impl Worker for Initializing {
    type Resource = MyOwnShell;

    fn sync(&self, ctx: &Context, shell: MyOwnShell, _: Inputs) -> Result<Outcome, WorkerError> {
        desired_deployment(&shell)
            .map_err(|err| WorkerError::fatal(format!("invalid MyOwnShell: {err}")))?;
        ctx.info(
            "new MyOwnShell, syncing its Deployment",
            &[
                ("shell", &shell.metadata.name.as_deref().unwrap_or_default()),
                ("size", &shell.spec.size),
                ("image", &shell.spec.image),
            ],
        );
        Ok(Outcome::next(Next::Syncing))
    }
}

wasmpilot_guest::export!(phase = Export<Initializing>);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use wasmpilot_guest::testing::{objects_from_yaml, SyncTest};

    fn shell(index: usize) -> Value {
        objects_from_yaml(include_str!("../../testdata/shells.yaml")).unwrap()[index].clone()
    }

    #[test]
    fn moves_to_syncing() {
        let report = SyncTest::new(shell(0)).run(&Export(Initializing)).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        assert_eq!(report.status, None);
        assert!(report.outputs.is_empty());
        assert_eq!(report.logs[0].field("shell"), Some("sample"));
        assert_eq!(report.logs[0].field("size"), Some("2"));
        // spec.image was left out: the type's default applies, as the CRD's default does.
        assert_eq!(report.logs[0].field("image"), Some("busybox:1.36"));
    }

    #[test]
    fn an_invalid_size_is_fatal() {
        let failed = SyncTest::new(shell(2))
            .run(&Export(Initializing))
            .unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("spec.size is 50"),
            "{failed}"
        );
    }

    #[test]
    fn a_shell_without_size_is_fatal() {
        let mut shell = shell(0);
        shell["spec"] = serde_json::json!({ "image": "busybox" });
        let failed = SyncTest::new(shell).run(&Export(Initializing)).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("missing field `size`"),
            "{failed}"
        );
    }
}
