//! The AutoRoute custom resource, its typed phase API (`phases`, written by `wasmpilot
//! generate`), and what the Syncing and Ready workers share: which of the selected Deployments
//! get a route, and the routes (Service, VirtualService, Gateway) themselves.
//!
//! The typed API takes only what operator.yaml declares. Syncing may return a Service:
//!
//! ```
//! use autoroute_types::phases::syncing::{Next, Outcome};
//! let service = k8s_openapi::api::core::v1::Service::default();
//! let _ = Outcome::next(Next::Ready).service(&service);
//! ```
//!
//! but not a Deployment (not among its outputs), and Ready returns no outputs at all:
//!
//! ```compile_fail,E0599
//! use autoroute_types::phases::syncing::{Next, Outcome};
//! let deployment = k8s_openapi::api::apps::v1::Deployment::default();
//! let _ = Outcome::next(Next::Ready).deployment(&deployment);
//! ```
//!
//! ```compile_fail,E0599
//! use autoroute_types::phases::ready::Outcome;
//! let service = k8s_openapi::api::core::v1::Service::default();
//! let _ = Outcome::stay().service(&service);
//! ```

pub mod phases;
pub mod routable;
pub mod routes;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wasmpilot_guest::HostStatus;

pub use routable::{deployment_names, routable_deployments, RoutableDeployment};
pub use routes::{desired_routes, route_differences, Routes};

/// Routes ingress traffic through an Istio gateway to every Deployment the selector matches.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "examples.io",
    version = "v1",
    kind = "AutoRoute",
    namespaced,
    status = "AutoRouteStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AutoRouteSpec {
    /// Which Deployments (in the AutoRoute's namespace) to route to.
    pub deployment_selector: LabelSelector,
}

/// What the operator observed; `syncedDeployments` is how Ready notices a change.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoRouteStatus {
    /// Every Deployment the selector matches, with or without a container port (only those
    /// with one get routes), sorted. When the set of matching Deployments differs from it, the
    /// operator syncs again.
    #[serde(default)]
    pub synced_deployments: Vec<String>,
    /// The fields the wasmpilot host writes (phase, conditions, …).
    #[serde(flatten)]
    pub host: HostStatus,
}

/// The AutoRoute CRD as YAML, as committed in `examples/autoroute/crds/autoroute.yaml`.
///
/// # Errors
/// If the CRD does not serialize (it always does; serde_yaml's API is fallible).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&AutoRoute::crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crd_is_up_to_date() {
        let generated = crd_yaml().unwrap();
        let committed = include_str!("../../crds/autoroute.yaml");
        assert!(
            generated == committed,
            "examples/autoroute/crds/autoroute.yaml is stale; regenerate it with\n  \
             cargo run -p autoroute-types --bin crdgen > examples/autoroute/crds/autoroute.yaml"
        );
    }

    #[test]
    fn status_schema_keeps_host_fields() {
        let crd = serde_json::to_value(AutoRoute::crd()).unwrap();
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"];
        for field in [
            "syncedDeployments",
            "phase",
            "observedGeneration",
            "conditions",
            "moduleDigest",
        ] {
            assert!(
                status.get(field).is_some(),
                "status.{field} missing from the CRD schema"
            );
        }
    }

    #[test]
    fn parses_a_route_with_host_status() {
        let route: AutoRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            "metadata": { "name": "example", "namespace": "default" },
            "spec": { "deploymentSelector": { "matchLabels": { "app": "web" } } },
            "status": { "phase": "Ready", "syncedDeployments": ["web"] }
        }))
        .unwrap();
        let status = route.status.unwrap();
        assert_eq!(status.synced_deployments, ["web"]);
        assert_eq!(status.host.phase.as_deref(), Some("Ready"));
    }
}
