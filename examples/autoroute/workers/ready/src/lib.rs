//! AutoRoute's Ready phase: stay Ready while `status.syncedDeployments` are the Deployments the
//! route selects and its routes (Services, VirtualServices, Gateway) are as Syncing made them; go back
//! to Syncing when either differs (a new or removed Deployment, or a route edited by hand).

use autoroute_types::phases::ready::{Export, Inputs, Next, Outcome, Worker};
use autoroute_types::{
    deployment_names, desired_routes, routable_deployments, route_differences, AutoRoute,
};
use serde_json::Value;
use wasmpilot_guest::{Context, WorkerError};

/// Compares `status.syncedDeployments` with the Deployments the route selects now, and
/// the route's own objects (inputs `services`, `virtualservices`, `gateways`, declared `owned`)
/// with the ones Syncing would apply.
#[derive(Default)]
pub struct Ready;

impl Worker for Ready {
    type Resource = AutoRoute;

    fn sync(
        &self,
        ctx: &Context,
        route: AutoRoute,
        inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        // Only the Deployments the route selects: the host applies spec.deploymentSelector.
        let deployments = inputs.deployments()?;
        let routable = routable_deployments(&deployments);
        let names = deployment_names(&deployments);
        let actual: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut synced: Vec<&str> = route
            .status
            .as_ref()
            .map(|s| s.synced_deployments.iter().map(String::as_str).collect())
            .unwrap_or_default();
        synced.sort_unstable();

        if synced != actual {
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
            return Ok(Outcome::next(Next::Syncing));
        }

        let route_name = route.metadata.name.as_deref().unwrap_or_default();
        let desired = desired_routes(route_name, route.metadata.namespace.as_deref(), &routable);
        let services = inputs.services()?;
        let virtual_services: Vec<Value> = inputs.virtualservices()?;
        let gateways: Vec<Value> = inputs.gateways()?;
        let differences = route_differences(&desired, &services, &virtual_services, &gateways);
        if differences.is_empty() {
            ctx.debug("routes are up to date", &[("deployments", &actual.len())]);
            return Ok(Outcome::stay());
        }
        ctx.info(
            "routes differ from what Syncing applies, syncing again",
            &[("differences", &differences.join("; "))],
        );
        Ok(Outcome::next(Next::Syncing))
    }
}

wasmpilot_guest::export!(phase = Export<Ready>);

#[cfg(test)]
mod tests {
    use super::*;
    use autoroute_types::phases::Phase;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    use serde_json::json;
    use wasmpilot_guest::testing::{
        objects_from_yaml, selected_by, FailedRun, SyncReport, SyncTest,
    };

    /// Where the host reads the route's selector (`selectorFrom` in operator.yaml).
    const SELECTOR: &str = "spec.deploymentSelector";

    fn route(index: usize, synced: &[&str]) -> Value {
        let mut route =
            objects_from_yaml(include_str!("../../testdata/routes.yaml")).unwrap()[index].clone();
        route["status"] = json!({ "phase": "Ready", "syncedDeployments": synced });
        route
    }

    fn deployments() -> Vec<Value> {
        objects_from_yaml(include_str!("../../testdata/deployments.yaml")).unwrap()
    }

    /// The routes Syncing applied for `route` over `deployments`, as Ready observes them.
    fn routes_of(route: &Value, deployments: &[Value]) -> (Vec<Service>, Vec<Value>, Vec<Value>) {
        let deployments: Vec<Deployment> = selected_by(route, SELECTOR, deployments)
            .into_iter()
            .map(|d| serde_json::from_value(d).unwrap())
            .collect();
        let route: AutoRoute = serde_json::from_value(route.clone()).unwrap();
        let routable = routable_deployments(&deployments);
        let routes = desired_routes(
            route.metadata.name.as_deref().unwrap(),
            route.metadata.namespace.as_deref(),
            &routable,
        );
        (
            routes.services,
            routes.virtual_services,
            vec![routes.gateway],
        )
    }

    fn run(route: &Value, deployments: &[Value]) -> Result<SyncReport, FailedRun> {
        let (services, virtual_services, gateways) = routes_of(route, deployments);
        run_observing(route, deployments, services, virtual_services, gateways)
    }

    fn run_observing(
        route: &Value,
        deployments: &[Value],
        services: Vec<Service>,
        virtual_services: Vec<Value>,
        gateways: Vec<Value>,
    ) -> Result<SyncReport, FailedRun> {
        SyncTest::new(route)
            .input_selected("deployments", SELECTOR, deployments)
            .fields(
                "deployments",
                autoroute_types::phases::ready::DEPLOYMENTS_FIELDS,
            )
            .input("services", services)
            .input("virtualservices", virtual_services)
            .input("gateways", gateways)
            .run(&Export(Ready))
    }

    #[test]
    fn stays_ready_when_in_sync() {
        let report = run(
            &route(0, &["api", "canary", "web", "worker"]),
            &deployments(),
        )
        .unwrap();
        assert_eq!(report.next_phase, Phase::Ready.name());
        assert_eq!(report.status, None);
        assert!(report.outputs.is_empty());
    }

    #[test]
    fn order_of_synced_deployments_does_not_matter() {
        let report = run(
            &route(0, &["web", "api", "canary", "worker"]),
            &deployments(),
        )
        .unwrap();
        assert_eq!(report.next_phase, Phase::Ready.name());
    }

    #[test]
    fn a_new_matching_deployment_means_syncing() {
        let report = run(&route(0, &["api", "web", "worker"]), &deployments()).unwrap();
        assert_eq!(report.next_phase, Phase::Syncing.name());
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
        let report = run(&route(0, &["api", "canary", "web", "worker"]), &without_web).unwrap();
        assert_eq!(report.next_phase, Phase::Syncing.name());
    }

    #[test]
    fn other_namespaces_and_labels_do_not_count_but_portless_deployments_do() {
        // `worker` matches without a port: recorded (as the seed's deploymentNames does), not
        // routed. `unrelated` has other labels, staging/web is elsewhere; route 1's expressions
        // leave out the canary and `worker` (no track).
        let report = run(&route(1, &["api", "web"]), &deployments()).unwrap();
        assert_eq!(report.next_phase, Phase::Ready.name());
        let report = run(&route(0, &["api", "canary", "web"]), &deployments()).unwrap();
        assert_eq!(
            report.next_phase,
            Phase::Syncing.name(),
            "worker is missing from the record"
        );
    }

    #[test]
    fn no_status_yet_with_matches_means_syncing() {
        let mut route = route(0, &[]);
        route.as_object_mut().unwrap().remove("status");
        let report = run(&route, &deployments()).unwrap();
        assert_eq!(report.next_phase, Phase::Syncing.name());
        let report = run(&route, &[]).unwrap();
        assert_eq!(report.next_phase, Phase::Ready.name());
    }

    #[test]
    fn a_hand_edited_route_means_syncing() {
        let route = route(0, &["api", "canary", "web", "worker"]);
        let (mut services, virtual_services, gateways) = routes_of(&route, &deployments());
        services[0].spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 9999;
        let report =
            run_observing(&route, &deployments(), services, virtual_services, gateways).unwrap();
        assert_eq!(report.next_phase, Phase::Syncing.name());
        let log = report
            .logs
            .iter()
            .find(|r| r.message.contains("routes differ"))
            .unwrap();
        assert!(
            log.field("differences")
                .is_some_and(|d| d.starts_with("Service api: ports are")),
            "{log:?}"
        );
    }

    #[test]
    fn a_missing_gateway_means_syncing() {
        let route = route(0, &["api", "canary", "web", "worker"]);
        let (services, virtual_services, _) = routes_of(&route, &deployments());
        let report =
            run_observing(&route, &deployments(), services, virtual_services, vec![]).unwrap();
        assert_eq!(report.next_phase, Phase::Syncing.name());
    }
}
