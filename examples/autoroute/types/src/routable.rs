//! Which of the selected Deployments an AutoRoute routes to, and the names it records: the
//! Syncing and Ready workers' shared rule.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;

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

/// The names of the selected Deployments (the `deployments` input: the host hands over only
/// those in the route's namespace matching `spec.deploymentSelector`), with or without a
/// container port, sorted: what the seed's `deploymentNames(inputDeployments)` records in
/// `status.syncedDeployments`.
pub fn deployment_names(deployments: &[Deployment]) -> Vec<String> {
    let mut names: Vec<String> = deployments
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .collect();
    names.sort_unstable();
    names
}

/// The selected Deployments that have a container port: those get a Service and a
/// VirtualService. Sorted by name.
pub fn routable_deployments(deployments: &[Deployment]) -> Vec<RoutableDeployment<'_>> {
    let mut routable: Vec<RoutableDeployment<'_>> = deployments
        .iter()
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
        .collect();
    routable.sort_by(|a, b| a.name.cmp(b.name));
    routable
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
    fn routes_the_deployments_with_a_port_and_names_them_all_sorted() {
        let port = json!([{ "name": "c", "ports": [{ "containerPort": 80 }] }]);
        let deployments = [
            deployment("zeta", "default", "web", port.clone()),
            deployment("alpha", "default", "web", port.clone()),
            deployment("no-port", "default", "web", json!([{ "name": "c" }])),
        ];
        let found = routable_deployments(&deployments);
        let names: Vec<&str> = found.iter().map(|r| r.name).collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert_eq!(found[0].port, 80);
        assert_eq!(
            found[0].pod_labels.get("pod").map(String::as_str),
            Some("alpha")
        );
        assert_eq!(deployment_names(&deployments), ["alpha", "no-port", "zeta"]);
    }
}
