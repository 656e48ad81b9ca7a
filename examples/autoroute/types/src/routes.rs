//! The objects that route to a Deployment — a Service, a VirtualService `<deployment>.<route>`
//! and the route's Gateway — and how to tell whether the ones in the cluster still are those.
//! Syncing applies [`desired_routes`]; Ready compares them with what it observes through
//! [`route_differences`], so the two phases cannot disagree.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

use crate::RoutableDeployment;

/// The Istio API version of the VirtualService and Gateway.
pub const ISTIO_API_VERSION: &str = "networking.istio.io/v1alpha3";

/// Everything Syncing applies for a route: its Gateway, then per routable Deployment a Service
/// and a VirtualService (the Istio kinds as JSON objects).
#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    pub gateway: Value,
    pub services: Vec<Service>,
    pub virtual_services: Vec<Value>,
}

/// The routes of AutoRoute `route_name` in `namespace` to the `routable` Deployments.
pub fn desired_routes(
    route_name: &str,
    namespace: Option<&str>,
    routable: &[RoutableDeployment<'_>],
) -> Routes {
    Routes {
        gateway: gateway(route_name, namespace),
        services: routable.iter().map(|d| service(d, namespace)).collect(),
        virtual_services: routable
            .iter()
            .map(|d| virtual_service(d, &hostname(d, route_name), route_name, namespace))
            .collect(),
    }
}

/// `<deployment>.<route>`: the host a Deployment is routed under.
pub fn hostname(deployment: &RoutableDeployment<'_>, route_name: &str) -> String {
    format!("{}.{route_name}", deployment.name)
}

/// A Service named after the Deployment, port `http`, selecting the Deployment's pods.
pub fn service(deployment: &RoutableDeployment<'_>, namespace: Option<&str>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(deployment.name.to_owned()),
            namespace: namespace.map(str::to_owned),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: deployment.port,
                // Explicit: server-side apply on Kubernetes 1.20 rejects a port without it
                // ("associative list with keys has an element that omits key field protocol").
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            selector: Some(deployment.pod_labels.clone()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// Routes host `<deployment>.<route>` on the route's Gateway to the Deployment's Service.
pub fn virtual_service(
    deployment: &RoutableDeployment<'_>,
    hostname: &str,
    route_name: &str,
    namespace: Option<&str>,
) -> Value {
    json!({
        "apiVersion": ISTIO_API_VERSION,
        "kind": "VirtualService",
        "metadata": { "name": hostname, "namespace": namespace },
        "spec": {
            "hosts": [hostname],
            "gateways": [route_name],
            "http": [{
                "match": [{ "uri": { "prefix": "/" } }],
                "route": [{
                    "destination": {
                        "host": deployment.name,
                        "port": { "number": deployment.port },
                    },
                }],
            }],
        },
    })
}

/// One Gateway per route on the default Istio ingress gateway, for hosts `*.<route>`.
pub fn gateway(route_name: &str, namespace: Option<&str>) -> Value {
    json!({
        "apiVersion": ISTIO_API_VERSION,
        "kind": "Gateway",
        "metadata": { "name": route_name, "namespace": namespace },
        "spec": {
            "selector": { "istio": "ingressgateway" },
            "servers": [{
                "port": { "number": 80, "name": "http", "protocol": "HTTP" },
                "hosts": [format!("*.{route_name}")],
            }],
        },
    })
}

/// How the routes observed in the cluster (the route's own Services, VirtualServices and
/// Gateways) differ from `desired`, one line per difference (empty: in sync). Only what the
/// operator sets counts: the Service's ports and selector, the VirtualService's and Gateway's
/// spec; defaults the API server adds (a port's targetPort, the cluster IP) are not differences.
pub fn route_differences(
    desired: &Routes,
    services: &[Service],
    virtual_services: &[Value],
    gateways: &[Value],
) -> Vec<String> {
    let as_json = |services: &[Service]| -> Vec<Value> {
        services
            .iter()
            .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
            .collect()
    };
    let mut differences = Vec::new();
    compare(
        "Gateway",
        std::slice::from_ref(&desired.gateway),
        gateways,
        &mut differences,
        spec_difference,
    );
    compare(
        "Service",
        &as_json(&desired.services),
        &as_json(services),
        &mut differences,
        service_difference,
    );
    compare(
        "VirtualService",
        &desired.virtual_services,
        virtual_services,
        &mut differences,
        spec_difference,
    );
    differences
}

/// A VirtualService's or Gateway's whole spec (the operator sets all of it).
fn spec_difference(want: &Value, got: &Value) -> Option<String> {
    (want["spec"] != got["spec"]).then(|| {
        format!(
            "spec is {} (want {})",
            compact(&got["spec"]),
            compact(&want["spec"])
        )
    })
}

/// A Service's ports (name, port, protocol, and no others) and selector.
fn service_difference(want: &Value, got: &Value) -> Option<String> {
    let ports = |s: &Value| -> Vec<(Value, Value, Value)> {
        s["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let protocol = match &p["protocol"] {
                    Value::Null => json!("TCP"),
                    other => other.clone(),
                };
                (p["name"].clone(), p["port"].clone(), protocol)
            })
            .collect()
    };
    if ports(want) != ports(got) {
        return Some(format!(
            "ports are {} (want {})",
            compact(&got["spec"]["ports"]),
            compact(&want["spec"]["ports"])
        ));
    }
    if want["spec"]["selector"] != got["spec"]["selector"] {
        return Some(format!(
            "selector is {} (want {})",
            compact(&got["spec"]["selector"]),
            compact(&want["spec"]["selector"])
        ));
    }
    None
}

/// Each desired object must be observed (by name) and not differ; observed objects that are not
/// desired are differences too (Syncing prunes them).
fn compare(
    kind: &str,
    desired: &[Value],
    observed: &[Value],
    differences: &mut Vec<String>,
    differ: impl Fn(&Value, &Value) -> Option<String>,
) {
    let name = |o: &Value| {
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for want in desired {
        match observed.iter().find(|o| name(o) == name(want)) {
            None => differences.push(format!("{kind} {} is missing", name(want))),
            Some(got) => {
                if let Some(d) = differ(want, got) {
                    differences.push(format!("{kind} {}: {d}", name(want)));
                }
            }
        }
    }
    for got in observed {
        if !desired.iter().any(|w| name(w) == name(got)) {
            differences.push(format!("{kind} {} is no longer routed", name(got)));
        }
    }
}

fn compact(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn web() -> RoutableDeployment<'static> {
        RoutableDeployment {
            name: "web",
            port: 8080,
            pod_labels: BTreeMap::from([("app".to_owned(), "web".to_owned())]),
            deployment: Box::leak(Box::default()),
        }
    }

    fn desired() -> Routes {
        desired_routes("r", Some("ns"), &[web()])
    }

    /// What the API server returns for the desired objects: defaults added.
    fn observed() -> (Vec<Service>, Vec<Value>, Vec<Value>) {
        let d = desired();
        let mut service = serde_json::to_value(&d.services[0]).unwrap();
        service["spec"]["ports"][0]["targetPort"] = json!(8080);
        service["spec"]["clusterIP"] = json!("10.0.0.1");
        service["spec"]["type"] = json!("ClusterIP");
        let service: Service = serde_json::from_value(service).unwrap();
        (
            vec![service],
            d.virtual_services.clone(),
            vec![d.gateway.clone()],
        )
    }

    #[test]
    fn defaults_are_not_differences() {
        let (s, v, g) = observed();
        assert!(route_differences(&desired(), &s, &v, &g).is_empty());
    }

    #[test]
    fn hand_edits_are_differences() {
        let (mut s, mut v, mut g) = observed();
        s[0].spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 9999;
        v[0]["spec"]["hosts"] = json!(["evil.r"]);
        g[0]["spec"]["servers"][0]["port"]["number"] = json!(8081);
        let d = route_differences(&desired(), &s, &v, &g);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].starts_with("Gateway r: spec is"), "{d:?}");
        assert!(d[1].starts_with("Service web: ports are"), "{d:?}");
        assert!(d[2].starts_with("VirtualService web.r: spec is"), "{d:?}");
    }

    #[test]
    fn an_extra_port_a_missing_and_an_unrouted_object_are_differences() {
        let (mut s, v, _) = observed();
        s[0].spec
            .as_mut()
            .unwrap()
            .ports
            .as_mut()
            .unwrap()
            .push(ServicePort {
                name: Some("debug".into()),
                port: 9000,
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            });
        let mut stale = v[0].clone();
        stale["metadata"]["name"] = json!("old.r");
        let d = route_differences(&desired(), &s, &[v[0].clone(), stale], &[]);
        assert_eq!(
            d.iter()
                .map(|l| l.split(':').next().unwrap())
                .collect::<Vec<_>>(),
            [
                "Gateway r is missing",
                "Service web",
                "VirtualService old.r is no longer routed"
            ]
        );
    }
}
