//! Outputs edited by hand converge back to what the worker decided, on a real cluster: a
//! Service's port (a list-map key: server-side apply alone is refused with a duplicate port
//! name), a VirtualService's host and a Gateway's server port (AutoRoute), a port added to
//! MyOwnShell's container; and one refused output (its name taken by a user's object) leaves
//! the route's other outputs applied.

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// AutoRoute's resyncInterval: each edit must converge within one.
const RESYNC: Duration = Duration::from_secs(30);
const AR: (&str, &str) = ("examples.io/v1", "AutoRoute");
const MOS: (&str, &str) = ("shell.examples.io/v1", "MyOwnShell");
const VS: (&str, &str) = ("networking.istio.io/v1alpha3", "VirtualService");
const GW: (&str, &str) = ("networking.istio.io/v1alpha3", "Gateway");
/// The field manager `kubectl patch` uses.
const EDITOR: &str = "kubectl-patch";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn hand_edited_outputs_converge() {
    let client = client().await;
    for example in ["examples/autoroute", "examples/myownshell"] {
        deploy_example(example);
    }
    let mut host = Host::start(&[], "wasmpilot-e2e-drift");
    for op in ["autoroute", "myownshell"] {
        wait_condition(
            &client,
            ("wasmpilot.io/v1alpha1", "WasmOperator"),
            None,
            op,
            ("Ready", "True", "ControllerRunning"),
            T,
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    }
    let ns = create_namespace(&client, "e2e-drift")
        .await
        .expect("namespace");
    let result = async {
        autoroute(&client, &ns).await.context("AutoRoute")?;
        myownshell(&client, &ns).await.context("MyOwnShell")
    }
    .await;
    let alive = host.is_alive();
    let _ = merge_patch(
        &client,
        MOS,
        &ns,
        "shell",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let _ = api.delete(&ns, &Default::default()).await;
    assert!(alive, "the host process died");
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

fn deployment(name: &str, port: i32) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"group": "drift"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx", "ports": [{"containerPort": port}]}]}}
        }
    })
    .to_string()
}

/// A JSON patch by another field manager, as `kubectl patch --type=json` makes it; returns the
/// object as the API server stored it (the host may put it back any moment after).
async fn hand_patch(
    client: &Client,
    (api_version, kind): (&str, &str),
    ns: &str,
    name: &str,
    ops: Value,
) -> anyhow::Result<Value> {
    let api = dynamic_api(client, api_version, kind, Some(ns)).await?;
    let patch: json_patch::Patch = serde_json::from_value(ops)?;
    let params = PatchParams {
        field_manager: Some(EDITOR.into()),
        ..Default::default()
    };
    let stored = api
        .patch(name, &params, &Patch::<()>::Json(patch))
        .await
        .with_context(|| format!("hand-editing {kind} {name}"))?;
    Ok(serde_json::to_value(stored)?)
}

async fn merge_patch(
    client: &Client,
    (api_version, kind): (&str, &str),
    ns: &str,
    name: &str,
    body: Value,
) -> anyhow::Result<()> {
    let api = dynamic_api(client, api_version, kind, Some(ns)).await?;
    api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    Ok(())
}

async fn wait_route_ready(client: &Client, ns: &str, synced: &[&str]) -> anyhow::Result<Value> {
    wait_for(&format!("AutoRoute r Ready with {synced:?}"), T, || async {
        let Some(o) = get(client, AR.0, AR.1, Some(ns), "r").await? else {
            return Ok(None);
        };
        let ok = o["status"]["phase"] == "Ready"
            && str_list(&o["status"]["syncedDeployments"]) == synced;
        Ok(ok.then_some(o))
    })
    .await
}

async fn autoroute(client: &Client, ns: &str) -> anyhow::Result<()> {
    apply_yaml(client, &deployment("web", 8080), Some(ns)).await?;
    let route = json!({"apiVersion": AR.0, "kind": AR.1, "metadata": {"name": "r"},
                       "spec": {"deploymentSelector": {"matchLabels": {"group": "drift"}}}});
    apply_yaml(client, &route.to_string(), Some(ns)).await?;
    wait_route_ready(client, ns, &["web"]).await?;

    // Three hand edits at once; the route must put each back within one resync.
    let edited = hand_patch(
        client,
        ("v1", "Service"),
        ns,
        "web",
        json!([{"op": "replace", "path": "/spec/ports/0/port", "value": 9999}]),
    )
    .await?;
    hand_patch(
        client,
        VS,
        ns,
        "web.r",
        json!([{"op": "replace", "path": "/spec/hosts/0", "value": "evil.r"}]),
    )
    .await?;
    hand_patch(
        client,
        GW,
        ns,
        "r",
        json!([{"op": "replace", "path": "/spec/servers/0/port/number", "value": 8081}]),
    )
    .await?;
    // Premise: the edit landed, as the API server answered it (a read after it may already show
    // the host's convergence: the Service's watch event requeues the route at once).
    ensure!(
        edited["spec"]["ports"][0]["port"] == 9999,
        "the edit did not land: {}",
        edited["spec"]
    );
    let edited_at = Instant::now();
    wait_for(
        "the Service, VirtualService and Gateway as the worker decided",
        RESYNC,
        || async {
            let service = get(client, "v1", "Service", Some(ns), "web").await?;
            let vs = get(client, VS.0, VS.1, Some(ns), "web.r").await?;
            let gw = get(client, GW.0, GW.1, Some(ns), "r").await?;
            let (Some(service), Some(vs), Some(gw)) = (service, vs, gw) else {
                return Ok(None);
            };
            let ports = service["spec"]["ports"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ok = ports.len() == 1
                && ports[0]["port"] == 8080
                && ports[0]["name"] == "http"
                && str_list(&vs["spec"]["hosts"]) == ["web.r"]
                && gw["spec"]["servers"][0]["port"]["number"] == 80;
            Ok(ok.then_some(()))
        },
    )
    .await?;
    eprintln!("hand edits converged after {:?}", edited_at.elapsed());
    let event = wait_event(client, ns, "r", "OutputReplaced", T).await?;
    let note = event.message.clone().unwrap_or_default();
    ensure!(
        note.contains(&format!("Service {ns}/web"))
            && note.contains("spec.ports")
            && note.contains(EDITOR),
        "OutputReplaced names the object, the list and the field manager it overrode: {note}"
    );
    let route = wait_route_ready(client, ns, &["web"]).await?;
    provenance(&route)?;

    // A name taken by a user's Service: that output is refused, every other one is applied.
    apply_yaml(
        client,
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"taken"},"spec":{"ports":[{"port":1234,"protocol":"TCP"}]}}"#,
        Some(ns),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await; // the host's Service cache sees it first
    apply_yaml(client, &deployment("taken", 7070), Some(ns)).await?;
    apply_yaml(client, &deployment("api", 9090), Some(ns)).await?;
    let refused = wait_condition(
        client,
        AR,
        Some(ns),
        "r",
        ("Synced", "False", "OutputRefused"),
        T,
    )
    .await?;
    let message = condition(&refused, "Synced")
        .map(|c| c["message"].to_string())
        .unwrap_or_default();
    ensure!(
        message.contains(&format!(
            "Service {ns}/taken already exists and has no controller"
        )),
        "{message}"
    );
    let uid = refused["metadata"]["uid"].clone();
    for (kind, name) in [(VS, "taken.r"), (VS, "api.r"), (("v1", "Service"), "api")] {
        let o = wait_for(
            &format!("{} {name} applied despite the refusal", kind.1),
            T,
            || async { get(client, kind.0, kind.1, Some(ns), name).await },
        )
        .await?;
        ensure!(
            o["metadata"]["ownerReferences"][0]["uid"] == uid,
            "{name} is controlled by the route: {}",
            o["metadata"]
        );
    }
    let user = must(
        get(client, "v1", "Service", Some(ns), "taken").await?,
        "the user's Service",
    )?;
    ensure!(
        user["metadata"]["ownerReferences"].is_null() && user["spec"]["ports"][0]["port"] == 1234,
        "the user's Service was taken over: {user}"
    );
    Ok(())
}

/// `.status.history`: every transition so far (the route went Ready → Syncing → Ready again),
/// each naming the module that decided it and the sha256 of the request it saw; the newest one's
/// module is the status's moduleDigest; at most the default limit of 10 kept.
fn provenance(route: &Value) -> anyhow::Result<()> {
    let history = route["status"]["history"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let steps: Vec<String> = history
        .iter()
        .map(|t| {
            format!(
                "{}→{}",
                t["from"].as_str().unwrap_or("?"),
                t["to"].as_str().unwrap_or("?")
            )
        })
        .collect();
    ensure!(
        steps.len() >= 4
            && steps.len() <= 10
            && steps[..2] == ["Initializing→Syncing", "Syncing→Ready"],
        "history: {steps:?}"
    );
    ensure!(
        steps.contains(&"Ready→Syncing".to_string()),
        "history: {steps:?}"
    );
    for t in &history {
        let module = t["module"].as_str().unwrap_or_default();
        let input = t["inputHash"].as_str().unwrap_or_default();
        ensure!(
            module.starts_with("sha256:")
                && module.len() == 71
                && input.starts_with("sha256:")
                && input.len() == 71,
            "each transition names its module and input hash: {t}"
        );
        ensure!(t["time"].is_string() && t["generation"].is_i64(), "{t}");
    }
    let last = history.last().context("a last transition")?;
    ensure!(
        last["module"] == route["status"]["moduleDigest"],
        "the newest transition's module is the status's moduleDigest: {last} vs {}",
        route["status"]["moduleDigest"]
    );
    Ok(())
}

async fn myownshell(client: &Client, ns: &str) -> anyhow::Result<()> {
    let shell = json!({"apiVersion": MOS.0, "kind": MOS.1, "metadata": {"name": "shell"}, "spec": {"size": 1}});
    apply_yaml(client, &shell.to_string(), Some(ns)).await?;
    let ready = || async {
        wait_for("MyOwnShell shell Ready", T, || async {
            Ok(get(client, MOS.0, MOS.1, Some(ns), "shell")
                .await?
                .filter(|o| o["status"]["phase"] == "Ready")
                .map(|_| ()))
        })
        .await
    };
    ready().await?;
    let edited = hand_patch(
        client,
        ("apps/v1", "Deployment"),
        ns,
        "shell",
        json!([
            {"op": "add", "path": "/spec/template/spec/containers/0/ports",
             "value": [{"containerPort": 9999, "protocol": "TCP"}]}
        ]),
    )
    .await?;
    ensure!(
        edited["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 9999,
        "the edit did not land"
    );
    wait_for("the container port taken out again", RESYNC, || async {
        let dep = get(client, "apps/v1", "Deployment", Some(ns), "shell").await?;
        Ok(dep
            .filter(|d| {
                d["spec"]["template"]["spec"]["containers"][0]["ports"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            })
            .map(|_| ()))
    })
    .await?;
    ready().await?;
    Ok(())
}
