//! Which Deployments an AutoRoute routes to: the Syncing and Ready workers' shared rule.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;

use crate::{AutoRoute, Selector, SelectorError};

/// A Deployment that gets a Service and a VirtualService.
#[derive(Clone, Debug, PartialEq)]
pub struct RoutableDeployment<'a> {
    pub name: &'a str,
    /// The first port of the first container that declares one.
    pub port: i32,
    /// The Deployment's `spec.selector.matchLabels`: the Service's selector.
    pub pod_labels: BTreeMap<String, String>,
    pub deployment: &'a Deployment,
}

/// The names of the Deployments in the route's namespace whose labels match
/// `spec.deploymentSelector`, with or without a container port, sorted: what the seed's
/// `deploymentNames(inputDeployments)` records in `status.syncedDeployments`.
///
/// # Errors
/// If the route's selector is invalid (checked even when there are no Deployments).
pub fn matching_deployments<'a>(
    route: &AutoRoute,
    deployments: &'a [Deployment],
) -> Result<Vec<&'a Deployment>, SelectorError> {
    let selector = Selector::new(&route.spec.deployment_selector)?;
    let namespace = route.metadata.namespace.as_deref();
    let empty = BTreeMap::new();
    let mut matching: Vec<&'a Deployment> = deployments
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == namespace)
        .filter(|d| selector.matches(d.metadata.labels.as_ref().unwrap_or(&empty)))
        .filter(|d| d.metadata.name.is_some())
        .collect();
    matching.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(matching)
}

/// The names of [`matching_deployments`]: `status.syncedDeployments`.
pub fn deployment_names(matching: &[&Deployment]) -> Vec<String> {
    matching
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .collect()
}

/// The matching Deployments (see [`matching_deployments`]) that have a container port: those
/// get a Service and a VirtualService. Sorted by name.
///
/// # Errors
/// If the route's selector is invalid (checked even when there are no Deployments).
pub fn routable_deployments<'a>(
    route: &AutoRoute,
    deployments: &'a [Deployment],
) -> Result<Vec<RoutableDeployment<'a>>, SelectorError> {
    Ok(matching_deployments(route, deployments)?
        .into_iter()
        .filter_map(|d| {
            Some(RoutableDeployment {
                name: d.metadata.name.as_deref()?,
                port: first_container_port(d)?,
                pod_labels: d
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.match_labels.clone())
                    .unwrap_or_default(),
                deployment: d,
            })
        })
        .collect())
}

/// The first port of the first container that declares one (port 0 counts as none).
pub fn first_container_port(deployment: &Deployment) -> Option<i32> {
    deployment
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find_map(|c| c.ports.as_ref()?.first())
        .map(|p| p.container_port)
        .filter(|p| *p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(selector: serde_json::Value) -> AutoRoute {
        serde_json::from_value(json!({
            "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            "metadata": { "name": "r", "namespace": "default" },
            "spec": { "deploymentSelector": selector },
        }))
        .unwrap()
    }

    fn deployment(name: &str, ns: &str, app: &str, containers: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": ns, "labels": { "app": app } },
            "spec": {
                "selector": { "matchLabels": { "pod": name } },
                "template": { "spec": { "containers": containers } },
            },
        }))
        .unwrap()
    }

    #[test]
    fn first_port_of_first_container_with_ports() {
        let d = deployment(
            "a",
            "default",
            "web",
            json!([
                { "name": "sidecar" },
                { "name": "main", "ports": [{ "containerPort": 8080 }, { "containerPort": 9000 }] },
                { "name": "other", "ports": [{ "containerPort": 7000 }] },
            ]),
        );
        assert_eq!(first_container_port(&d), Some(8080));
        let d = deployment("a", "default", "web", json!([{ "name": "main" }]));
        assert_eq!(first_container_port(&d), None);
    }

    #[test]
    fn filters_namespace_labels_and_ports_and_sorts() {
        let port = json!([{ "name": "c", "ports": [{ "containerPort": 80 }] }]);
        let deployments = [
            deployment("zeta", "default", "web", port.clone()),
            deployment("alpha", "default", "web", port.clone()),
            deployment("other-ns", "prod", "web", port.clone()),
            deployment("other-app", "default", "api", port.clone()),
            deployment("no-port", "default", "web", json!([{ "name": "c" }])),
        ];
        let route = route(json!({ "matchLabels": { "app": "web" } }));
        let found = routable_deployments(&route, &deployments).unwrap();
        let names: Vec<&str> = found.iter().map(|r| r.name).collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert_eq!(found[0].port, 80);
        assert_eq!(
            found[0].pod_labels.get("pod").map(String::as_str),
            Some("alpha")
        );
    }

    #[test]
    fn invalid_selector_fails_even_without_deployments() {
        let route = route(json!({
            "matchExpressions": [{ "key": "app", "operator": "Matches", "values": ["x"] }]
        }));
        assert!(matches!(
            routable_deployments(&route, &[]),
            Err(SelectorError::UnknownOperator { .. })
        ));
    }
}
