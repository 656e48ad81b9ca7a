//! AutoRoute's Syncing phase: the Service, VirtualService and Gateway that route ingress
//! traffic to every selected Deployment, then `Ready`.

use autoroute_types::phases::syncing::{Export, Inputs, Next, Outcome, Worker};
use autoroute_types::routes::hostname;
use autoroute_types::{
    deployment_names, desired_routes, routable_deployments, AutoRoute, AutoRouteStatus,
};
use wasmpilot_guest::{Context, WorkerError};

/// Builds the outputs for the routable Deployments (see [`routable_deployments`]):
/// per Deployment a Service and a VirtualService `<deployment>.<route>`, plus one
/// Gateway `<route>` for hosts `*.<route>` on the Istio ingress gateway.
#[derive(Default)]
pub struct Syncing;

impl Worker for Syncing {
    type Resource = AutoRoute;

    fn sync(
        &self,
        ctx: &Context,
        route: AutoRoute,
        inputs: Inputs,
    ) -> Result<Outcome, WorkerError> {
        // Only the Deployments the route selects: the host applies spec.deploymentSelector.
        let deployments = inputs.deployments()?;
        let route_name = route
            .metadata
            .name
            .as_deref()
            .ok_or_else(|| WorkerError::fatal("the AutoRoute has no metadata.name"))?;
        let namespace = route.metadata.namespace.as_deref();
        let routable = routable_deployments(&deployments);
        ctx.info(
            "selected deployments",
            &[
                ("route", &route_name),
                ("selected", &deployments.len()),
                ("routable", &routable.len()),
            ],
        );

        let routes = desired_routes(route_name, namespace, &routable);
        for deployment in &routable {
            ctx.info(
                "routing deployment",
                &[
                    ("deployment", &deployment.name),
                    ("hostname", &hostname(deployment, route_name)),
                    ("port", &deployment.port),
                ],
            );
        }
        let mut outcome = Outcome::next(Next::Ready).gateway(&routes.gateway)?;
        for (service, virtual_service) in routes.services.iter().zip(&routes.virtual_services) {
            outcome = outcome.service(service)?.virtual_service(virtual_service)?;
        }

        let status = AutoRouteStatus {
            synced_deployments: deployment_names(&deployments),
            ..AutoRouteStatus::default()
        };
        ctx.info(
            "ensuring the gateway, services and virtual services",
            &[
                ("gateway", &route_name),
                ("services", &routable.len()),
                ("virtualServices", &routable.len()),
            ],
        );
        Ok(outcome.status(status))
    }
}

wasmpilot_guest::export!(phase = Export<Syncing>);

#[cfg(test)]
mod tests {
    use super::*;
    use autoroute_types::phases::Phase;
    use k8s_openapi::api::core::v1::Service;
    use serde_json::{json, Value};
    use wasmpilot_guest::testing::{objects_from_yaml, SyncReport, SyncTest};

    fn fixtures(yaml: &str) -> Vec<Value> {
        objects_from_yaml(yaml).unwrap()
    }

    fn routes() -> Vec<Value> {
        fixtures(include_str!("../../testdata/routes.yaml"))
    }

    fn deployments() -> Vec<Value> {
        fixtures(include_str!("../../testdata/deployments.yaml"))
    }

    fn run(route: &Value, deployments: &[Value]) -> SyncReport {
        SyncTest::new(route)
            .phase(Phase::Syncing)
            .input_selected("deployments", "spec.deploymentSelector", deployments)
            // As the host sends them: only the fields operator.yaml declares.
            .fields(
                "deployments",
                autoroute_types::phases::syncing::DEPLOYMENTS_FIELDS,
            )
            .run(&Export(Syncing))
            .unwrap()
    }

    fn names(objects: Vec<&Value>) -> Vec<&str> {
        objects
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect()
    }

    #[test]
    fn routes_every_matching_deployment_with_a_port() {
        let report = run(&routes()[0], &deployments());
        assert_eq!(report.next_phase, Phase::Ready.name());
        assert_eq!(
            report.status,
            Some(json!({ "syncedDeployments": ["api", "canary", "web", "worker"] }))
        );
        assert_eq!(
            names(report.outputs_of_kind("Service")),
            ["api", "canary", "web"]
        );
        assert_eq!(
            names(report.outputs_of_kind("VirtualService")),
            ["api.example", "canary.example", "web.example"]
        );
        assert_eq!(names(report.outputs_of_kind("Gateway")), ["example"]);
        assert_eq!(report.outputs.len(), 7);
        assert!(report
            .outputs
            .iter()
            .all(|o| o["metadata"]["namespace"] == "default"));
        assert_eq!(report.requeue_after, None);
    }

    #[test]
    fn service_uses_the_first_port_and_the_pod_selector() {
        let report = run(&routes()[0], &deployments());
        let services: Vec<Service> = report.typed_outputs("Service");
        let api = services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some("api"))
            .unwrap();
        let spec = api.spec.as_ref().unwrap();
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), 9090));
        assert_eq!(
            spec.selector,
            Some([("app".to_owned(), "api".to_owned())].into())
        );
        let web = report.output("Service", "web").unwrap();
        assert_eq!(web["apiVersion"], "v1");
        assert_eq!(web["spec"]["ports"][0]["port"], 8080);
    }

    #[test]
    fn virtual_service_and_gateway_shapes() {
        let report = run(&routes()[0], &deployments());
        let vs = report.output("VirtualService", "web.example").unwrap();
        assert_eq!(vs["apiVersion"], "networking.istio.io/v1alpha3");
        assert_eq!(
            vs["spec"],
            json!({
                "hosts": ["web.example"],
                "gateways": ["example"],
                "http": [{
                    "match": [{ "uri": { "prefix": "/" } }],
                    "route": [{ "destination": { "host": "web", "port": { "number": 8080 } } }],
                }],
            })
        );
        let gw = report.output("Gateway", "example").unwrap();
        assert_eq!(
            gw["spec"],
            json!({
                "selector": { "istio": "ingressgateway" },
                "servers": [{
                    "port": { "number": 80, "name": "http", "protocol": "HTTP" },
                    "hosts": ["*.example"],
                }],
            })
        );
    }

    #[test]
    fn match_expressions_narrow_the_selection() {
        let report = run(&routes()[1], &deployments());
        assert_eq!(
            report.status,
            Some(json!({ "syncedDeployments": ["api", "web"] }))
        );
        assert_eq!(
            names(report.outputs_of_kind("VirtualService")),
            ["api.stable", "web.stable"]
        );
    }

    #[test]
    fn no_deployments_still_makes_the_gateway() {
        let report = run(&routes()[0], &[]);
        assert_eq!(report.status, Some(json!({ "syncedDeployments": [] })));
        assert_eq!(names(report.outputs_of_kind("Gateway")), ["example"]);
        assert_eq!(report.outputs.len(), 1);
    }

    #[test]
    fn logs_what_it_routes() {
        let report = run(&routes()[0], &deployments());
        let routed: Vec<&str> = report
            .logs
            .iter()
            .filter(|r| r.message == "routing deployment")
            .filter_map(|r| r.field("hostname"))
            .collect();
        assert_eq!(routed, ["api.example", "canary.example", "web.example"]);
        assert!(report.logged("selected deployments"));
    }

    #[test]
    fn undeclared_input_is_fatal() {
        let failed = SyncTest::new(&routes()[0])
            .run(&Export(Syncing))
            .unwrap_err();
        assert!(failed
            .error
            .message()
            .contains("unknown input `deployments`"));
    }

    #[test]
    fn a_deployment_that_does_not_parse_is_fatal() {
        let failed = SyncTest::new(&routes()[0])
            .input_json(
                "deployments",
                [r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"bad","namespace":"default"},"spec":{"replicas":"many"}}"#.to_owned()],
            )
            .run(&Export(Syncing))
            .unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed
                .error
                .message()
                .contains("apps/v1 Deployment default/bad"),
            "{failed}"
        );
    }
}
