//! A worker cannot drive a write storm (issue 30): one whose every decision changes its status
//! and asks to run again after 0 ms is run about once a second (the host's minimum requeue
//! delay), and the watch events of the host's own status writes reconcile nothing. Before, such
//! a worker drove 1,404 status writes in 10 s.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde_json::json;
use std::time::{Duration, Instant};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const OP: &str = "storm";
const WINDOW: Duration = Duration::from_secs(10);

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_worker_that_changes_its_status_every_call_writes_about_once_a_second() {
    with_scripted_host(
        LAG.1,
        "wasmpilot-e2e-write-storm",
        "e2e-storm",
        &[OP],
        |client, ns, log| async move {
            let _ = log;
            scenario(&client, &ns).await
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let op = json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OP}, "spec": {
        "resource": {"apiVersion": LAG.0, "kind": LAG.1},
        "phases": [{"name": "Start", "initial": true,
                    "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}}}]}});
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
    // `random`: status info from the worker's (request-seeded) randomness, and the request
    // holds the resource's resourceVersion: every write makes the next decision differ.
    let storm = json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": "s"},
        "spec": {"phases": {"Start": {"mode": "random", "requeueAfterMs": 0}}}});
    apply_yaml(client, &storm.to_string(), Some(ns)).await?;
    wait_for("the storm's first status write", T, || async {
        let o = get(client, LAG.0, LAG.1, Some(ns), "s").await?;
        Ok(o.filter(|o| o["status"]["random"].is_string()).map(|_| ()))
    })
    .await?;

    let lags: kube::Api<DynamicObject> = dynamic_api(client, LAG.0, LAG.1, Some(ns)).await?;
    let mut events = std::pin::pin!(watcher(lags, watcher::Config::default()));
    let started = Instant::now();
    let mut values = std::collections::BTreeSet::new();
    let mut writes = 0usize;
    while let Some(left) = WINDOW.checked_sub(started.elapsed()) {
        match tokio::time::timeout(left, events.next()).await {
            Ok(Some(Ok(watcher::Event::Apply(o)))) => {
                writes += 1;
                if let Some(v) = o.data["status"]["random"].as_str() {
                    values.insert(v.to_string());
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    eprintln!(
        "{writes} status writes in {WINDOW:?}, {} distinct values",
        values.len()
    );
    // Premise: the worker keeps changing its status (a decision each time differs).
    ensure!(
        values.len() >= 5,
        "the worker changed its status {} times in {WINDOW:?}: not the storm this test needs",
        values.len()
    );
    ensure!(
        writes <= 15,
        "{writes} status writes in {WINDOW:?}: want about one a second (requeue after 0 ms is raised to 1 s)"
    );
    Ok(())
}
