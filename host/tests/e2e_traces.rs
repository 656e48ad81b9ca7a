//! Traces reach a collector through the real OTLP protocol (HTTP, JSON): a host started with
//! `--otlp-endpoint` sends, for one reconcile, the `reconcile` span (operator, resource, phase,
//! module digest) and its children — the worker call, the apply of each output, the status write
//! — in one trace; the reconcile's JSON log lines and its recorded case carry that trace id; and
//! nothing a worker logs leaves in a span.

mod common;

use anyhow::{ensure, Context};
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const TRAIL: (&str, &str) = ("test.wasmpilot.io/v1", "Trail");
const OPERATOR: &str = "trail-traces";
/// What the worker logs: it must never appear in an exported span.
const WORKER_LINE: &str = "chatty line";

/// What the collector received: each request's content type and body.
type Received = Arc<Mutex<Vec<(String, String)>>>;

/// An OTLP/HTTP collector on loopback: answers `POST /v1/traces` as a collector does and keeps
/// what it was sent. Returns its base URL.
async fn collector(received: Received) -> anyhow::Result<String> {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: axum::http::HeaderMap, body: String| {
            let received = received.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                received
                    .lock()
                    .expect("received")
                    .push((content_type, body));
                ([("content-type", "application/json")], "{}")
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{address}"))
}

/// Every span received, flattened from OTLP's resourceSpans/scopeSpans, with the resource's
/// service name.
fn spans(received: &Received) -> anyhow::Result<Vec<(String, Value)>> {
    let mut all = Vec::new();
    for (content_type, body) in received.lock().expect("received").iter() {
        ensure!(
            content_type.starts_with("application/json"),
            "OTLP over HTTP with JSON, sent as {content_type:?}"
        );
        let doc: Value = serde_json::from_str(body).context("an OTLP JSON export")?;
        for resource in doc["resourceSpans"].as_array().into_iter().flatten() {
            let service = attributes(&resource["resource"])
                .get("service.name")
                .cloned()
                .unwrap_or_default();
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    all.push((service.clone(), span.clone()));
                }
            }
        }
    }
    Ok(all)
}

/// A span's (or resource's) string attributes.
fn attributes(o: &Value) -> std::collections::BTreeMap<String, String> {
    o["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let value = &a["value"];
            let text = value["stringValue"]
                .as_str()
                .map(str::to_string)
                .or_else(|| value["intValue"].as_str().map(str::to_string))
                .or_else(|| value["intValue"].as_i64().map(|i| i.to_string()))?;
            Some((a["key"].as_str()?.to_string(), text))
        })
        .collect()
}

fn id(span: &Value, key: &str) -> String {
    span[key].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_reconcile_is_one_trace_at_the_collector_and_in_its_log_and_record() {
    let received: Received = Arc::default();
    let endpoint = collector(received.clone()).await.expect("the collector");
    let records = tempfile::tempdir().expect("record dir");
    let records_path = records.path().to_path_buf();
    with_scripted_host_args(
        TRAIL.1,
        &[
            "--otlp-endpoint",
            &endpoint,
            "--log-format",
            "json",
            "--record-dir",
            records.path().to_str().expect("utf-8 path"),
        ],
        "wasmpilot-e2e-traces",
        "e2e-traces",
        &[OPERATOR],
        |client, ns, log| async move {
            scenario(&client, &ns, &received, &log, &records_path).await
        },
    )
    .await;
}

async fn scenario(
    client: &kube::Client,
    ns: &str,
    received: &Received,
    log: &std::path::Path,
    records: &std::path::Path,
) -> anyhow::Result<()> {
    let module = json!({"file": {"path": "wasmpilot_test_scripted.wasm"}});
    let operator = json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OPERATOR},
        "spec": {"resource": {"apiVersion": TRAIL.0, "kind": TRAIL.1}, "phases": [
            {"name": "Start", "initial": true, "module": module, "next": ["Done"],
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
            {"name": "Done", "final": true}]}});
    apply_yaml(client, &operator.to_string(), None).await?;
    wait_operators_running(client, &[OPERATOR]).await?;
    let trail = json!({"apiVersion": TRAIL.0, "kind": TRAIL.1, "metadata": {"name": "trail-1"},
        "spec": {"phases": {"Start": {"mode": "chatty", "count": 1, "next": "Done", "outputs": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trail-1-a"}, "data": {"k": "a"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trail-1-b"}, "data": {"k": "b"}}]}}}});
    apply_yaml(client, &trail.to_string(), Some(ns)).await?;
    wait_for("the trail Done", T, || async {
        let o = get(client, TRAIL.0, TRAIL.1, Some(ns), "trail-1").await?;
        Ok(o.filter(|o| o["status"]["phase"] == "Done").map(|_| ()))
    })
    .await?;
    let resource = format!("{ns}/trail-1");

    // The collector gets the reconcile that ran Start (the SDK sends a batch every 5 s).
    let (reconcile, all) = wait_for("the reconcile's spans at the collector", T, || async {
        let all = spans(received)?;
        let reconcile = all.iter().map(|(_, s)| s).find(|s| {
            let a = attributes(s);
            s["name"] == "reconcile"
                && a.get("operator").map(String::as_str) == Some(OPERATOR)
                && a.get("resource") == Some(&resource)
                && a.contains_key("module")
        });
        // Its children end before it, and may come in an earlier batch, never a later one.
        Ok(reconcile.cloned().map(|r| (r, all.clone())))
    })
    .await?;
    let (trace, parent) = (id(&reconcile, "traceId"), id(&reconcile, "spanId"));
    ensure!(
        trace.len() == 32 && parent.len() == 16,
        "hex ids: {reconcile}"
    );
    ensure!(
        all.iter().all(|(service, _)| service == "wasmpilot"),
        "every span from the service wasmpilot"
    );
    let a = attributes(&reconcile);
    let module = a.get("module").cloned().unwrap_or_default();
    ensure!(
        module.starts_with("sha256:"),
        "the module digest: {reconcile}"
    );
    ensure!(
        a.contains_key("phase"),
        "the reconcile names its phase: {reconcile}"
    );
    let children: Vec<&Value> = all
        .iter()
        .map(|(_, s)| s)
        .filter(|s| id(s, "parentSpanId") == parent)
        .collect();
    ensure!(
        children.iter().all(|c| id(c, "traceId") == trace),
        "children in the reconcile's trace"
    );
    let named = |name: &str| -> Vec<&Value> {
        children
            .iter()
            .copied()
            .filter(|c| c["name"] == name)
            .collect()
    };
    let calls = named("worker call");
    ensure!(
        calls.len() == 1,
        "one worker call under the reconcile: {children:?}"
    );
    let call = attributes(calls[0]);
    ensure!(
        call.get("module") == Some(&module)
            && call.get("phase").map(String::as_str) == Some("Start"),
        "the call names its module and phase: {call:?}"
    );
    let mut applied: Vec<String> = named("apply")
        .iter()
        .map(|s| attributes(s).get("name").cloned().unwrap_or_default())
        .collect();
    applied.sort();
    ensure!(
        applied == ["trail-1-a", "trail-1-b"],
        "one apply span per output: {applied:?}"
    );
    ensure!(
        !named("status write").is_empty(),
        "the status write under the reconcile: {children:?}"
    );
    // Nothing a worker logs leaves the host in a span (events are not exported).
    ensure!(
        received
            .lock()
            .expect("received")
            .iter()
            .all(|(_, body)| !body.contains(WORKER_LINE)),
        "a worker's log line was exported"
    );

    // The reconcile's log lines name its trace (the worker's own line among them).
    let text = std::fs::read_to_string(log)?;
    let traced: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["span"]["trace_id"] == trace.as_str())
        .collect();
    ensure!(
        traced.iter().any(|l| l["message"] == WORKER_LINE),
        "the worker's log line carries the trace id {trace}: {} lines carry it",
        traced.len()
    );
    // And so does its recorded case.
    let cases = wait_for("the recorded case", Duration::from_secs(30), || async {
        let mut cases = Vec::new();
        for entry in std::fs::read_dir(records)?.flatten() {
            let text = std::fs::read_to_string(entry.path())?;
            cases.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|c| c["resource"] == resource.as_str()),
            );
        }
        Ok((!cases.is_empty()).then_some(cases))
    })
    .await?;
    ensure!(
        cases
            .iter()
            .any(|c| c["traceId"] == trace.as_str() && c["module"] == module.as_str()),
        "the recorded case names the trace {trace}: {:?}",
        cases.iter().map(|c| &c["traceId"]).collect::<Vec<_>>()
    );
    eprintln!(
        "trace {trace}: reconcile with {} children ({} applies), {} log lines, {} spans received in all",
        children.len(),
        applied.len(),
        traced.len(),
        all.len()
    );
    Ok(())
}
