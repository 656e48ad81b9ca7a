//! `/readyz` of a sharded host once it was ready: an operator applied later syncs its caches and
//! takes its buckets while the host keeps answering 200, the body naming what is pending. Before,
//! every replica answered 503 meanwhile: one team's new WasmOperator took them all out of their
//! Service at once.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::json;
use std::time::{Duration, Instant};
use wasmpilot::metrics::READY;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const LATE: &str = "readiness-late";

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn an_operator_applied_later_does_not_make_a_ready_host_unready() {
    let addr = format!("127.0.0.1:{}", free_port());
    with_scripted_host_args(
        PROBE.1,
        &[
            "--shard",
            "--identity",
            "e2e-readiness",
            "--leader-election-namespace",
            "default",
            "--metrics-addr",
            &addr.clone(),
        ],
        "wasmpilot-e2e-readiness",
        "e2e-readiness",
        &[LATE],
        |client, _ns, _log| async move { scenario(&client, &addr).await },
    )
    .await;
}

async fn scenario(client: &kube::Client, addr: &str) -> anyhow::Result<()> {
    let ready_by = Instant::now() + T;
    loop {
        let (code, body) = http_response(addr, "/readyz").unwrap_or_default();
        if code == 200 && body == READY {
            break;
        }
        ensure!(
            Instant::now() < ready_by,
            "/readyz not ready after {T:?}: {code} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let op = json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": LATE}, "spec": {
        "resource": {"apiVersion": PROBE.0, "kind": PROBE.1},
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"],
             "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}}},
            {"name": "Done", "final": true}]}});
    apply_yaml(client, &op.to_string(), None).await?;
    // Every answer from the apply until the operator runs and the host has nothing pending.
    let mut answers: Vec<(u16, String)> = Vec::new();
    let until = Instant::now() + T;
    let mut running = false;
    loop {
        let answer = http_response(addr, "/readyz").unwrap_or_default();
        let settled = running && answer == (200, READY.to_string());
        answers.push(answer);
        if settled {
            break;
        }
        ensure!(
            Instant::now() < until,
            "{LATE} not running with /readyz settled after {T:?}; last answers: {:?}",
            &answers[answers.len().saturating_sub(5)..]
        );
        if !running {
            let o = get(client, OPS.0, OPS.1, None, LATE).await?;
            running = o
                .as_ref()
                .and_then(|o| condition(o, "Ready"))
                .is_some_and(|c| c["status"] == "True");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pending: Vec<&String> = answers
        .iter()
        .map(|(_, body)| body)
        .filter(|body| body.contains(LATE))
        .collect();
    eprintln!(
        "{} answers while {LATE} started, {} of them naming it as pending, e.g. {:?}",
        answers.len(),
        pending.len(),
        pending.first()
    );
    // The premise: the host had something of the new operator pending while it answered.
    ensure!(
        !pending.is_empty(),
        "no answer named {LATE} as pending: the test saw nothing to stay ready through ({answers:?})"
    );
    let unready: Vec<&(u16, String)> = answers.iter().filter(|(code, _)| *code != 200).collect();
    ensure!(
        unready.is_empty(),
        "the ready host answered other than 200 while {LATE} started: {unready:?}"
    );
    Ok(())
}
