//! One operator's workers cannot flood the host's log: while one operator's resources each log
//! 500 lines a second, the host writes about its share (`--worker-log-lines-per-second`, a burst
//! of one call's budget first), counts the rest as dropped and says so, and every line of another
//! operator reconciling at the same time is written.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::time::Instant;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const FLOOD: &str = "log-flood";
const QUIET: &str = "log-quiet";
/// The host's share per operator in this test, lines per second.
const RATE: u64 = 20;
/// A call's log budget (the host's default), which is also the burst an operator may send.
const BURST: u64 = 1000;
const FLOODERS: usize = 10;
const FLOOD_LINES: usize = 500;
const QUIET_RESOURCES: usize = 3;
const QUIET_LINES: usize = 20;

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_flooding_operator_gets_its_share_of_the_host_log_and_another_all_its_lines() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let rate = RATE.to_string();
    with_scripted_host_args(
        PROBE.1,
        &[
            "--metrics-addr",
            &addr.clone(),
            "--worker-log-lines-per-second",
            &rate,
        ],
        "wasmpilot-e2e-log-share",
        "e2e-logshare",
        &[QUIET, FLOOD],
        |client, ns, log| async move {
            test_kind_free(&client, LAG.1).await?;
            let result = scenario(&client, &ns, &addr, &log).await;
            // Stop the flood before the namespace goes.
            let _ = delete(&client, OPS.0, OPS.1, None, FLOOD).await;
            result
        },
    )
    .await;
}

fn dropped(metrics: &str, operator: &str) -> anyhow::Result<f64> {
    let text = http_get(metrics, "/metrics")?;
    Ok(metric_value(
        &text,
        &format!("wasmpilot_worker_log_lines_dropped_total{{operator=\"{operator}\"}}"),
    )
    .unwrap_or(0.0))
}

/// The worker lines of `operator` in the host's log (the reconcile's span names the operator).
fn chatty_lines(log: &str, operator: &str) -> usize {
    let span = format!("operator={operator}");
    log.lines()
        .filter(|l| l.contains("chatty line") && l.contains(&span))
        .count()
}

async fn scenario(
    client: &kube::Client,
    ns: &str,
    metrics: &str,
    log: &std::path::Path,
) -> anyhow::Result<()> {
    apply_yaml(
        client,
        &scripted_start_done(QUIET, PROBE, Value::Null).to_string(),
        None,
    )
    .await?;
    apply_yaml(
        client,
        &scripted_start_done(FLOOD, LAG, Value::Null).to_string(),
        None,
    )
    .await?;
    wait_operators_running(client, &[QUIET, FLOOD]).await?;
    // The flood: every resource logs FLOOD_LINES lines per call and runs again after 1 s.
    let started = Instant::now();
    for i in 0..FLOODERS {
        let flood = json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": format!("flood-{i}")},
            "spec": {"phases": {"Start": {"mode": "chatty", "count": FLOOD_LINES, "requeueAfterMs": 0}}}});
        apply_yaml(client, &flood.to_string(), Some(ns)).await?;
    }
    // The premise: the flood is well past the burst, and goes on.
    let flooding = (3 * BURST) as f64;
    wait_for("the flooding operator's lines dropped", T, || async {
        Ok((dropped(metrics, FLOOD)? >= flooding).then_some(()))
    })
    .await?;

    for i in 0..QUIET_RESOURCES {
        let quiet = json!({"apiVersion": PROBE.0, "kind": PROBE.1, "metadata": {"name": format!("quiet-{i}")},
            "spec": {"phases": {"Start": {"mode": "chatty", "count": QUIET_LINES, "next": "Done"}}}});
        apply_yaml(client, &quiet.to_string(), Some(ns)).await?;
    }
    for i in 0..QUIET_RESOURCES {
        wait_for("a quiet resource Done", T, || async {
            let o = get(client, PROBE.0, PROBE.1, Some(ns), &format!("quiet-{i}")).await?;
            Ok(o.filter(|o| o["status"]["phase"] == "Done").map(|_| ()))
        })
        .await?;
    }
    // The flood goes on after the quiet resources are done: its next rounds are dropped too.
    let before = dropped(metrics, FLOOD)?;
    wait_for("the flood's next rounds dropped", T, || async {
        Ok((dropped(metrics, FLOOD)? >= before + (2 * BURST) as f64).then_some(()))
    })
    .await?;
    let flood_dropped = dropped(metrics, FLOOD)?;
    // Lines are written by the reconcile that ran the call, before its status write.
    let text = std::fs::read_to_string(log)?;
    let elapsed = started.elapsed().as_secs_f64();
    let quiet = chatty_lines(&text, QUIET);
    let flood = chatty_lines(&text, FLOOD);
    let summaries = text
        .lines()
        .filter(|l| l.contains("worker log lines not written") && l.contains(FLOOD))
        .count();
    eprintln!(
        "in {elapsed:.1} s the flood wrote {flood} lines and dropped {flood_dropped} (in {summaries} summary lines); the quiet operator wrote {quiet} of {} lines",
        QUIET_RESOURCES * QUIET_LINES
    );
    ensure!(
        quiet == QUIET_RESOURCES * QUIET_LINES,
        "the quiet operator's lines: {quiet} written of {}",
        QUIET_RESOURCES * QUIET_LINES
    );
    ensure!(
        dropped(metrics, QUIET)? == 0.0,
        "lines of the quiet operator dropped"
    );
    let share = BURST as f64 + RATE as f64 * (elapsed + 2.0);
    ensure!(
        (flood as f64) <= share,
        "the flood wrote {flood} lines in {elapsed:.1} s: more than its share ({share:.0})"
    );
    ensure!(
        summaries >= 1,
        "no host line says the flood's lines were dropped"
    );
    Ok(())
}
