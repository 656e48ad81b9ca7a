//! One operator cannot take the host's memory or reach past its definition (issue 30): with a
//! worker memory budget of 256 MiB and 4 worker slots, a WasmOperator whose phase may use
//! 128 MiB per call (512 MiB with every slot running it) is refused before it loads —
//! `Ready=False`, `MemoryBudgetExceeded`, saying what would fit — and its resources get no call;
//! one within the budget runs. Before, one definition got the host OOM-killed. And modules that
//! point at the cloud metadata address or a loopback registry are not fetched.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::json;
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const FITS: &str = "budget-fits";
const TOO_BIG: &str = "budget-too-big";
const REACH: &str = "budget-reach";

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn an_operator_whose_limits_cannot_fit_the_host_is_refused() {
    with_scripted_host_args(
        PROBE.1,
        &["--worker-memory-budget-mib", "256"],
        "wasmpilot-e2e-budgets",
        "e2e-budgets",
        &[FITS, TOO_BIG, REACH],
        |client, ns, _log| async move { scenario(&client, &ns).await },
    )
    .await;
}

fn operator(name: &str, kind: (&str, &str), memory_mib: Option<u64>) -> serde_json::Value {
    let limits = memory_mib.map_or(json!({}), |m| json!({"memoryMib": m}));
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name}, "spec": {
        "resource": {"apiVersion": kind.0, "kind": kind.1},
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"], "limits": limits,
             "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}}},
            {"name": "Done", "final": true}]}})
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    test_kind_free(client, LAG.1).await?;
    apply_yaml(client, &operator(FITS, PROBE, None).to_string(), None).await?;
    apply_yaml(client, &operator(TOO_BIG, LAG, Some(128)).to_string(), None).await?;
    let refused = wait_condition(
        client,
        OPS,
        None,
        TOO_BIG,
        ("Ready", "False", "MemoryBudgetExceeded"),
        T,
    )
    .await?;
    let message = condition(&refused, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    ensure!(
        message.contains("phase Start may use 128 MiB per call")
            && message.contains("512 MiB, more than the host's worker memory budget of 256 MiB")
            && message.contains("at most 64 MiB"),
        "the refusal says what does not fit and what would: {message}"
    );
    wait_condition(
        client,
        OPS,
        None,
        FITS,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;

    let resource = |kind: (&str, &str), name: &str| {
        json!({"apiVersion": kind.0, "kind": kind.1, "metadata": {"name": name},
               "spec": {"phases": {"Start": {"mode": "ok", "next": "Done"}}}})
        .to_string()
    };
    apply_yaml(client, &resource(PROBE, "fits"), Some(ns)).await?;
    apply_yaml(client, &resource(LAG, "too-big"), Some(ns)).await?;
    wait_for("the operator within the budget to decide", T, || async {
        let o = get(client, PROBE.0, PROBE.1, Some(ns), "fits").await?;
        Ok(o.filter(|o| o["status"]["phase"] == "Done").map(|_| ()))
    })
    .await?;
    // As long again for the refused one: no controller runs for it, so no call, no status.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let untouched = must(
        get(client, LAG.0, LAG.1, Some(ns), "too-big").await?,
        "too-big",
    )?;
    ensure!(
        untouched["status"].is_null(),
        "the refused operator's resource got a call: {untouched}"
    );
    let _ = delete(client, OPS.0, OPS.1, None, TOO_BIG).await;

    // Reach: a module URL on the metadata address, an OCI registry on loopback (the host runs
    // without --allow-fetch-from): the definition refused as it loads, before any connection,
    // naming the field and the address.
    for (module, refused) in [
        (
            json!({"url": {"url": "https://169.254.169.254/latest/meta-data/x.wasm", "sha256": "0".repeat(64)}}),
            "spec.phases[0].module.url: a link-local address 169.254.169.254",
        ),
        (
            json!({"oci": {"reference": "127.0.0.1:5000/team/worker:v1", "insecure": true}}),
            "spec.phases[0].module.oci.reference: a loopback address 127.0.0.1",
        ),
    ] {
        let mut op = operator(REACH, LAG, None);
        op["spec"]["phases"][0]["module"] = module;
        apply_yaml(client, &op.to_string(), None).await?;
        let o = wait_for(&format!("{REACH} refused: {refused}"), T, || async {
            let o = must(get(client, OPS.0, OPS.1, None, REACH).await?, REACH)?;
            let ready = condition(&o, "Ready").cloned().unwrap_or_default();
            Ok((ready["reason"] == "InvalidDefinition"
                && ready["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(refused)))
            .then_some(o))
        })
        .await?;
        ensure!(
            condition(&o, "Ready").is_some_and(|c| c["status"] == "False"),
            "{o}"
        );
    }
    let _ = delete(client, OPS.0, OPS.1, None, REACH).await;
    Ok(())
}
