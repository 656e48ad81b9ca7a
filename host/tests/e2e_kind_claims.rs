//! One WasmOperator manages a resource kind (issue 30): a second one naming the same kind is
//! refused with `Ready=False`, reason `ResourceKindClaimed`, naming the first, and never writes
//! the kind's outputs; once the first is deleted, the second takes the kind over without an
//! edit. Two operators on one kind used to take over and prune each other's outputs.
//!
//! Two operators creating each other's resources (one outputs the other's kind and back) are a
//! cycle without end: the youngest on it is refused (`OutputCycle`, naming the cycle) until an
//! output changes or the admin allows one edge; an older operator's edit closing a cycle stops
//! the younger one.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const FIRST: &str = "claim-first";
const SECOND: &str = "claim-second";
const CYCLE: &str = "claim-cycle";

fn operator(name: &str) -> String {
    operator_of(name, LAG, &[], &[])
}

/// An operator managing `resource` whose Start outputs ConfigMaps and the `more` kinds, allowing
/// the `allowed` kinds as sensitive.
fn operator_of(
    name: &str,
    resource: (&str, &str),
    more: &[(&str, &str)],
    allowed: &[(&str, &str)],
) -> String {
    let kind =
        |(api_version, kind): &(&str, &str)| json!({"apiVersion": api_version, "kind": kind});
    let mut outputs = vec![json!({"apiVersion": "v1", "kind": "ConfigMap"})];
    outputs.extend(more.iter().map(kind));
    let mut spec = json!({
    "resource": kind(&resource),
    "phases": [
        {"name": "Start", "initial": true, "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
         "outputs": outputs, "next": ["Done"]},
        {"name": "Done", "final": true}
    ]});
    if !allowed.is_empty() {
        spec["allowSensitiveKinds"] = allowed.iter().map(kind).collect();
    }
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name}, "spec": spec})
        .to_string()
}

/// Applies a WasmOperator and waits until its status reports the applied generation with
/// `Ready` = `status` for `reason`; returns its `Ready` message.
async fn apply_operator(
    client: &kube::Client,
    yaml: &str,
    (status, reason): (&str, &str),
) -> anyhow::Result<String> {
    apply_yaml(client, yaml, None).await?;
    let name = wasmpilot::offline::parse_documents(yaml)?[0]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_for(
        &format!("{name} Ready={status} {reason}, this generation"),
        T,
        || async {
            let Some(o) = get(client, OPS.0, OPS.1, None, &name).await? else {
                return Ok(None);
            };
            let current = o["status"]["observedGeneration"] == o["metadata"]["generation"];
            Ok(condition(&o, "Ready")
                .filter(|c| current && c["status"] == status && c["reason"] == reason)
                .map(|c| c["message"].as_str().unwrap_or_default().to_string()))
        },
    )
    .await
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
        &[FIRST, SECOND, CYCLE],
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
    output_cycle(client, ns).await
}

/// SECOND (on Lag) outputs Probes too; CYCLE, younger, on Probe, outputs Lags: refused.
async fn output_cycle(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    test_kind_free(client, PROBE.1).await?;
    let running = ("True", "ControllerRunning");
    let refused = ("False", "OutputCycle");
    let second_with_probes = operator_of(SECOND, LAG, &[PROBE], &[]);
    apply_operator(client, &second_with_probes, running).await?;
    let cycle = operator_of(CYCLE, PROBE, &[LAG], &[]);
    let message = apply_operator(client, &cycle, refused).await?;
    let named = "WasmOperator claim-cycle outputs test.wasmpilot.io Lag, managed by claim-second; \
                 claim-second outputs test.wasmpilot.io Probe, managed by claim-cycle";
    ensure!(
        message.contains(named) && message.contains("allowSensitiveKinds"),
        "the refusal names the cycle and the way out: {message}"
    );
    let second = must(get(client, OPS.0, OPS.1, None, SECOND).await?, SECOND)?;
    ensure!(
        condition(&second, "Ready").is_some_and(|c| c["status"] == "True"),
        "the older operator on the cycle keeps running: {second}"
    );

    // Premise: the definition is otherwise valid. Allowing its edge, the admin lets it run, and
    // a Probe created while it was refused is reconciled.
    let probe = json!({"apiVersion": PROBE.0, "kind": PROBE.1, "metadata": {"name": "p"},
                       "spec": {"phases": {"Start": {"next": "Done"}}}});
    apply_yaml(client, &probe.to_string(), Some(ns)).await?;
    apply_operator(client, &operator_of(CYCLE, PROBE, &[LAG], &[LAG]), running).await?;
    wait_for("Probe p Done", T, || async {
        Ok(get(client, PROBE.0, PROBE.1, Some(ns), "p")
            .await?
            .filter(|o| o["status"]["phase"] == "Done")
            .map(|_| ()))
    })
    .await?;

    // Without the allowance, refused again; the older one dropping its Probe output loads it
    // with no edit of its own.
    apply_operator(client, &cycle, refused).await?;
    apply_operator(client, &operator(SECOND), running).await?;
    wait_condition(
        client,
        OPS,
        None,
        CYCLE,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;

    // The older one's edit closing the cycle again stops the younger, running one.
    apply_operator(client, &second_with_probes, running).await?;
    wait_condition(
        client,
        OPS,
        None,
        CYCLE,
        ("Ready", "False", "OutputCycle"),
        T,
    )
    .await?;
    Ok(())
}
