//! Worker slots are shared fairly between operators (issue 30): while one operator's many
//! resources keep every slot busy with slow calls and a long queue waiting, another operator's
//! resource waits for one slot to free (at most one call's duration), not behind that queue.
//! Before, slots went first come, first served: a spinning operator made another's quick
//! resource take 5.1× longer to become Ready.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::json;
use std::time::{Duration, Instant};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const QUICK: &str = "fair-quick";
const BUSY: &str = "fair-busy";
/// The busy operator's resources, each calling a worker that sleeps `BUSY_CALL` and asks to run
/// again at once: far more calls than the host's 4 slots serve.
const BUSY_RESOURCES: usize = 40;
const BUSY_CALL: Duration = Duration::from_millis(1500);
/// Calls waiting for a slot that show the slots saturated: the busy operator's controller runs
/// 16 reconciles at once, 4 of them in slots.
const QUEUED: f64 = 10.0;
/// The quick operator's resources measured, one after another, alone and beside the busy one.
const QUICK_RESOURCES: usize = 5;

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_busy_operator_delays_another_by_at_most_one_call() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    with_scripted_host_args(
        PROBE.1,
        &["--metrics-addr", &addr.clone()],
        "wasmpilot-e2e-fair-share",
        "e2e-fair",
        &[QUICK, BUSY],
        |client, ns, _log| async move { scenario(&client, &ns, &addr).await },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str, metrics: &str) -> anyhow::Result<()> {
    test_kind_free(client, LAG.1).await?;
    let result = steps(client, ns, metrics).await;
    let _ = delete(client, OPS.0, OPS.1, None, BUSY).await;
    result
}

async fn steps(client: &kube::Client, ns: &str, metrics: &str) -> anyhow::Result<()> {
    apply_yaml(
        client,
        &scripted_start_done(QUICK, PROBE, json!({"deadline": "2s"})).to_string(),
        None,
    )
    .await?;
    apply_yaml(
        client,
        &scripted_start_done(BUSY, LAG, json!({"deadline": "2s"})).to_string(),
        None,
    )
    .await?;
    wait_operators_running(client, &[QUICK, BUSY]).await?;
    let alone = quick_latencies(client, ns, "alone").await?;

    for i in 0..BUSY_RESOURCES {
        let busy = json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": format!("busy-{i}")},
            "spec": {"phases": {"Start": {"mode": "sleep", "count": BUSY_CALL.as_millis() as u64,
                                          "requeueAfterMs": 0}}}});
        apply_yaml(client, &busy.to_string(), Some(ns)).await?;
    }
    // The premise: every slot busy and a queue of the busy operator's calls waiting.
    let queued = || -> anyhow::Result<f64> {
        let text = http_get(metrics, "/metrics")?;
        Ok(metric_value(&text, "wasmpilot_worker_calls_waiting").unwrap_or(0.0))
    };
    wait_for("the busy operator's calls queued for slots", T, || async {
        Ok((queued()? >= QUEUED).then_some(()))
    })
    .await?;
    // The queue is sampled all through the measurement (one reading at its end can fall on a
    // moment when several busy resources wait out their 1 s requeue at once).
    let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampling = {
        let (samples, metrics) = (samples.clone(), metrics.to_string());
        tokio::spawn(async move {
            loop {
                if let Ok(text) = http_get(&metrics, "/metrics") {
                    let waiting = metric_value(&text, "wasmpilot_worker_calls_waiting");
                    if let Ok(mut samples) = samples.lock() {
                        samples.push(waiting.unwrap_or(0.0));
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let beside_busy = quick_latencies(client, ns, "busy").await;
    sampling.abort();
    let beside_busy = beside_busy?;
    let mut samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    samples.sort_by(f64::total_cmp);
    ensure!(
        !samples.is_empty(),
        "the queue was never read while measuring"
    );
    let still_queued = samples[samples.len() / 2];
    ensure!(
        still_queued >= QUEUED,
        "the busy operator's queue drained while measuring (median {still_queued} waiting, min {}, max {} over {} readings): the measure proves nothing",
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );

    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (alone, beside_busy) = (median(alone), median(beside_busy));
    eprintln!(
        "quick resource to Done: alone {alone:?}, beside a busy operator with {still_queued} calls waiting (median) {beside_busy:?} ({:.1}×)",
        beside_busy.as_secs_f64() / alone.as_secs_f64().max(0.001)
    );
    // First come, first served, the quick call would wait behind the queue: ~12 × 1.5 s / 4
    // slots ≈ 4.5 s. Its turn comes at the next slot freed: within one busy call (1.5 s).
    let bound = alone + BUSY_CALL + Duration::from_millis(1000);
    ensure!(
        beside_busy < bound,
        "a quick resource beside the busy operator took {beside_busy:?} (alone {alone:?}): more than one busy call ({BUSY_CALL:?}) later, with a margin ({bound:?})"
    );
    Ok(())
}

/// How long each of the quick operator's resources, created one after another, takes to Done.
async fn quick_latencies(
    client: &kube::Client,
    ns: &str,
    label: &str,
) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::new();
    for i in 0..QUICK_RESOURCES {
        let name = format!("quick-{label}-{i}");
        let quick = json!({"apiVersion": PROBE.0, "kind": PROBE.1, "metadata": {"name": name},
            "spec": {"phases": {"Start": {"mode": "ok", "next": "Done"}}}});
        let started = Instant::now();
        apply_yaml(client, &quick.to_string(), Some(ns)).await?;
        loop {
            let o = get(client, PROBE.0, PROBE.1, Some(ns), &name).await?;
            if o.is_some_and(|o| o["status"]["phase"] == "Done") {
                break;
            }
            ensure!(started.elapsed() < T, "{name} not Done after {T:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        took.push(started.elapsed());
    }
    Ok(took)
}
