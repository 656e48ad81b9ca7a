//! AutoRoute's Initializing phase: mark the route as picked up and move on to Syncing.

use autoroute_types::phases::initializing::{Export, Inputs, Next, Outcome, Worker};
use autoroute_types::AutoRoute;
use wasmpilot_guest::{Context, WorkerError};

/// Moves a new AutoRoute to `Syncing`, telling the user that processing has started.
#[derive(Default)]
pub struct Initializing;

impl Worker for Initializing {
    type Resource = AutoRoute;

    fn sync(&self, ctx: &Context, route: AutoRoute, _: Inputs) -> Result<Outcome, WorkerError> {
        let name = route.metadata.name.unwrap_or_default();
        ctx.info("new AutoRoute, starting to sync", &[("route", &name)]);
        Ok(Outcome::next(Next::Syncing))
    }
}

wasmpilot_guest::export!(phase = Export<Initializing>);

#[cfg(test)]
mod tests {
    use super::*;
    use autoroute_types::phases::Phase;
    use serde_json::json;
    use wasmpilot_guest::testing::SyncTest;

    #[test]
    fn moves_to_syncing() {
        let route = json!({
            "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            "metadata": { "name": "example", "namespace": "default" },
            "spec": { "deploymentSelector": {} },
        });
        let report = SyncTest::new(route).run(&Export(Initializing)).unwrap();
        assert_eq!(report.next_phase, Phase::Syncing.name());
        assert_eq!(report.status, None);
        assert!(report.outputs.is_empty());
        assert_eq!(report.logs[0].field("route"), Some("example"));
    }

    #[test]
    fn a_route_without_spec_is_fatal() {
        let route = json!({ "apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": { "name": "x" } });
        let failed = SyncTest::new(route).run(&Export(Initializing)).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed.error.message().contains("missing field `spec`"),
            "{failed}"
        );
    }
}
