//! A test-only "next version" of AutoRoute's Syncing worker: the same decision (built from the
//! example's own `autoroute-types`), plus the label `candidate: relabeled` on every Service. The
//! shadow and replay tests use it as a candidate that differs in a known, countable way.

use autoroute_types::{
    deployment_names, desired_routes, matching_deployments, routable_deployments, AutoRoute,
    AutoRouteStatus,
};
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::Value;
use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};

#[derive(Default)]
struct Relabeled;

impl PhaseWorker for Relabeled {
    type Resource = AutoRoute;

    fn sync(&self, _: &Context, route: AutoRoute, inputs: &Inputs) -> Result<Outcome, WorkerError> {
        let deployments: Vec<Deployment> = inputs.list("deployments")?;
        let name = route
            .metadata
            .name
            .as_deref()
            .ok_or_else(|| WorkerError::fatal("the AutoRoute has no metadata.name"))?;
        let invalid =
            |err| WorkerError::fatal(format!("spec.deploymentSelector is invalid: {err}"));
        let matching = matching_deployments(&route, &deployments).map_err(invalid)?;
        let routable = routable_deployments(&route, &deployments).map_err(invalid)?;
        let routes = desired_routes(name, route.metadata.namespace.as_deref(), &routable);
        let mut outcome = Outcome::next("Ready").output(&routes.gateway)?;
        for (service, virtual_service) in routes.services.iter().zip(&routes.virtual_services) {
            outcome = outcome
                .output(&relabeled(service.clone()))?
                .output(virtual_service)?;
        }
        let status = AutoRouteStatus {
            synced_deployments: deployment_names(&matching),
            ..AutoRouteStatus::default()
        };
        Ok(outcome.status(status))
    }
}

/// The object with `metadata.labels.candidate = relabeled`.
fn relabeled(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("candidate".into(), "relabeled".into());
        }
    }
    object
}

wasmpilot_guest::export!(phase = Relabeled);
