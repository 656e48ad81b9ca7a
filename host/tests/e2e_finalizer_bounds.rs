//! A finalizer that never finishes is bounded (issue 30): past `spec.finalizer.pendingTimeout`
//! the resource gets `Synced=False`, `FinalizerStuck`; with `onPendingTimeout: giveUp` the
//! finalizer is removed without the worker (`FinalizerAbandoned`) and the deletion completes.
//! And with `onOperatorDeletion: runFinalizer`, deleting the WasmOperator runs the finalizer
//! worker on each of its resources before releasing it.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const OP: &str = "finalizer-bounds";
const FINALIZER: &str = "wasmpilot.io/finalizer-bounds";

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn stuck_finalizers_are_reported_then_given_up_and_removal_runs_the_worker() {
    with_scripted_host(
        LAG.1,
        "wasmpilot-e2e-finalizer-bounds",
        "e2e-fin-bounds",
        &[OP],
        |client, ns, _log| async move { scenario(&client, &ns).await },
    )
    .await;
}

fn lag(name: &str, finalize: Value) -> String {
    json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": name},
           "spec": {"phases": {"Start": {"mode": "ok", "next": "Done"}}, "finalize": finalize}})
    .to_string()
}

fn finalizers(o: &Value) -> Vec<String> {
    str_list(&o["metadata"]["finalizers"])
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let file = json!({"file": {"path": "wasmpilot_test_scripted.wasm"}});
    let op = |on_timeout: &str| {
        json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OP}, "spec": {
            "resource": {"apiVersion": LAG.0, "kind": LAG.1},
            "phases": [{"name": "Start", "initial": true, "module": file, "next": ["Done"]},
                       {"name": "Done", "final": true}],
            "finalizer": {"module": file, "pendingTimeout": "3s", "onPendingTimeout": on_timeout,
                          "onOperatorDeletion": "runFinalizer"}}})
    };
    apply_yaml(client, &op("report").to_string(), None).await?;
    wait_condition(
        client,
        OPS,
        None,
        OP,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    for (name, finalize) in [
        ("stuck", json!({"mode": "pending", "requeueAfterMs": 500})),
        ("kept", json!({"mode": "ok"})),
    ] {
        apply_yaml(client, &lag(name, finalize), Some(ns)).await?;
        wait_for(
            &format!("Lag {name} Done with the finalizer"),
            T,
            || async {
                let o = get(client, LAG.0, LAG.1, Some(ns), name).await?;
                Ok(o.filter(|o| {
                    o["status"]["phase"] == "Done" && finalizers(o).contains(&FINALIZER.to_string())
                })
                .map(|_| ()))
            },
        )
        .await?;
    }

    // `stuck`'s finalizer worker never finishes: reported once past 3 s, still held.
    delete(client, LAG.0, LAG.1, Some(ns), "stuck").await?;
    let o = wait_condition(
        client,
        LAG,
        Some(ns),
        "stuck",
        ("Synced", "False", "FinalizerStuck"),
        T,
    )
    .await?;
    let message = condition(&o, "Synced")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    ensure!(
        message.contains("pendingTimeout") && message.contains("not done yet"),
        "FinalizerStuck says what it waits for: {message}"
    );
    ensure!(
        o["metadata"]["deletionTimestamp"].is_string()
            && finalizers(&o).contains(&FINALIZER.to_string()),
        "reported, not given up: {o}"
    );

    // giveUp: the finalizer goes without the worker, and the deletion completes.
    let api = dynamic_api(client, OPS.0, OPS.1, None).await?;
    api.patch(
        OP,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"finalizer": {"onPendingTimeout": "giveUp"}}})),
    )
    .await?;
    wait_for("the stuck Lag gone", T, || async {
        Ok(get(client, LAG.0, LAG.1, Some(ns), "stuck")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    let events = events_for(client, ns, "stuck").await?;
    ensure!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("FinalizerAbandoned")),
        "a FinalizerAbandoned Event: {:?}",
        events.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );

    // Deleting the operator runs the finalizer worker on `kept`, then releases it.
    delete(client, OPS.0, OPS.1, None, OP).await?;
    wait_for("the WasmOperator gone", T, || async {
        Ok(get(client, OPS.0, OPS.1, None, OP)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    let kept = must(get(client, LAG.0, LAG.1, Some(ns), "kept").await?, "kept")?;
    ensure!(
        !finalizers(&kept).contains(&FINALIZER.to_string()),
        "kept released: {kept}"
    );
    let events = events_for(client, ns, "kept").await?;
    ensure!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("FinalizerReleased")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("its finalizer worker ran and reported done"))),
        "the release says the finalizer worker ran: {:?}",
        events
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    Ok(())
}
