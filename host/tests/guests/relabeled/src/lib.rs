//! A test-only "next version" of AutoRoute's Syncing worker: the same decision (built from the
//! example's own `autoroute-types`), plus the label `candidate: relabeled` on every Service. The
//! shadow and replay tests use it as a candidate that differs in a known, countable way.

use autoroute_types::phases::syncing::{Export, Inputs, Next, Outcome, Worker};
use autoroute_types::{
    deployment_names, desired_routes, routable_deployments, AutoRoute, AutoRouteStatus,
};
use k8s_openapi::api::core::v1::Service;
use wasmpilot_guest::{Context, WorkerError};

#[derive(Default)]
struct Relabeled;

impl Worker for Relabeled {
    type Resource = AutoRoute;

    fn sync(&self, _: &Context, route: AutoRoute, inputs: Inputs) -> Result<Outcome, WorkerError> {
        let deployments = inputs.deployments()?;
        let name = route
            .metadata
            .name
            .as_deref()
            .ok_or_else(|| WorkerError::fatal("the AutoRoute has no metadata.name"))?;
        let routable = routable_deployments(&deployments);
        let routes = desired_routes(name, route.metadata.namespace.as_deref(), &routable);
        let mut outcome = Outcome::next(Next::Ready).gateway(&routes.gateway)?;
        for (service, virtual_service) in routes.services.iter().zip(&routes.virtual_services) {
            outcome = outcome
                .service(&relabeled(service.clone()))?
                .virtual_service(virtual_service)?;
        }
        let status = AutoRouteStatus {
            synced_deployments: deployment_names(&deployments),
            ..AutoRouteStatus::default()
        };
        Ok(outcome.status(status))
    }
}

/// The Service with `metadata.labels.candidate = relabeled`.
fn relabeled(mut service: Service) -> Service {
    service
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("candidate".into(), "relabeled".into());
    service
}

wasmpilot_guest::export!(phase = Export<Relabeled>);
