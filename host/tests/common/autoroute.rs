//! AutoRoute helpers shared by the fault tests: routes selecting fresh Deployments, waiting for
//! them to be Ready, and checking that each has exactly its outputs.
#![allow(dead_code)]

use super::cluster::*;
use anyhow::ensure;
use kube::Client;
use serde_json::{json, Value};
use std::time::Duration;

pub const T: Duration = Duration::from_secs(60);
pub const AR: (&str, &str) = ("examples.io/v1", "AutoRoute");

pub fn deployment(name: &str, group: &str, port: i32) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"group": group}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx", "ports": [{"containerPort": port}]}]}}
        }
    })
    .to_string()
}

pub fn route(name: &str, group: &str) -> String {
    json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": name},
           "spec": {"deploymentSelector": {"matchLabels": {"group": group}}}})
    .to_string()
}

/// A route `name` selecting `n` fresh deployments `<name>-<i>`.
pub async fn create_route(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        apply_yaml(
            client,
            &deployment(&format!("{name}-{i}"), name, 8000 + i as i32),
            Some(ns),
        )
        .await?;
    }
    apply_yaml(client, &route(name, name), Some(ns)).await
}

pub async fn wait_ready(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<Value> {
    let want: Vec<String> = (0..n).map(|i| format!("{name}-{i}")).collect();
    wait_for(
        &format!("AutoRoute {name} Ready with {n} deployments"),
        T,
        || async {
            let Some(o) = get(client, AR.0, AR.1, Some(ns), name).await? else {
                return Ok(None);
            };
            let ok = o["status"]["phase"] == "Ready"
                && str_list(&o["status"]["syncedDeployments"]) == want
                && o["status"]["observedGeneration"] == o["metadata"]["generation"];
            Ok(ok.then_some(o))
        },
    )
    .await
}

/// Exactly the outputs of `name`: one Service per deployment, owned by it, nothing extra.
pub async fn check_outputs(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<()> {
    let api = dynamic_api(client, "v1", "Service", Some(ns)).await?;
    let services = api
        .list(&kube::api::ListParams::default().labels("wasmpilot.io/operator=autoroute"))
        .await?;
    let mine: Vec<_> = services
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
        })
        .collect();
    ensure!(
        mine.len() == n,
        "{name}: {} Services, expected {n}",
        mine.len()
    );
    // One VirtualService per deployment (`<deployment>.<route>`) and one Gateway, each
    // controlled by the route.
    let uid =
        must(get(client, AR.0, AR.1, Some(ns), name).await?, name)?["metadata"]["uid"].clone();
    let controlled_by_route = |o: &kube::api::DynamicObject| {
        o.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && json!(r.uid) == uid)
    };
    let vs_api = dynamic_api(
        client,
        "networking.istio.io/v1alpha3",
        "VirtualService",
        Some(ns),
    )
    .await?;
    let vs = vs_api
        .list(&kube::api::ListParams::default().labels("wasmpilot.io/operator=autoroute"))
        .await?;
    let vs: Vec<_> = vs
        .items
        .iter()
        .filter(|o| {
            o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with(&format!(".{name}")))
        })
        .collect();
    ensure!(
        vs.len() == n && vs.iter().all(|o| controlled_by_route(o)),
        "{name}: {} VirtualServices (expected {n}, each controlled by the route)",
        vs.len()
    );
    let gw_api = dynamic_api(client, "networking.istio.io/v1alpha3", "Gateway", Some(ns)).await?;
    let gw = gw_api.get(name).await?;
    ensure!(
        controlled_by_route(&gw),
        "{name}: the Gateway is controlled by the route"
    );
    ensure!(
        mine.iter().all(|o| controlled_by_route(o)),
        "{name}: every Service is controlled by the route"
    );
    Ok(())
}
