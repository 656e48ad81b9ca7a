//! Whole reconciles against a stateful fake API server, for paths that otherwise only an
//! end-to-end test reaches: a decision from a stale cache made again from the API server's
//! object, a deleted resource's finalizer run and removed, and a namespace the operator's
//! account is not granted.

use crate::controller::context::OperatorContext;
use crate::controller::grants::OperatorGrants;
use crate::controller::reconcile::reconcile;
use crate::controller::test_operator::operator_context;
use crate::definition::OperatorDefinition;
use crate::mock_api_server::{scripted_component_dir, FakeApiServer};
use crate::pipeline::ReconcileError;
use crate::sandbox::{Sandbox, SandboxLimits};
use kube::api::DynamicObject;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

const WIDGET: &str = "/apis/examples.io/v1/namespaces/team-a/widgets/w1";
const SETTINGS: &str = "/api/v1/namespaces/team-a/configmaps/settings";

/// Syncing applies the ConfigMap `settings` and moves to the final Ready; with `finalizer`,
/// the scripted component is the finalizer too.
fn widgets(finalizer: bool) -> OperatorDefinition {
    let mut spec = json!({
        "resource": {"apiVersion": "examples.io/v1", "kind": "Widget"},
        "phases": [
            {"name": "Syncing", "initial": true, "module": {"file": {"path": "scripted.wasm"}},
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}], "next": ["Ready"]},
            {"name": "Ready", "final": true},
        ],
    });
    if finalizer {
        spec["finalizer"] = json!({"module": {"file": {"path": "scripted.wasm"}}});
    }
    let spec: crate::crd::WasmOperatorSpec = serde_json::from_value(spec).expect("a spec");
    OperatorDefinition::validate("widgets", &spec).expect("a valid definition")
}

/// Widget `w1` at resourceVersion `rv`, whose Syncing applies `settings` with `value`.
fn widget(rv: &str, value: &str) -> Value {
    json!({"apiVersion": "examples.io/v1", "kind": "Widget",
           "metadata": {"name": "w1", "namespace": "team-a", "uid": "w1-uid",
                        "resourceVersion": rv, "generation": 1},
           "spec": {"phases": {"Syncing": {"next": "Ready", "outputs": [
               {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "team-a"},
                "data": {"value": value}}]}}}})
}

/// The operator `def` on a fake API server holding `objects` (by path).
fn start(
    def: &OperatorDefinition,
    objects: BTreeMap<String, Value>,
) -> (
    OperatorContext,
    FakeApiServer,
    kube::Client,
    tokio::task::JoinHandle<()>,
) {
    let dir = scripted_component_dir();
    let bytes = std::fs::read(dir.join("wasmpilot_test_scripted.wasm")).expect("the component");
    let sandbox = Sandbox::new(SandboxLimits::default()).expect("a sandbox");
    let compiled = sandbox.compile(&bytes).expect("the scripted component");
    let digest = crate::modules::digest_of(&bytes);
    let module = sandbox
        .phase_module(&digest, &compiled)
        .expect("a phase worker");
    let (client, fake, server) = FakeApiServer::start(objects);
    let mut ctx = operator_context(def, &client, &sandbox, &module, &[]);
    if def.finalizer.is_some() {
        ctx.finalizer = Some(
            sandbox
                .finalizer_module(&digest, &compiled)
                .expect("a finalizer worker"),
        );
    }
    (ctx, fake, client, server)
}

fn stored(fake: &FakeApiServer, path: &str) -> Value {
    fake.objects
        .lock()
        .expect("the store")
        .get(path)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The reasons of the Events the fake API server received.
fn event_reasons(fake: &FakeApiServer) -> Vec<String> {
    fake.objects
        .lock()
        .expect("the store")
        .iter()
        .filter(|(path, _)| path.contains("/events/"))
        .filter_map(|(_, e)| e["reason"].as_str().map(str::to_string))
        .collect()
}

/// The watch cache holds version 1 of the Widget; the API server has version 2, whose spec
/// changed the value. The decision from the cache is not written: the resource is found changed
/// before anything is applied, read again, and decided from version 2.
#[tokio::test]
async fn a_decision_from_a_stale_cache_is_made_again_from_the_api_servers_object() {
    let def = widgets(false);
    let objects = BTreeMap::from([(WIDGET.to_string(), widget("2", "fresh"))]);
    let (ctx, fake, client, server) = start(&def, objects);
    let cached: DynamicObject = serde_json::from_value(widget("1", "stale")).expect("a Widget");
    let result = reconcile(Arc::new(cached), Arc::new(ctx)).await;
    drop(client);
    server.await.expect("the fake API server");
    assert!(result.is_ok(), "{result:?}");
    let requests = fake.requests.lock().expect("the log").clone();
    // The premise: the stale decision was caught (metadata read), then the full object read.
    let metadata_read = requests
        .iter()
        .position(|r| r == &format!("GET {WIDGET} (metadata)"));
    let full_read = requests.iter().position(|r| r == &format!("GET {WIDGET}"));
    assert!(
        matches!((metadata_read, full_read), (Some(m), Some(f)) if m < f),
        "{requests:#?}"
    );
    let applies = requests
        .iter()
        .filter(|r| *r == &format!("PATCH {SETTINGS}"))
        .count();
    assert_eq!(
        applies, 1,
        "applied once, from the fresh object: {requests:#?}"
    );
    assert_eq!(stored(&fake, SETTINGS)["data"]["value"], "fresh");
    assert_eq!(stored(&fake, WIDGET)["status"]["phase"], "Ready");
}

/// A Widget being deleted, carrying the operator's finalizer: the finalizer worker runs, its
/// status info is written, the finalizer is removed (only it) and a Finalized Event sent.
#[tokio::test]
async fn a_deleted_resource_runs_its_finalizer_worker_then_loses_the_finalizer() {
    let def = widgets(true);
    let name = crate::finalizer_name("widgets");
    let mut deleting = widget("5", "v");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-03-01T10:00:00Z");
    deleting["metadata"]["finalizers"] = json!(["example.com/keep", name]);
    deleting["spec"]["finalize"] = json!({"mode": "ok"});
    let objects = BTreeMap::from([(WIDGET.to_string(), deleting.clone())]);
    let (ctx, fake, client, server) = start(&def, objects);
    let obj: DynamicObject = serde_json::from_value(deleting).expect("a Widget");
    let result = reconcile(Arc::new(obj), Arc::new(ctx)).await;
    drop(client);
    server.await.expect("the fake API server");
    assert!(result.is_ok(), "{result:?}");
    let after = stored(&fake, WIDGET);
    assert_eq!(
        after["metadata"]["finalizers"],
        json!(["example.com/keep"]),
        "only the operator's finalizer goes: {after}"
    );
    assert!(
        after["status"]["finalizedAt"].is_string(),
        "the finalizer's status info: {after}"
    );
    assert!(
        event_reasons(&fake).contains(&"Finalized".to_string()),
        "{:?}",
        event_reasons(&fake)
    );
}

/// The operator's account is not granted patching ConfigMaps in team-a: its resource there gets
/// `Synced=False, NotGranted` naming the namespace, the host reports an Event, and nothing is
/// read for a worker nor applied.
#[tokio::test]
async fn a_namespace_the_operator_is_not_granted_gets_a_condition_and_nothing_else() {
    let def = widgets(false);
    let objects = BTreeMap::from([(WIDGET.to_string(), widget("3", "v"))]);
    let (mut ctx, fake, client, server) = start(&def, objects);
    let rule = crate::rbac::Rule {
        group: String::new(),
        resource: "configmaps".into(),
        verbs: vec!["patch"],
        namespaced: true,
    };
    ctx.grants = OperatorGrants::refused_in(
        "system:serviceaccount:wasmpilot-system:op-widgets",
        client.clone(),
        "team-a",
        vec![rule],
    );
    let obj: DynamicObject = serde_json::from_value(widget("3", "v")).expect("a Widget");
    let result = reconcile(Arc::new(obj), Arc::new(ctx)).await;
    drop(client);
    server.await.expect("the fake API server");
    // The premise: the reconcile was refused for the grant.
    assert!(
        matches!(&result, Err(ReconcileError::NotGranted(_))),
        "{result:?}"
    );
    let status = &stored(&fake, WIDGET)["status"];
    let synced = &status["conditions"][0];
    assert_eq!(synced["type"], "Synced", "{status}");
    assert_eq!(synced["status"], "False", "{status}");
    assert_eq!(synced["reason"], "NotGranted", "{status}");
    let message = synced["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("team-a") && message.contains("patch"),
        "{message}"
    );
    assert!(status["phase"].is_null(), "no phase was run: {status}");
    assert_eq!(event_reasons(&fake), ["NotGranted"]);
    let requests = fake.requests.lock().expect("the log").clone();
    assert!(
        !requests.iter().any(|r| r.contains("/configmaps")),
        "{requests:#?}"
    );
}
