//! The reconcile's writes against a scripted mock API server (tower-test, as kube-rs tests its
//! client): server-side apply of outputs, its convergence paths, pruning, the conditional status
//! write. Each test states the requests, in order, that the host must make and no others.

use crate::controller::cluster_effects::write_status;
use crate::crd::KindRef;
use crate::kinds::ResolvedKind;
use crate::mock_api_server::{failure, scripted, Exchange};
use crate::pipeline::outputs::{self, CheckedOutput, Convergence, OutputError};
use crate::pipeline::status::StatusUpdate;
use crate::pipeline::ReconcileError;
use http::{Method, StatusCode};
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The API server refusing an apply that changes an immutable field of the Service at `path`.
fn immutable_refusal(path: &str) -> Exchange {
    Exchange::new(
        Method::PATCH,
        path,
        StatusCode::UNPROCESSABLE_ENTITY,
        failure(
            422,
            "Invalid",
            "Service \"web\" is invalid: spec.clusterIP: Invalid value: \"None\": field is immutable",
        ),
    )
}

fn query(parts: &http::request::Parts) -> String {
    parts.uri.query().unwrap_or_default().to_string()
}

fn header<'a>(parts: &'a http::request::Parts, name: &str) -> &'a str {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn services() -> HashMap<KindRef, ResolvedKind> {
    let kind = KindRef::new("v1", "Service");
    let resolved = ResolvedKind {
        kind: kind.clone(),
        api: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Service"),
            "services",
        ),
        namespaced: true,
    };
    HashMap::from([(kind, resolved)])
}

fn service(name: &str) -> CheckedOutput {
    CheckedOutput {
        kind: KindRef::new("v1", "Service"),
        name: name.into(),
        namespace: Some("team-a".into()),
        object: json!({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": name, "namespace": "team-a",
                                    "ownerReferences": [{"apiVersion": "examples.io/v1", "kind": "AutoRoute",
                                                         "name": "r1", "uid": "route-uid", "controller": true}]},
                       "spec": {"ports": [{"port": 80}]}}),
        update: Default::default(),
    }
}

/// The Service as the API server returns it, controlled by `controller_uid`.
fn live_service(name: &str, controller_uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "team-a", "uid": format!("{name}-uid"), "resourceVersion": "7",
                        "ownerReferences": [{"apiVersion": "examples.io/v1", "kind": "AutoRoute",
                                             "name": "someone", "uid": controller_uid, "controller": true}],
                        "managedFields": []},
           "spec": {"ports": [{"port": 80}]}})
}

#[tokio::test]
async fn outputs_are_force_applied_by_the_operators_field_manager_and_one_failure_stops_no_other() {
    let apply = |name: &str, status, answer| {
        Exchange::new(
            Method::PATCH,
            &format!("/api/v1/namespaces/team-a/services/{name}"),
            status,
            answer,
        )
        .checking(|parts, body| {
            let q = query(parts);
            assert!(q.contains("fieldManager=wasmpilot-shop"), "{q}");
            assert!(q.contains("force=true"), "{q}");
            assert_eq!(
                header(parts, "content-type"),
                "application/apply-patch+yaml"
            );
            let labels = &body["metadata"]["labels"];
            assert_eq!(labels[crate::OPERATOR_LABEL], "shop", "{body}");
            assert_eq!(labels[crate::PHASE_LABEL], "Syncing", "{body}");
            assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "route-uid");
        })
    };
    let (client, server) = scripted(vec![
        apply(
            "db",
            StatusCode::INTERNAL_SERVER_ERROR,
            failure(500, "InternalError", "etcdserver: request timed out"),
        ),
        apply("web", StatusCode::OK, live_service("web", "route-uid")),
    ]);
    let report = outputs::apply_outputs(
        &client,
        "shop",
        "Syncing",
        "route-uid",
        &services(),
        vec![service("db"), service("web")],
    )
    .await;
    drop(client);
    server.await.expect("the API server's script");
    assert_eq!(report.applied, 1);
    assert!(report.converged.is_empty());
    let [failed] = report.failed.as_slice() else {
        panic!("one failure: {:?}", report.failed);
    };
    let text = failed.to_string();
    assert!(matches!(failed, OutputError::ApplyFailed { .. }), "{text}");
    assert!(
        text.contains("team-a/db") && text.contains("etcdserver: request timed out"),
        "{text}"
    );
}

#[tokio::test]
async fn an_invalid_apply_to_an_object_another_controls_is_refused_and_not_converged() {
    let path = "/api/v1/namespaces/team-a/services/web";
    let (client, server) = scripted(vec![
        immutable_refusal(path),
        // The host reads the object to see whose it is; it is not this resource's: no delete.
        Exchange::new(
            Method::GET,
            path,
            StatusCode::OK,
            live_service("web", "other-uid"),
        ),
    ]);
    let report = outputs::apply_outputs(
        &client,
        "shop",
        "Syncing",
        "route-uid",
        &services(),
        vec![service("web")],
    )
    .await;
    drop(client);
    server.await.expect("the API server's script");
    assert_eq!(report.applied, 0);
    let text = report
        .failed
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(text.contains("field is immutable"), "{text}");
}

#[tokio::test]
async fn an_immutable_field_of_its_own_output_is_converged_by_recreating_it() {
    let path = "/api/v1/namespaces/team-a/services/web";
    let (client, server) = scripted(vec![
        immutable_refusal(path),
        Exchange::new(
            Method::GET,
            path,
            StatusCode::OK,
            live_service("web", "route-uid"),
        ),
        // Deleted only if it is still the object read (its uid), then applied again.
        Exchange::new(
            Method::DELETE,
            path,
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
        .checking(|_, body| assert_eq!(body["preconditions"]["uid"], "web-uid", "{body}")),
        Exchange::new(
            Method::PATCH,
            path,
            StatusCode::OK,
            live_service("web", "route-uid"),
        ),
    ]);
    let report = outputs::apply_outputs(
        &client,
        "shop",
        "Syncing",
        "route-uid",
        &services(),
        vec![service("web")],
    )
    .await;
    drop(client);
    server.await.expect("the API server's script");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.applied, 1);
    let [(object, Convergence::Recreated { reason })] = report.converged.as_slice() else {
        panic!("recreated: {:?}", report.converged);
    };
    assert!(object.contains("team-a/web"), "{object}");
    assert!(reason.contains("field is immutable"), "{reason}");
}

/// A hand-added port of the resource's own Service (another field manager's list entry, which
/// a forced apply keeps): the host replaces `spec.ports` with the worker's, conditional on the
/// version it read, then applies again so its own apply owns the list (OutputReplaced).
#[tokio::test]
async fn another_managers_entry_in_an_owned_list_is_replaced_then_applied() {
    let path = "/api/v1/namespaces/team-a/services/web";
    let mut drifted = live_service("web", "route-uid");
    drifted["spec"]["ports"] = json!([{"port": 80}, {"port": 9999, "protocol": "TCP"}]);
    drifted["metadata"]["managedFields"] = json!([
        {"manager": "wasmpilot-shop", "operation": "Apply",
         "fieldsV1": {"f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}}}}}},
        {"manager": "kubectl-edit", "operation": "Update",
         "fieldsV1": {"f:spec": {"f:ports": {"k:{\"port\":9999,\"protocol\":\"TCP\"}": {".": {}}}}}}
    ]);
    let (client, server) = scripted(vec![
        Exchange::new(Method::PATCH, path, StatusCode::OK, drifted),
        Exchange::new(
            Method::PATCH,
            path,
            StatusCode::OK,
            live_service("web", "route-uid"),
        )
        .checking(|parts, body| {
            assert_eq!(header(parts, "content-type"), "application/json-patch+json");
            assert_eq!(
                body,
                &json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                    {"op": "replace", "path": "/spec/ports", "value": [{"port": 80}]}
                ])
            );
        }),
        Exchange::new(
            Method::PATCH,
            path,
            StatusCode::OK,
            live_service("web", "route-uid"),
        )
        .checking(|parts, _| {
            assert_eq!(
                header(parts, "content-type"),
                "application/apply-patch+yaml"
            )
        }),
    ]);
    let report = outputs::apply_outputs(
        &client,
        "shop",
        "Syncing",
        "route-uid",
        &services(),
        vec![service("web")],
    )
    .await;
    drop(client);
    server.await.expect("the API server's script");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.applied, 1);
    let [(object, Convergence::Replaced { lists, managers })] = report.converged.as_slice() else {
        panic!("one replacement: {:?}", report.converged);
    };
    assert_eq!(object, "Service team-a/web");
    assert_eq!(lists, &["spec.ports".to_string()]);
    assert!(managers.contains("kubectl-edit"), "{managers:?}");
}

#[tokio::test]
async fn pruning_deletes_by_uid_counts_what_is_gone_and_stops_at_a_refusal() {
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some("team-a".into()),
        uid: Some(format!("{name}-uid")),
        ..Default::default()
    };
    let kind = KindRef::new("v1", "Service");
    let delete = |name: &str, status, answer| {
        let uid = format!("{name}-uid");
        Exchange::new(
            Method::DELETE,
            &format!("/api/v1/namespaces/team-a/services/{name}"),
            status,
            answer,
        )
        .checking(move |_, body| assert_eq!(body["preconditions"]["uid"], uid.as_str(), "{body}"))
    };
    let success =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    let (client, server) = scripted(vec![
        delete("old-a", StatusCode::OK, success.clone()),
        // Already gone, or replaced by an object of the same name (another uid): nothing to do.
        delete(
            "old-b",
            StatusCode::NOT_FOUND,
            failure(404, "NotFound", "services \"old-b\" not found"),
        ),
        delete(
            "old-c",
            StatusCode::CONFLICT,
            failure(
                409,
                "Conflict",
                "Precondition failed: UID in precondition: old-c-uid, UID in object meta: new",
            ),
        ),
        delete(
            "old-d",
            StatusCode::FORBIDDEN,
            failure(
                403,
                "Forbidden",
                "services \"old-d\" is forbidden: User \"wasmpilot\" cannot delete resource",
            ),
        ),
    ]);
    let prunable = ["old-a", "old-b", "old-c", "old-d", "old-e"]
        .map(|n| (kind.clone(), meta(n)))
        .to_vec();
    let result = outputs::prune_outputs(&client, &services(), prunable, |_, _| {}).await;
    drop(client);
    server.await.expect("the API server's script");
    let Err((deleted, e)) = result else {
        panic!("a refused delete fails the prune: {result:?}");
    };
    assert_eq!(deleted, 1);
    let text = e.to_string();
    assert!(
        text.contains("team-a/old-d") && text.contains("forbidden"),
        "{text}"
    );
}

#[tokio::test]
async fn the_status_write_is_conditional_and_a_conflict_means_deciding_again() {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.io", "v1", "AutoRoute"),
        "autoroutes",
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.io/v1", "kind": "AutoRoute",
        "metadata": {"name": "r1", "namespace": "team-a", "uid": "route-uid", "resourceVersion": "41", "generation": 2},
        "spec": {}, "status": {"phase": "Syncing"}
    }))
    .expect("an object");
    let update = StatusUpdate::phase_completed("Ready", true, None, Some(2), "sha256:abc");
    let path = "/apis/examples.io/v1/namespaces/team-a/autoroutes/r1/status";
    let patch = |status, answer, conditional: bool| {
        Exchange::new(Method::PATCH, path, status, answer).checking(move |parts, body| {
            assert_eq!(
                header(parts, "content-type"),
                "application/merge-patch+json"
            );
            assert_eq!(body["status"]["phase"], "Ready", "{body}");
            let rv = &body["metadata"]["resourceVersion"];
            match conditional {
                true => assert_eq!(rv, "41", "{body}"),
                false => assert!(rv.is_null(), "{body}"),
            }
        })
    };
    let mut written = obj.clone();
    written.data["status"]["phase"] = json!("Ready");
    let (client, server) = scripted(vec![
        patch(
            StatusCode::CONFLICT,
            failure(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again"),
            true,
        ),
        patch(StatusCode::OK, serde_json::to_value(&written).expect("JSON"), false),
    ]);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "team-a", &resource);
    let conflict = write_status(
        &api,
        &obj,
        &update,
        "2026-01-01T00:00:00Z",
        true,
        &Default::default(),
    )
    .await;
    assert!(
        matches!(conflict, Err(ReconcileError::StatusConflict)),
        "{conflict:?}"
    );
    assert_eq!(
        conflict.map_err(|e| e.reason()).err(),
        Some("StatusConflict")
    );
    let wrote = write_status(
        &api,
        &obj,
        &update,
        "2026-01-01T00:00:00Z",
        false,
        &Default::default(),
    )
    .await;
    assert!(
        matches!(&wrote, Ok(Some(o)) if o.data["status"]["phase"] == "Ready"),
        "the resource as written: {wrote:?}"
    );
    drop((api, client));
    server.await.expect("the API server's script");
}

/// A WasmOperator of generation 3 for the kind `Shop` of `resource_api_version`, whose one
/// phase (`Syncing`, initial or not) runs a pinned ConfigMap key.
fn wasm_operator(
    name: &str,
    resource_api_version: &str,
    initial: bool,
) -> crate::crd::WasmOperator {
    serde_json::from_value(json!({
        "apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 3, "resourceVersion": "11"},
        "spec": {
            "resource": {"apiVersion": resource_api_version, "kind": "Shop"},
            "phases": [{"name": "Syncing", "initial": initial, "final": true,
                        "module": {"configMap": {"name": "shop-modules", "key": "syncing.wasm",
                                                 "sha256": "0".repeat(64)}}}]
        }
    }))
    .expect("a WasmOperator")
}

/// The manager's status write of a failed load: `Ready` and `ModulesLoaded` false for `reason`,
/// for generation 3.
fn failed_load_status(name: &str, reason: &'static str, message_has: &'static str) -> Exchange {
    Exchange::new(
        Method::PATCH,
        &format!("/apis/wasmpilot.io/v1alpha1/wasmoperators/{name}/status"),
        StatusCode::OK,
        json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
               "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 3}}),
    )
    .checking(move |_, body| {
        let status = &body["status"];
        assert_eq!(status["observedGeneration"], 3, "{body}");
        let condition = |type_: &str| {
            status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == type_)
                .cloned()
                .unwrap_or_else(|| panic!("a {type_} condition in {body}"))
        };
        let ready = condition("Ready");
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some(reason))
        );
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains(message_has), "{message}");
        assert_eq!(condition("ModulesLoaded")["status"], "False");
        assert!(
            status.get("modules").is_none(),
            "no digests for a failed load: {body}"
        );
    })
}

/// The manager's status write as a load of generation 3 begins: `Reconciling=True`, `Loading`,
/// and nothing else (answered with the status it leaves).
fn loading_status(name: &str) -> Exchange {
    let reconciling = json!({"type": "Reconciling", "status": "True", "reason": "Loading",
        "message": "loading generation 3", "observedGeneration": 3,
        "lastTransitionTime": "2026-01-01T00:00:00Z"});
    Exchange::new(
        Method::PATCH,
        &format!("/apis/wasmpilot.io/v1alpha1/wasmoperators/{name}/status"),
        StatusCode::OK,
        json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
               "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 3},
               "status": {"conditions": [reconciling]}}),
    )
    .checking(move |_, body| {
        let status = &body["status"];
        assert!(status.get("observedGeneration").is_none(), "{body}");
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        assert_eq!(conditions.len(), 1, "{body}");
        assert_eq!(
            (
                &conditions[0]["type"],
                &conditions[0]["status"],
                &conditions[0]["reason"]
            ),
            (&json!("Reconciling"), &json!("True"), &json!("Loading")),
            "{body}"
        );
    })
}

/// The Warning Event of a failed load, in `default` (WasmOperators are cluster-scoped).
fn failed_load_event(reason: &'static str) -> Exchange {
    Exchange::new(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/default/events",
        StatusCode::CREATED,
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "e1", "namespace": "default"}, "eventTime": null}),
    )
    .checking(move |_, body| {
        assert_eq!(body["type"], "Warning", "{body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["action"], "Load", "{body}");
        assert_eq!(body["regarding"]["kind"], "WasmOperator", "{body}");
    })
}

#[tokio::test]
async fn an_invalid_definition_is_reported_and_waits_for_an_edit() {
    use crate::controller::manager::{load_error_policy, reconcile_operator, ManagerContext};
    use kube::runtime::controller::Action;
    use std::sync::Arc;

    // No phase is initial: refused before any request about kinds or modules.
    let (client, server) = scripted(vec![
        failed_load_status("bad", "InvalidDefinition", "no phase is marked initial"),
        failed_load_event("InvalidDefinition"),
    ]);
    let ctx = ManagerContext::for_tests(client).expect("a manager context");
    let op = Arc::new(wasm_operator("bad", "shop.example.io/v1", false));
    let error = reconcile_operator(op.clone(), ctx.clone())
        .await
        .expect_err("an invalid definition fails");
    assert_eq!(
        load_error_policy(op.clone(), &error, ctx.clone()),
        Action::await_change()
    );
    assert_eq!(
        load_error_policy(op, &error, ctx.clone()),
        Action::await_change(),
        "never retried"
    );
    drop(ctx);
    server.await.expect("the scripted API server");
}

#[tokio::test]
async fn a_kind_not_served_yet_is_reported_and_retried_with_a_growing_delay() {
    use crate::controller::manager::{load_error_policy, reconcile_operator, ManagerContext};
    use kube::runtime::controller::Action;
    use std::sync::Arc;
    use std::time::Duration;

    // The resource's CRD is not installed: discovery answers 404.
    let not_found = || {
        Exchange::new(
            Method::GET,
            "/apis/shop.example.io/v1",
            StatusCode::NOT_FOUND,
            failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        )
    };
    // The module loads while the kinds are resolved (here: its ConfigMap is missing too); the
    // kind is the failure reported.
    let module_missing = || {
        Exchange::new(
            Method::GET,
            "/api/v1/namespaces/wasmpilot-system/configmaps/shop-modules",
            StatusCode::NOT_FOUND,
            failure(404, "NotFound", "configmaps \"shop-modules\" not found"),
        )
    };
    // (Its metadata first, as for a ConfigMap verified before, then the ConfigMap itself.)
    // Each attempt says it is loading first: the WasmOperator handed to both has no status
    // (the store's copy would show the first failure, and the second attempt would not).
    let (client, server) = scripted(vec![
        loading_status("later"),
        not_found(),
        module_missing(),
        module_missing(),
        failed_load_status("later", "KindNotServed", "spec.resource"),
        failed_load_event("KindNotServed"),
        loading_status("later"),
        not_found(),
        module_missing(),
        module_missing(),
        failed_load_status("later", "KindNotServed", "spec.resource"),
        // The same failure again is counted on the first Event (a series), not a new Event.
        Exchange::new(
            Method::PATCH,
            "/apis/events.k8s.io/v1/namespaces/default/events/*",
            StatusCode::OK,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "e1", "namespace": "default"}, "eventTime": null}),
        )
        .checking(|_, body| assert_eq!(body["series"]["count"], 2, "{body}")),
    ]);
    let ctx = ManagerContext::for_tests(client).expect("a manager context");
    let op = Arc::new(wasm_operator("later", "shop.example.io/v1", true));
    let mut delays = Vec::new();
    for _ in 0..2 {
        let error = reconcile_operator(op.clone(), ctx.clone())
            .await
            .expect_err("the kind is not served");
        delays.push(load_error_policy(op.clone(), &error, ctx.clone()));
    }
    assert_eq!(
        delays,
        [
            Action::requeue(Duration::from_secs(1)),
            Action::requeue(Duration::from_secs(2))
        ]
    );
    drop(ctx);
    server.await.expect("the scripted API server");
}

fn resolved(group: &str, version: &str, kind: &str, plural: &str) -> ResolvedKind {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ResolvedKind {
        kind: KindRef::new(&api_version, kind),
        api: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            plural,
        ),
        namespaced: true,
    }
}

fn configmaps() -> ResolvedKind {
    resolved("", "v1", "ConfigMap", "configmaps")
}

/// Widget `w1` in `team-a` at resourceVersion `rv` in phase `phase`, whose Syncing applies
/// ConfigMap `settings` and moves to Ready, where the worker reports the owned ConfigMaps it
/// was given.
fn widget(rv: &str, phase: &str) -> Value {
    json!({"apiVersion": "examples.io/v1", "kind": "Widget",
           "metadata": {"name": "w1", "namespace": "team-a", "uid": "w1-uid",
                        "resourceVersion": rv, "generation": 1},
           "spec": {"phases": {
               "Syncing": {"next": "Ready", "outputs": [
                   {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "team-a"},
                    "data": {"k": "v"}}]},
               "Ready": {"next": "Ready", "countInputs": true}}},
           "status": {"phase": phase}})
}

/// The Widget operator (both phases the scripted component) on `client`, its ConfigMap caches
/// empty (the watch has not delivered anything yet) and the output cache synced or not.
fn widget_operator(
    client: &kube::Client,
    component: &[u8],
    outputs_synced: bool,
) -> std::sync::Arc<crate::controller::context::OperatorContext> {
    std::sync::Arc::new(widget_context(
        client,
        component,
        outputs_synced,
        WIDGET_OPERATOR,
    ))
}

/// The Widget operator: Syncing applies, Ready reads its own ConfigMaps.
const WIDGET_OPERATOR: &str = r#"
resource: {apiVersion: examples.io/v1, kind: Widget}
phases:
- name: Syncing
  initial: true
  module: {file: {path: scripted.wasm}}
  outputs: [{apiVersion: v1, kind: ConfigMap}]
  next: [Ready]
- name: Ready
  module: {file: {path: scripted.wasm}}
  inputs: [{name: mine, apiVersion: v1, kind: ConfigMap, owned: true}]
"#;

/// The context of the Widget operator `definition` (every phase the scripted component).
fn widget_context(
    client: &kube::Client,
    component: &[u8],
    outputs_synced: bool,
    definition: &str,
) -> crate::controller::context::OperatorContext {
    use crate::controller::context::OutputCaches;
    use crate::controller::informers::{metadata_of, Informer};
    use crate::definition::OperatorDefinition;
    use crate::sandbox::{Sandbox, SandboxLimits};
    use std::sync::Arc;

    let spec: crate::crd::WasmOperatorSpec =
        serde_yaml::from_str(definition).expect("the definition");
    let definition = OperatorDefinition::validate("widgets", &spec).expect("a valid definition");
    let sandbox = Sandbox::new(SandboxLimits::default()).expect("the sandbox");
    let compiled = sandbox.compile(component).expect("the scripted component");
    let module = sandbox
        .phase_module("sha256:scripted", &compiled)
        .expect("a phase worker");
    let mut ctx = crate::controller::test_operator::operator_context(
        &definition,
        client,
        &sandbox,
        &module,
        &[],
    );
    if !outputs_synced {
        let configmaps = configmaps();
        ctx.outputs = OutputCaches(HashMap::from([(
            configmaps.kind.clone(),
            Arc::new(Informer::unsynced(&configmaps, Arc::new(metadata_of))),
        )]));
    }
    ctx
}

/// The Widget kind's watch cache holding `objects` (what the controller's watch delivered).
fn watched(objects: &[&Value]) -> kube::runtime::reflector::Store<DynamicObject> {
    let kind = resolved("examples.io", "v1", "Widget", "widgets");
    let mut writer = kube::runtime::reflector::store::Writer::<DynamicObject>::new(kind.api);
    for object in objects {
        let object: DynamicObject = serde_json::from_value((*object).clone()).expect("a Widget");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(object));
    }
    writer.as_reader()
}

/// The Widget in Syncing: the reconcile chains Ready right after Syncing; the ConfigMap watch
/// has not delivered `settings` yet (the cache is empty), as under load. Ready must still see
/// it, as the API server answered the apply (the host caches its own writes): a Ready that
/// reads its own outputs from a lagging cache sees them missing and sends the resource back
/// (the AutoRoute Ready → Syncing → Ready flap).
#[tokio::test]
async fn a_chained_phase_reads_the_outputs_just_applied_though_the_cache_lags() {
    use std::sync::Arc;
    let bytes = crate::mock_api_server::scripted_component();
    let owner = json!([{"apiVersion": "examples.io/v1", "kind": "Widget", "name": "w1",
                        "uid": "w1-uid", "controller": true}]);
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "team-a", "uid": "settings-uid",
                     "resourceVersion": "11", "ownerReferences": owner,
                     "labels": {crate::OPERATOR_LABEL: "widgets", crate::PHASE_LABEL: "Syncing"}},
        "data": {"k": "v"}});
    let widget_path = "/apis/examples.io/v1/namespaces/team-a/widgets/w1";
    let (client, server) = scripted(vec![
        // Syncing, decided from the cache, which the watch cache still holds as it was: no read.
        Exchange::new(
            Method::PATCH,
            "/api/v1/namespaces/team-a/configmaps/settings",
            StatusCode::OK,
            applied,
        ),
        Exchange::new(
            Method::PATCH,
            &format!("{widget_path}/status"),
            StatusCode::OK,
            widget("12", "Ready"),
        )
        .checking(|_, body| assert_eq!(body["status"]["phase"], "Ready", "{body}")),
        // Ready, chained: it was handed the ConfigMap the cache does not hold yet, and stays.
        Exchange::new(
            Method::PATCH,
            &format!("{widget_path}/status"),
            StatusCode::OK,
            widget("13", "Ready"),
        )
        .checking(|_, body| {
            assert_eq!(
                body["status"]["inputCounts"]["mine"], 1,
                "Ready saw the ConfigMap Syncing applied: {body}"
            );
            let phase = &body["status"]["phase"];
            assert!(phase.is_null() || phase == "Ready", "no move back: {body}");
        }),
        // The reconcile's one Event, sent after its writes.
        phase_changed_event("SyncingToReady", "Syncing → Ready ("),
    ]);
    let ctx = widget_context(&client, &bytes, true, WIDGET_OPERATOR);
    let _ = ctx.resources.set(watched(&[&widget("10", "Syncing")]));
    let ctx = Arc::new(ctx);
    let obj: DynamicObject = serde_json::from_value(widget("10", "Syncing")).expect("a Widget");
    let result = crate::controller::reconcile::reconcile(Arc::new(obj), ctx.clone()).await;
    drop(ctx);
    drop(client);
    server.await.expect("the API server's script");
    assert!(result.is_ok(), "{result:?}");
}

/// A reconcile does not start before the caches its takeover check and pruning read have
/// their first list: with the output cache not synced, nothing is read, decided or written,
/// and the reconcile is deferred (InputsNotSynced, tried again with backoff).
#[tokio::test(start_paused = true)]
async fn no_reconcile_before_the_output_caches_synced() {
    use std::sync::Arc;
    let bytes = crate::mock_api_server::scripted_component();
    let (client, server) = scripted(Vec::new());
    let ctx = widget_operator(&client, &bytes, false);
    let obj: DynamicObject = serde_json::from_value(widget("10", "Syncing")).expect("a Widget");
    let result = crate::controller::reconcile::reconcile(Arc::new(obj), ctx.clone()).await;
    drop(ctx);
    drop(client);
    server.await.expect("no request at all");
    assert!(
        matches!(&result, Err(ReconcileError::InputsNotSynced(kind)) if kind == "v1 ConfigMap"),
        "{result:?}"
    );
}

/// The PhaseChanged Event of `w1`, its action and the start of its note checked.
fn phase_changed_event(action: &'static str, note: &'static str) -> Exchange {
    Exchange::new(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/team-a/events",
        StatusCode::CREATED,
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "w1.1", "namespace": "team-a"}, "eventTime": null,
               "reportingController": "wasmpilot", "reason": "PhaseChanged", "action": action}),
    )
    .checking(move |_, body| {
        assert_eq!(body["reason"], "PhaseChanged", "{body}");
        assert_eq!(body["action"], action, "{body}");
        let text = body["note"].as_str().unwrap_or_default();
        assert!(text.starts_with(note), "{text}");
    })
}

/// Start moves on without outputs, Syncing applies, Ready is final: one reconcile runs the two
/// and writes the status once (Start's held and written with Syncing's, both in the history,
/// conditional on the version decided from), then sends one Event naming the whole path.
#[tokio::test]
async fn a_phase_without_outputs_is_written_with_the_next_and_one_event_tells_both() {
    use std::sync::Arc;
    const DEFINITION: &str = r#"
resource: {apiVersion: examples.io/v1, kind: Widget}
phases:
- name: Start
  initial: true
  module: {file: {path: scripted.wasm}}
  next: [Syncing]
- name: Syncing
  module: {file: {path: scripted.wasm}}
  outputs: [{apiVersion: v1, kind: ConfigMap}]
  next: [Ready]
- name: Ready
  final: true
"#;
    let bytes = crate::mock_api_server::scripted_component();
    let widget = |rv: &str, phase: Option<&str>| {
        let mut w = json!({"apiVersion": "examples.io/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "team-a", "uid": "w1-uid",
                         "resourceVersion": rv, "generation": 1},
            "spec": {"phases": {
                "Start": {"next": "Syncing"},
                "Syncing": {"next": "Ready", "outputs": [
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "settings", "namespace": "team-a"}}]},
                "Ready": {"next": "Ready"}}}});
        if let Some(phase) = phase {
            w["status"] = json!({"phase": phase});
        }
        w
    };
    let widget_path = "/apis/examples.io/v1/namespaces/team-a/widgets/w1";
    let mut written = widget("11", Some("Ready"));
    written["status"]["observedGeneration"] = json!(1);
    written["status"]["history"] =
        json!([{"from": "Start", "to": "Syncing"}, {"from": "Syncing", "to": "Ready"}]);
    let (client, server) = scripted(vec![
        Exchange::new(
            Method::PATCH,
            "/api/v1/namespaces/team-a/configmaps/settings",
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings", "namespace": "team-a", "uid": "settings-uid",
                                "resourceVersion": "12", "ownerReferences": [
                                    {"apiVersion": "examples.io/v1", "kind": "Widget", "name": "w1",
                                     "uid": "w1-uid", "controller": true}]}}),
        ),
        Exchange::new(
            Method::PATCH,
            &format!("{widget_path}/status"),
            StatusCode::OK,
            written,
        )
        .checking(|_, body| {
            assert_eq!(
                body["metadata"]["resourceVersion"], "10",
                "conditional: {body}"
            );
            let status = &body["status"];
            assert_eq!(status["phase"], "Ready", "{body}");
            let history: Vec<(&str, &str)> = status["history"]
                .as_array()
                .map(|h| {
                    h.iter()
                        .map(|t| {
                            (
                                t["from"].as_str().unwrap_or_default(),
                                t["to"].as_str().unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(
                history,
                [("Start", "Syncing"), ("Syncing", "Ready")],
                "{body}"
            );
            assert_eq!(status["history"][1]["applied"], 1, "{body}");
        }),
        phase_changed_event(
            "StartToSyncing",
            "Start → Syncing → Ready (1 output applied",
        ),
    ]);
    let ctx = widget_context(&client, &bytes, true, DEFINITION);
    let _ = ctx.resources.set(watched(&[&widget("10", None)]));
    let ctx = Arc::new(ctx);
    let obj: DynamicObject = serde_json::from_value(widget("10", None)).expect("a Widget");
    let result = crate::controller::reconcile::reconcile(Arc::new(obj), ctx.clone()).await;
    drop(ctx);
    drop(client);
    server.await.expect("the API server's script");
    assert!(result.is_ok(), "{result:?}");
}

/// The watch has not delivered a change yet (the cache still holds the version decided from),
/// so the stale decision applies ConfigMap `old`; its conditional status write is refused
/// (409), and the same reconcile reads the resource, decides again, applies `new` and prunes
/// `old`: the stale apply is undone before the reconcile ends.
#[tokio::test]
async fn a_stale_apply_the_watch_had_not_shown_is_undone_in_the_same_reconcile() {
    use std::sync::Arc;
    let bytes = crate::mock_api_server::scripted_component();
    let widget = |rv: &str, output: &str| {
        json!({"apiVersion": "examples.io/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "team-a", "uid": "w1-uid",
                         "resourceVersion": rv, "generation": 1},
            "spec": {"phases": {
                "Syncing": {"next": "Syncing", "outputs": [
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": output, "namespace": "team-a"}}]}}},
            "status": {"phase": "Syncing"}})
    };
    let owner = json!([{"apiVersion": "examples.io/v1", "kind": "Widget", "name": "w1",
                        "uid": "w1-uid", "controller": true}]);
    let configmap = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "team-a", "uid": format!("{name}-uid"),
                            "resourceVersion": "20", "ownerReferences": owner,
                            "labels": {crate::OPERATOR_LABEL: "widgets",
                                       crate::PHASE_LABEL: "Syncing"}}})
    };
    let widget_path = "/apis/examples.io/v1/namespaces/team-a/widgets/w1";
    let mut fresh_written = widget("12", "new");
    fresh_written["status"]["observedGeneration"] = json!(1);
    let (client, server) = scripted(vec![
        Exchange::new(
            Method::PATCH,
            "/api/v1/namespaces/team-a/configmaps/old",
            StatusCode::OK,
            configmap("old"),
        ),
        Exchange::new(
            Method::PATCH,
            &format!("{widget_path}/status"),
            StatusCode::CONFLICT,
            failure(409, "Conflict", "the object has been modified"),
        )
        .checking(|_, body| assert_eq!(body["metadata"]["resourceVersion"], "10", "{body}")),
        Exchange::new(
            Method::GET,
            widget_path,
            StatusCode::OK,
            widget("11", "new"),
        ),
        Exchange::new(
            Method::PATCH,
            "/api/v1/namespaces/team-a/configmaps/new",
            StatusCode::OK,
            configmap("new"),
        ),
        Exchange::new(
            Method::DELETE,
            "/api/v1/namespaces/team-a/configmaps/old",
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
        .checking(|_, body| assert_eq!(body["preconditions"]["uid"], "old-uid", "{body}")),
        Exchange::new(
            Method::PATCH,
            &format!("{widget_path}/status"),
            StatusCode::OK,
            fresh_written,
        )
        .checking(|_, body| assert_eq!(body["metadata"]["resourceVersion"], "11", "{body}")),
    ]);
    let spec = r#"
resource: {apiVersion: examples.io/v1, kind: Widget}
phases:
- name: Syncing
  initial: true
  module: {file: {path: scripted.wasm}}
  outputs: [{apiVersion: v1, kind: ConfigMap}]
"#;
    let ctx = widget_context(&client, &bytes, true, spec);
    let _ = ctx.resources.set(watched(&[&widget("10", "old")]));
    let ctx = Arc::new(ctx);
    let obj: DynamicObject = serde_json::from_value(widget("10", "old")).expect("a Widget");
    let result = crate::controller::reconcile::reconcile(Arc::new(obj), ctx.clone()).await;
    drop(ctx);
    drop(client);
    server.await.expect("the API server's script");
    assert!(result.is_ok(), "{result:?}");
}

/// The watch delivered a change while the worker ran: the decision is not applied (no request
/// but a read of the resource), and the fresh version is decided at once.
#[tokio::test]
async fn a_decision_the_watch_cache_shows_stale_writes_nothing() {
    use std::sync::Arc;
    let bytes = crate::mock_api_server::scripted_component();
    let widget = |rv: &str, output: &str| {
        json!({"apiVersion": "examples.io/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "team-a", "uid": "w1-uid",
                         "resourceVersion": rv, "generation": 1},
            "spec": {"phases": {
                "Syncing": {"next": "Ready", "outputs": [
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": output, "namespace": "team-a"}}]},
                "Ready": {"next": "Ready"}}},
            "status": {"phase": "Syncing"}})
    };
    let widget_path = "/apis/examples.io/v1/namespaces/team-a/widgets/w1";
    let (client, server) = scripted(vec![
        Exchange::new(
            Method::GET,
            widget_path,
            StatusCode::OK,
            widget("11", "new"),
        ),
        Exchange::new(
            Method::PATCH,
            "/api/v1/namespaces/team-a/configmaps/new",
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "new", "namespace": "team-a", "uid": "new-uid",
                                "ownerReferences": [
                                    {"apiVersion": "examples.io/v1", "kind": "Widget", "name": "w1",
                                     "uid": "w1-uid", "controller": true}]}}),
        ),
        Exchange::new(
            Method::PATCH,
            &format!("{widget_path}/status"),
            StatusCode::OK,
            {
                let mut w = widget("12", "new");
                w["status"]["phase"] = json!("Ready");
                w["status"]["observedGeneration"] = json!(1);
                w
            },
        )
        .checking(|_, body| assert_eq!(body["metadata"]["resourceVersion"], "11", "{body}")),
        phase_changed_event("SyncingToReady", "Syncing → Ready ("),
    ]);
    let spec = r#"
resource: {apiVersion: examples.io/v1, kind: Widget}
phases:
- name: Syncing
  initial: true
  module: {file: {path: scripted.wasm}}
  outputs: [{apiVersion: v1, kind: ConfigMap}]
  next: [Ready]
- name: Ready
  final: true
"#;
    let ctx = widget_context(&client, &bytes, true, spec);
    // The cache already holds version 11; the decision is made from 10.
    let _ = ctx.resources.set(watched(&[&widget("11", "new")]));
    let ctx = Arc::new(ctx);
    let obj: DynamicObject = serde_json::from_value(widget("10", "old")).expect("a Widget");
    let result = crate::controller::reconcile::reconcile(Arc::new(obj), ctx.clone()).await;
    drop(ctx);
    drop(client);
    server.await.expect("the API server's script");
    assert!(result.is_ok(), "{result:?}");
}

/// A controller stopped before its resource's first listing has ended (a swap or a refusal
/// right after a start) ends at once. kube's runner holds every reconcile until that listing is
/// in the store, and the shutdown stops the listing, so it used to wait until the drain's grace
/// ran out (60 s) before the next controller of the operator could start.
#[tokio::test]
async fn a_controller_stopped_before_its_first_listing_ends_at_once() {
    use std::sync::Arc;
    let (service, handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let client = kube::Client::new(service, "default");
    let bytes = crate::mock_api_server::scripted_component();
    let ctx = Arc::new(widget_context(&client, &bytes, true, WIDGET_OPERATOR));
    // The API server takes the Widgets' list and never answers it.
    let (listed_tx, listed) = tokio::sync::oneshot::channel::<String>();
    let server = tokio::spawn(async move {
        let mut handle = std::pin::pin!(handle);
        let mut listed_tx = Some(listed_tx);
        let mut held = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            if let Some(tx) = listed_tx.take() {
                let _ = tx.send(request.uri().to_string());
            }
            held.push(send);
        }
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(crate::controller::watch::run(ctx, async move {
        let _ = stopped.await;
    }));
    let uri = tokio::time::timeout(std::time::Duration::from_secs(10), listed)
        .await
        .expect("the controller lists its resources")
        .expect("a request");
    assert!(
        uri.contains("widgets"),
        "the first request lists Widgets: {uri}"
    );
    let _ = stop.send(());
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("the controller ended without waiting for the listing")
        .expect("the controller task");
    server.abort();
}
