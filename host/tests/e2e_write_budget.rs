//! Each tenant gets its share of the host's writes (issue 68): with
//! `--writes-per-second-per-tenant 20`, one operator whose three resources return 100 ConfigMaps
//! each waits for its bucket (`wasmpilot_writes_delayed_total` grows: the premise), while another
//! operator's resources are all `Done` before the first one's outputs are all written, its
//! writes never delayed.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const HEAVY: &str = "budget-heavy";
const QUIET: &str = "budget-quiet";
const HEAVY_RESOURCES: usize = 3;
const OUTPUTS: usize = 100;

fn operator(name: &str, kind: (&str, &str)) -> Value {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name}, "spec": {
        "resource": {"apiVersion": kind.0, "kind": kind.1},
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"],
             "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
            {"name": "Done", "final": true}]}})
}

/// A resource whose worker returns `outputs` ConfigMaps named after it.
fn resource(kind: (&str, &str), name: &str, outputs: usize) -> Value {
    let outputs: Vec<Value> = (0..outputs)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("{name}-{i}")}, "data": {"i": i.to_string()}})
        })
        .collect();
    json!({"apiVersion": kind.0, "kind": kind.1, "metadata": {"name": name},
        "spec": {"phases": {"Start": {"mode": "ok", "next": "Done", "outputs": outputs}}}})
}

fn delayed(addr: &str, operator: &str) -> anyhow::Result<f64> {
    Ok(metric_value(
        &http_get(addr, "/metrics")?,
        &format!("wasmpilot_writes_delayed_total{{operator=\"{operator}\"}}"),
    )
    .unwrap_or(0.0))
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_tenant_past_its_write_budget_waits_and_another_does_not() {
    let addr = format!("127.0.0.1:{}", free_port());
    with_scripted_host_args(
        LAG.1,
        &[
            "--metrics-addr",
            &addr.clone(),
            "--writes-per-second-per-tenant",
            "20",
        ],
        "wasmpilot-e2e-write-budget",
        "e2e-write-budget",
        &[HEAVY, QUIET],
        |client, ns, _| async move {
            test_kind_free(&client, PROBE.1).await?;
            scenario(&client, &ns, &addr).await
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str, addr: &str) -> anyhow::Result<()> {
    let running = ("Ready", "True", "ControllerRunning");
    apply_yaml(client, &operator(HEAVY, LAG).to_string(), None).await?;
    apply_yaml(client, &operator(QUIET, PROBE).to_string(), None).await?;
    wait_condition(client, OPS, None, HEAVY, running, T).await?;
    wait_condition(client, OPS, None, QUIET, running, T).await?;

    for r in 0..HEAVY_RESOURCES {
        let name = format!("heavy{r}");
        apply_yaml(client, &resource(LAG, &name, OUTPUTS).to_string(), Some(ns)).await?;
    }
    // The premise: the heavy operator's writes wait for its bucket.
    wait_for("the heavy operator's writes delayed", T, || async {
        Ok((delayed(addr, HEAVY)? > 0.0).then_some(()))
    })
    .await?;
    for q in 0..5 {
        let name = format!("quiet{q}");
        apply_yaml(client, &resource(PROBE, &name, 1).to_string(), Some(ns)).await?;
    }
    for q in 0..5 {
        let name = format!("quiet{q}");
        wait_for(&format!("Probe {name} Done"), T, || async {
            Ok(get(client, PROBE.0, PROBE.1, Some(ns), &name)
                .await?
                .filter(|o| o["status"]["phase"] == "Done"))
        })
        .await?;
    }
    let configmaps = dynamic_api(client, "v1", "ConfigMap", Some(ns)).await?;
    let heavy_written = configmaps
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("heavy"))
        })
        .count();
    eprintln!(
        "the quiet operator Done with {heavy_written} of the heavy one's {} outputs written; writes delayed: heavy {}, quiet {}",
        HEAVY_RESOURCES * OUTPUTS,
        delayed(addr, HEAVY)?,
        delayed(addr, QUIET)?
    );
    ensure!(
        heavy_written < HEAVY_RESOURCES * OUTPUTS,
        "the heavy operator's writes were still waiting when the quiet one was done"
    );
    ensure!(
        delayed(addr, QUIET)? == 0.0,
        "the quiet operator's writes never waited"
    );
    // The heavy one gets there, at its own pace.
    wait_for("every heavy output written", T, || async {
        let n = configmaps
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("heavy"))
            })
            .count();
        Ok((n == HEAVY_RESOURCES * OUTPUTS).then_some(()))
    })
    .await?;
    Ok(())
}
