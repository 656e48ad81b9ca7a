//! AutoRoute's Ready phase: stay Ready while the routed Deployments are the ones the
//! route selects; go back to Syncing when they differ.

use autoroute_types::{routable_deployments, AutoRoute};
use k8s_openapi::api::apps::v1::Deployment;
use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};

/// Compares `status.syncedDeployments` with the Deployments that should have routes now.
#[derive(Default)]
pub struct Ready;

impl PhaseWorker for Ready {
    type Resource = AutoRoute;

    fn sync(
        &self,
        ctx: &Context,
        route: AutoRoute,
        inputs: &Inputs,
    ) -> Result<Outcome, WorkerError> {
        let deployments: Vec<Deployment> = inputs.list("deployments")?;
        let routable = routable_deployments(&route, &deployments).map_err(|err| {
            WorkerError::fatal(format!("spec.deploymentSelector is invalid: {err}"))
        })?;
        let actual: Vec<&str> = routable.iter().map(|d| d.name).collect();
        let mut synced: Vec<&str> = route
            .status
            .as_ref()
            .map(|s| s.synced_deployments.iter().map(String::as_str).collect())
            .unwrap_or_default();
        synced.sort_unstable();

        if synced == actual {
            ctx.debug("routes are up to date", &[("deployments", &actual.len())]);
            return Ok(Outcome::next("Ready"));
        }
        let added: Vec<&str> = actual
            .iter()
            .filter(|d| !synced.contains(d))
            .copied()
            .collect();
        let removed: Vec<&str> = synced
            .iter()
            .filter(|d| !actual.contains(d))
            .copied()
            .collect();
        ctx.info(
            "routed deployments changed, syncing again",
            &[("added", &added.join(",")), ("removed", &removed.join(","))],
        );
        Ok(Outcome::next("Syncing"))
    }
}

wasmpilot_guest::export!(phase = Ready);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use wasmpilot_guest::testing::{objects_from_yaml, FailedRun, SyncReport, SyncTest};

    fn route(index: usize, synced: &[&str]) -> Value {
        let mut route =
            objects_from_yaml(include_str!("../../testdata/routes.yaml")).unwrap()[index].clone();
        route["status"] = json!({ "phase": "Ready", "syncedDeployments": synced });
        route
    }

    fn deployments() -> Vec<Value> {
        objects_from_yaml(include_str!("../../testdata/deployments.yaml")).unwrap()
    }

    fn run(route: &Value, deployments: &[Value]) -> Result<SyncReport, FailedRun> {
        SyncTest::new(route)
            .input("deployments", deployments)
            .run(&Ready)
    }

    #[test]
    fn stays_ready_when_in_sync() {
        let report = run(&route(0, &["api", "canary", "web"]), &deployments()).unwrap();
        assert_eq!(report.next_phase, "Ready");
        assert_eq!(report.status, None);
        assert!(report.outputs.is_empty());
    }

    #[test]
    fn order_of_synced_deployments_does_not_matter() {
        let report = run(&route(0, &["web", "api", "canary"]), &deployments()).unwrap();
        assert_eq!(report.next_phase, "Ready");
    }

    #[test]
    fn a_new_matching_deployment_means_syncing() {
        let report = run(&route(0, &["api", "web"]), &deployments()).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        let log = report
            .logs
            .iter()
            .find(|r| r.message.contains("changed"))
            .unwrap();
        assert_eq!(log.field("added"), Some("canary"));
        assert_eq!(log.field("removed"), Some(""));
    }

    #[test]
    fn a_deleted_deployment_means_syncing() {
        let without_web: Vec<Value> = deployments()
            .into_iter()
            .filter(|d| {
                !(d["metadata"]["name"] == "web" && d["metadata"]["namespace"] == "default")
            })
            .collect();
        let report = run(&route(0, &["api", "canary", "web"]), &without_web).unwrap();
        assert_eq!(report.next_phase, "Syncing");
    }

    #[test]
    fn other_namespaces_labels_and_portless_deployments_do_not_count() {
        // `worker` matches but has no port, `unrelated` has other labels, staging/web is elsewhere.
        let report = run(&route(1, &["api", "web"]), &deployments()).unwrap();
        assert_eq!(report.next_phase, "Ready");
    }

    #[test]
    fn no_status_yet_with_matches_means_syncing() {
        let mut route = route(0, &[]);
        route.as_object_mut().unwrap().remove("status");
        let report = run(&route, &deployments()).unwrap();
        assert_eq!(report.next_phase, "Syncing");
        let report = run(&route, &[]).unwrap();
        assert_eq!(report.next_phase, "Ready");
    }

    #[test]
    fn invalid_selector_is_fatal() {
        let failed = run(&route(2, &[]), &deployments()).unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed
                .error
                .message()
                .contains("unknown operator \"Equals\""),
            "{failed}"
        );
    }
}
