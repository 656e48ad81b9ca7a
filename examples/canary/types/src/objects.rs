//! The objects a CanaryDeployment `<name>` consists of, built the same way by every phase:
//!
//! - Deployments `<name>-primary` (the stable version) and `<name>-canary` (the version under
//!   analysis), each a copy of a source Deployment's spec whose pods carry the label
//!   `canary.examples.io/pod: <deployment name>`, which is also the selector (so they never
//!   select the target's pods, or each other's);
//! - Services `<name>-primary` and `<name>-canary` for them, and `<name>`, the name clients
//!   use (it selects the primary's pods, so traffic outside the mesh reaches the stable version);
//! - an Istio VirtualService `<name>` for the host `<name>`: per port, `100 - weight` percent
//!   to the primary Service and `weight` percent to the canary Service.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{json, Value};

use crate::CanaryDeployment;

/// The pod label (and selector) of the primary's and the canary's pods: the Deployment's name.
pub const POD_LABEL: &str = "canary.examples.io/pod";
/// On every object of a CanaryDeployment: its name.
pub const CANARY_LABEL: &str = "canary.examples.io/canary";
/// On every object of a CanaryDeployment: `primary`, `canary` or `front`.
pub const ROLE_LABEL: &str = "canary.examples.io/role";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "canary-operator";
/// On the primary and canary Deployments: the revision of the template they run.
pub const REVISION_ANNOTATION: &str = "canary.examples.io/revision";
/// The Istio API version of the VirtualService (served by Istio and by `crds/istio.yaml`).
pub const VIRTUAL_SERVICE_API_VERSION: &str = "networking.istio.io/v1alpha3";

/// Why a CanaryDeployment (or its target) cannot be turned into objects. Permanent until the
/// resource or the target changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSpec(pub String);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSpec {}

/// The two Deployments of a rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Canary,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Canary => "canary",
        }
    }
}

/// The names of a CanaryDeployment's objects, and its namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// The CanaryDeployment's name: the front Service and the VirtualService.
    pub front: String,
    pub primary: String,
    pub canary: String,
    pub namespace: String,
    /// The target Deployment (`spec.deployment`).
    pub target: String,
}

impl Names {
    /// Longest CanaryDeployment name: `<name>-primary` must stay a valid Service name (63).
    pub const MAX_NAME_LEN: usize = 55;

    /// # Errors
    /// When the CanaryDeployment has no name or namespace, or a name longer than
    /// [`MAX_NAME_LEN`](Self::MAX_NAME_LEN).
    pub fn of(cd: &CanaryDeployment) -> Result<Self, InvalidSpec> {
        let name = cd
            .metadata
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InvalidSpec("the CanaryDeployment has no metadata.name".into()))?;
        if name.len() > Self::MAX_NAME_LEN {
            return Err(InvalidSpec(format!(
                "metadata.name {name:?} is longer than {} characters: {name}-primary would not be a valid Service name",
                Self::MAX_NAME_LEN
            )));
        }
        let namespace = cd
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InvalidSpec("the CanaryDeployment has no metadata.namespace".into()))?;
        if cd.spec.deployment.is_empty() {
            return Err(InvalidSpec("spec.deployment is empty".into()));
        }
        Ok(Self {
            front: name.to_owned(),
            primary: format!("{name}-primary"),
            canary: format!("{name}-canary"),
            namespace,
            target: cd.spec.deployment.clone(),
        })
    }

    /// The Deployment (and Service) name of `role`.
    pub fn of_role(&self, role: Role) -> &str {
        match role {
            Role::Primary => &self.primary,
            Role::Canary => &self.canary,
        }
    }

    /// The cluster-local host name of Service `service`.
    pub fn host(&self, service: &str) -> String {
        format!("{service}.{}.svc.cluster.local", self.namespace)
    }

    fn labels(&self, role: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
            (CANARY_LABEL.to_owned(), self.front.clone()),
            (ROLE_LABEL.to_owned(), role.to_owned()),
        ])
    }
}

/// The Deployment named `name` among `deployments` (a phase's input: all of one namespace).
pub fn find<'a>(deployments: &'a [Deployment], name: &str) -> Option<&'a Deployment> {
    deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(name))
}

/// The revision a primary or canary Deployment runs, from its annotation.
pub fn revision_annotation(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)
        .map(String::as_str)
}

/// How many pods the primary runs, and the canary during an analysis: the target's
/// `spec.replicas`, at least 1 (so the target itself may be scaled to zero), 1 without a target.
pub fn replicas_of(target: Option<&Deployment>) -> i32 {
    target
        .and_then(|t| t.spec.as_ref()?.replicas)
        .unwrap_or(1)
        .max(1)
}

/// The spec of `source` (the target, or an existing primary or canary) to copy, checked to
/// have a pod template with containers.
///
/// # Errors
/// When `source` has no spec or its pod template has no containers.
pub fn template_source(source: &Deployment) -> Result<&DeploymentSpec, InvalidSpec> {
    let name = source.metadata.name.as_deref().unwrap_or_default();
    let spec = source
        .spec
        .as_ref()
        .ok_or_else(|| InvalidSpec(format!("Deployment {name} has no spec")))?;
    let has_containers = spec
        .template
        .spec
        .as_ref()
        .is_some_and(|p| !p.containers.is_empty());
    if !has_containers {
        return Err(InvalidSpec(format!(
            "Deployment {name} has no containers in its pod template"
        )));
    }
    Ok(spec)
}

/// The `role` Deployment: `source`'s spec with `replicas` pods, labelled and selected by
/// `canary.examples.io/pod: <its name>`, annotated with `revision` (what `source`'s template is).
pub fn deployment(
    names: &Names,
    role: Role,
    source: &DeploymentSpec,
    replicas: i32,
    revision: &str,
) -> Deployment {
    let name = names.of_role(role);
    let selector = BTreeMap::from([(POD_LABEL.to_owned(), name.to_owned())]);
    let mut spec = source.clone();
    spec.replicas = Some(replicas);
    spec.selector = LabelSelector {
        match_labels: Some(selector.clone()),
        match_expressions: None,
    };
    let template_meta = spec
        .template
        .metadata
        .get_or_insert_with(ObjectMeta::default);
    template_meta
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(selector);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(names.namespace.clone()),
            labels: Some(names.labels(role.as_str())),
            annotations: Some(BTreeMap::from([(
                REVISION_ANNOTATION.to_owned(),
                revision.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The Services `<name>-primary`, `<name>-canary` and `<name>` (selecting the primary's pods),
/// each with port `http-<port>` → `<port>` for every port of `spec.ports`.
///
/// # Errors
/// When `spec.ports` is empty or has a port outside 1..=65535.
pub fn services(cd: &CanaryDeployment, names: &Names) -> Result<Vec<Service>, InvalidSpec> {
    let ports = checked_ports(cd)?;
    let service = |name: &str, role: &str, pods: &str| Service {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(names.namespace.clone()),
            labels: Some(names.labels(role)),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([(POD_LABEL.to_owned(), pods.to_owned())])),
            ports: Some(
                ports
                    .iter()
                    .map(|&port| ServicePort {
                        name: Some(format!("http-{port}")),
                        port,
                        target_port: Some(IntOrString::Int(port)),
                        // Server-side apply on Kubernetes 1.20 needs the protocol (a list map key).
                        protocol: Some("TCP".to_owned()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    Ok(vec![
        service(&names.primary, "primary", &names.primary),
        service(&names.canary, "canary", &names.canary),
        service(&names.front, "front", &names.primary),
    ])
}

/// The VirtualService `<name>`: for each port, `100 - weight` percent of the requests to host
/// `<name>` go to the primary Service and `weight` percent to the canary Service.
///
/// # Errors
/// As [`services`].
pub fn virtual_service(
    cd: &CanaryDeployment,
    names: &Names,
    canary_weight: i32,
) -> Result<Value, InvalidSpec> {
    let weight = canary_weight.clamp(0, 100);
    let ports = checked_ports(cd)?;
    let front = &names.front;
    let ns = &names.namespace;
    let routes: Vec<Value> = ports
        .iter()
        .map(|port| {
            let destination = |service: &str, weight: i32| {
                json!({
                    "destination": { "host": names.host(service), "port": { "number": port } },
                    "weight": weight,
                })
            };
            json!({
                "name": format!("port-{port}"),
                "match": [{ "port": port }],
                "route": [
                    destination(&names.primary, 100 - weight),
                    destination(&names.canary, weight),
                ],
            })
        })
        .collect();
    Ok(json!({
        "apiVersion": VIRTUAL_SERVICE_API_VERSION,
        "kind": "VirtualService",
        "metadata": {
            "name": front,
            "namespace": ns,
            "labels": names.labels("front"),
        },
        "spec": {
            "hosts": [front, format!("{front}.{ns}"), format!("{front}.{ns}.svc"), names.host(front)],
            "http": routes,
        },
    }))
}

/// The canary's weight in a VirtualService built by [`virtual_service`] (its first route).
pub fn canary_weight_of(virtual_service: &Value) -> Option<i64> {
    virtual_service
        .pointer("/spec/http/0/route/1/weight")
        .and_then(Value::as_i64)
}

fn checked_ports(cd: &CanaryDeployment) -> Result<&[i32], InvalidSpec> {
    let ports = cd.spec.ports.as_slice();
    if ports.is_empty() {
        return Err(InvalidSpec("spec.ports is empty".into()));
    }
    if let Some(port) = ports.iter().find(|p| !(1..=65535).contains(*p)) {
        return Err(InvalidSpec(format!(
            "spec.ports has {port}; ports are 1 to 65535"
        )));
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary(name: &str, ports: Value) -> CanaryDeployment {
        serde_json::from_value(json!({
            "apiVersion": "canary.examples.io/v1", "kind": "CanaryDeployment",
            "metadata": { "name": name, "namespace": "shop" },
            "spec": { "deployment": "web", "ports": ports },
        }))
        .unwrap()
    }

    fn target() -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": {
                "replicas": 3,
                "selector": { "matchLabels": { "app": "web" } },
                "strategy": { "type": "RollingUpdate" },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{ "name": "web", "image": "web:2" }] },
                },
            },
        }))
        .unwrap()
    }

    #[test]
    fn names() {
        let names = Names::of(&canary("web", json!([80]))).unwrap();
        assert_eq!(
            (
                names.front.as_str(),
                names.primary.as_str(),
                names.canary.as_str()
            ),
            ("web", "web-primary", "web-canary")
        );
        assert_eq!(
            names.host("web-canary"),
            "web-canary.shop.svc.cluster.local"
        );
        let long = "x".repeat(56);
        let err = Names::of(&canary(&long, json!([80]))).unwrap_err();
        assert!(err.0.contains("longer than 55"), "{err}");
    }

    #[test]
    fn deployment_copies_the_source_with_its_own_selector() {
        let names = Names::of(&canary("web", json!([80]))).unwrap();
        let target = target();
        let source = template_source(&target).unwrap();
        let d = deployment(&names, Role::Canary, source, 2, "abc");
        assert_eq!(d.metadata.name.as_deref(), Some("web-canary"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(revision_annotation(&d), Some("abc"));
        let labels = d.metadata.labels.clone().unwrap();
        assert_eq!(labels[ROLE_LABEL], "canary");
        assert_eq!(labels[CANARY_LABEL], "web");
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(2));
        let selector = BTreeMap::from([(POD_LABEL.to_owned(), "web-canary".to_owned())]);
        assert_eq!(spec.selector.match_labels.as_ref(), Some(&selector));
        let pod_labels = spec.template.metadata.as_ref().unwrap().labels.clone();
        assert_eq!(
            pod_labels,
            Some(BTreeMap::from([
                ("app".to_owned(), "web".to_owned()),
                (POD_LABEL.to_owned(), "web-canary".to_owned()),
            ]))
        );
        assert_eq!(
            spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
            Some("RollingUpdate")
        );

        // Copying the canary into the primary replaces the pod label, it does not add one.
        let primary = deployment(&names, Role::Primary, spec, 3, "abc");
        let pod_labels = primary.spec.unwrap().template.metadata.unwrap().labels;
        assert_eq!(
            pod_labels.unwrap()[POD_LABEL],
            "web-primary",
            "pod label of the primary"
        );
    }

    #[test]
    fn a_source_without_containers_is_invalid() {
        let mut target = target();
        if let Some(spec) = target.spec.as_mut() {
            spec.template.spec = None;
        }
        let err = template_source(&target).unwrap_err();
        assert!(err.0.contains("no containers"), "{err}");
    }

    #[test]
    fn replicas_follow_the_target_but_at_least_one() {
        let mut target = target();
        assert_eq!(replicas_of(Some(&target)), 3);
        if let Some(spec) = target.spec.as_mut() {
            spec.replicas = Some(0);
        }
        assert_eq!(replicas_of(Some(&target)), 1);
        assert_eq!(replicas_of(None), 1);
    }

    #[test]
    fn services_per_port_and_front_selects_the_primary() {
        let cd = canary("web", json!([80, 9090]));
        let names = Names::of(&cd).unwrap();
        let services = services(&cd, &names).unwrap();
        let by_name: BTreeMap<&str, &Service> = services
            .iter()
            .map(|s| (s.metadata.name.as_deref().unwrap(), s))
            .collect();
        assert_eq!(
            by_name.keys().copied().collect::<Vec<_>>(),
            ["web", "web-canary", "web-primary"]
        );
        let selector = |name: &str| {
            by_name[name]
                .spec
                .as_ref()
                .unwrap()
                .selector
                .clone()
                .unwrap()[POD_LABEL]
                .clone()
        };
        assert_eq!(selector("web"), "web-primary");
        assert_eq!(selector("web-canary"), "web-canary");
        let ports = by_name["web"].spec.as_ref().unwrap().ports.clone().unwrap();
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[1].name.as_deref(), Some("http-9090"));
        assert_eq!(ports[1].target_port, Some(IntOrString::Int(9090)));
        assert_eq!(ports[1].protocol.as_deref(), Some("TCP"));

        let bad = canary("web", json!([0]));
        assert!(super::services(&bad, &names)
            .unwrap_err()
            .0
            .contains("has 0"));
    }

    #[test]
    fn virtual_service_splits_every_port() {
        let cd = canary("web", json!([80, 9090]));
        let names = Names::of(&cd).unwrap();
        let vs = virtual_service(&cd, &names, 30).unwrap();
        assert_eq!(vs["apiVersion"], VIRTUAL_SERVICE_API_VERSION);
        assert_eq!(vs["metadata"]["name"], "web");
        assert_eq!(vs["spec"]["hosts"][3], "web.shop.svc.cluster.local");
        let routes = vs["spec"]["http"].as_array().unwrap();
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[1]["match"], json!([{ "port": 9090 }]));
        assert_eq!(
            routes[1]["route"],
            json!([
                { "destination": { "host": "web-primary.shop.svc.cluster.local", "port": { "number": 9090 } }, "weight": 70 },
                { "destination": { "host": "web-canary.shop.svc.cluster.local", "port": { "number": 9090 } }, "weight": 30 },
            ])
        );
        assert_eq!(canary_weight_of(&vs), Some(30));
        let all = virtual_service(&cd, &names, 250).unwrap();
        assert_eq!(canary_weight_of(&all), Some(100));
    }
}
