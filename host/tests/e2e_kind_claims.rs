//! One WasmOperator manages a resource kind (issue 30): a second one naming the same kind is
//! refused with `Ready=False`, reason `ResourceKindClaimed`, naming the first, and never writes
//! the kind's outputs; once the first is deleted, the second takes the kind over without an
//! edit. Two operators on one kind used to take over and prune each other's outputs.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const FIRST: &str = "claim-first";
const SECOND: &str = "claim-second";

fn operator(name: &str) -> String {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name}, "spec": {
        "resource": {"apiVersion": LAG.0, "kind": LAG.1},
        "phases": [
            {"name": "Start", "initial": true, "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}], "next": ["Done"]},
            {"name": "Done", "final": true}
        ]}})
    .to_string()
}

/// A Lag whose Start applies ConfigMap `<name>-out` and moves to Done.
fn lag(name: &str) -> String {
    json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": name},
           "spec": {"phases": {"Start": {"next": "Done", "outputs": [
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-out")}}]}}}})
    .to_string()
}

/// Waits until Lag `name` is Done; returns the operator label of its output.
async fn done_by(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<String> {
    wait_for(&format!("Lag {name} Done"), T, || async {
        let done = get(client, LAG.0, LAG.1, Some(ns), name)
            .await?
            .is_some_and(|o| o["status"]["phase"] == "Done");
        let out = get(client, "v1", "ConfigMap", Some(ns), &format!("{name}-out")).await?;
        Ok(out.filter(|_| done).map(|o| {
            o["metadata"]["labels"][wasmpilot::OPERATOR_LABEL]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }))
    })
    .await
}

fn managers(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_second_operator_on_a_kind_is_refused_until_the_first_is_gone() {
    with_scripted_host(
        LAG.1,
        "wasmpilot-e2e-kind-claims",
        "e2e-claims",
        &[FIRST, SECOND],
        |client, ns, log| async move {
            let _ = log;
            scenario(&client, &ns).await
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    apply_yaml(client, &operator(FIRST), None).await?;
    wait_condition(
        client,
        OPS,
        None,
        FIRST,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    // Created later (a creation timestamp's second apart, so which one is older is clear).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    apply_yaml(client, &operator(SECOND), None).await?;
    let refused = wait_condition(
        client,
        OPS,
        None,
        SECOND,
        ("Ready", "False", "ResourceKindClaimed"),
        T,
    )
    .await?;
    let message = condition(&refused, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    ensure!(
        message.contains("test.wasmpilot.io Lag is managed by WasmOperator claim-first"),
        "the refusal names the kind and the first operator: {message}"
    );
    let first = wait_condition(
        client,
        OPS,
        None,
        FIRST,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    ensure!(condition(&first, "Ready").is_some(), "{first}");

    // Premise: both definitions are valid and were both loaded; only the first reconciles.
    apply_yaml(client, &lag("a"), Some(ns)).await?;
    ensure!(
        done_by(client, ns, "a").await? == FIRST,
        "Lag a's output is the first operator's"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = must(
        get(client, "v1", "ConfigMap", Some(ns), "a-out").await?,
        "a-out",
    )?;
    ensure!(
        managers(&out) == [format!("wasmpilot-{FIRST}")],
        "only the first operator wrote the output: {:?}",
        managers(&out)
    );

    // The first goes: the second takes the kind over, with no edit of its own.
    delete(client, OPS.0, OPS.1, None, FIRST).await?;
    wait_condition(
        client,
        OPS,
        None,
        SECOND,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    apply_yaml(client, &lag("b"), Some(ns)).await?;
    ensure!(
        done_by(client, ns, "b").await? == SECOND,
        "Lag b's output is the second operator's"
    );
    Ok(())
}
