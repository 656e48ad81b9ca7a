//! Removing an operator (issue 30): deleting a WasmOperator whose resources carry its finalizer
//! releases every one of them first — a resource already being deleted (its finalizer worker
//! failing, so the deletion was held) then goes, the others stay without the finalizer and get
//! a `FinalizerReleased` Event — and only then does the WasmOperator go. Before, its resources
//! kept `wasmpilot.io/<operator>` and could never be deleted.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const OP: &str = "removal-probe";
const FINALIZER: &str = "wasmpilot.io/removal-probe";
const RELEASE: &str = "wasmpilot.io/release-resources";

fn finalizers(o: &Value) -> Vec<String> {
    str_list(&o["metadata"]["finalizers"])
}

fn probe(name: &str, finalize_mode: &str) -> String {
    json!({"apiVersion": PROBE.0, "kind": PROBE.1, "metadata": {"name": name},
           "spec": {"phases": {"Start": {"next": "Done"}}, "finalize": {"mode": finalize_mode}}})
    .to_string()
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn deleting_an_operator_releases_its_resources() {
    with_scripted_host(
        PROBE.1,
        "wasmpilot-e2e-operator-removal",
        "e2e-removal",
        &[OP],
        |client, ns, log| async move { scenario(&client, &ns, &log).await },
    )
    .await;
}

async fn scenario(
    client: &kube::Client,
    ns: &str,
    host_log: &std::path::Path,
) -> anyhow::Result<()> {
    let file = json!({"file": {"path": "wasmpilot_test_scripted.wasm"}});
    let op = json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OP}, "spec": {
        "resource": {"apiVersion": PROBE.0, "kind": PROBE.1},
        "phases": [{"name": "Start", "initial": true, "module": file, "next": ["Done"]},
                   {"name": "Done", "final": true}],
        "finalizer": {"module": file}}});
    apply_yaml(client, &op.to_string(), None).await?;
    wait_condition(
        client,
        OPS,
        None,
        OP,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    wait_for("the host's finalizer on the WasmOperator", T, || async {
        let o = must(get(client, OPS.0, OPS.1, None, OP).await?, OP)?;
        Ok(finalizers(&o).contains(&RELEASE.to_string()).then_some(()))
    })
    .await?;

    apply_yaml(client, &probe("held", "retryable"), Some(ns)).await?;
    apply_yaml(client, &probe("idle", "ok"), Some(ns)).await?;
    for name in ["held", "idle"] {
        wait_for(
            &format!("Probe {name} Done with the operator's finalizer"),
            T,
            || async {
                let o = get(client, PROBE.0, PROBE.1, Some(ns), name).await?;
                Ok(o.filter(|o| {
                    o["status"]["phase"] == "Done" && finalizers(o).contains(&FINALIZER.to_string())
                })
                .map(|_| ()))
            },
        )
        .await?;
    }
    // Premise: `held`'s deletion is held by its finalizer worker, which keeps failing.
    delete(client, PROBE.0, PROBE.1, Some(ns), "held").await?;
    let marker = format!("resource={ns}/held");
    wait_for("the held Probe's finalizer worker to fail", T, || async {
        let log = std::fs::read_to_string(host_log).unwrap_or_default();
        Ok(log
            .lines()
            .any(|l| l.contains(&marker) && l.contains("scripted retryable error"))
            .then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = must(
        get(client, PROBE.0, PROBE.1, Some(ns), "held").await?,
        "held",
    )?;
    ensure!(
        held["metadata"]["deletionTimestamp"].is_string(),
        "held is being deleted and still there: {held}"
    );

    // The operator goes: its resources are released first.
    delete(client, OPS.0, OPS.1, None, OP).await?;
    wait_for("the held Probe gone", T, || async {
        Ok(get(client, PROBE.0, PROBE.1, Some(ns), "held")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    wait_for("the WasmOperator gone", T, || async {
        Ok(get(client, OPS.0, OPS.1, None, OP)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    let idle = must(
        get(client, PROBE.0, PROBE.1, Some(ns), "idle").await?,
        "idle",
    )?;
    ensure!(
        !finalizers(&idle).contains(&FINALIZER.to_string()),
        "idle no longer carries the operator's finalizer: {idle}"
    );
    let events = events_for(client, ns, "idle").await?;
    ensure!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("FinalizerReleased")
                && e.message.as_deref().is_some_and(|m| m.contains(OP))),
        "a FinalizerReleased Event on idle: {:?}",
        events
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    // And a resource without its operator deletes at once.
    delete(client, PROBE.0, PROBE.1, Some(ns), "idle").await?;
    wait_for("the idle Probe gone", T, || async {
        Ok(get(client, PROBE.0, PROBE.1, Some(ns), "idle")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    Ok(())
}
