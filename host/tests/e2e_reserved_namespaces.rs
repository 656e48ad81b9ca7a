//! No operator's output lands in the host's own namespace (issue 68): a cluster-scoped
//! resource's worker, whose account is granted ConfigMaps and Leases everywhere (so the API
//! server would take the writes), returns a ConfigMap and a Lease labelled like a replica's member
//! Lease into `wasmpilot-system`, beside a ConfigMap in a namespace of its own. The host applies
//! the latter, refuses the two (`Synced=False`, `OutputRefused`, naming the namespace), logs the
//! refusal, and neither object exists afterwards.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const HATCH: (&str, &str) = ("test.wasmpilot.io/v1", "Hatch");
const OPERATOR: &str = "reserved-ns";
const SYSTEM: &str = "wasmpilot-system";
const LEASE: (&str, &str) = ("coordination.k8s.io/v1", "Lease");

fn operator() -> Value {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OPERATOR}, "spec": {
        "resource": {"apiVersion": HATCH.0, "kind": HATCH.1},
        "allowSensitiveKinds": [{"apiVersion": LEASE.0, "kind": LEASE.1}],
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"],
             "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"},
                         {"apiVersion": LEASE.0, "kind": LEASE.1}]},
            {"name": "Done", "final": true}]}})
}

/// A Hatch whose worker writes into `SYSTEM` and into `ns`.
fn hatch(name: &str, ns: &str) -> Value {
    json!({"apiVersion": HATCH.0, "kind": HATCH.1, "metadata": {"name": name},
        "spec": {"phases": {"Start": {"mode": "ok", "next": "Done", "outputs": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": format!("{name}-stolen"), "namespace": SYSTEM},
             "data": {"from": name}},
            {"apiVersion": LEASE.0, "kind": LEASE.1,
             "metadata": {"name": format!("wasmpilot-member-{name}"), "namespace": SYSTEM,
                          "labels": {"wasmpilot.io/lease": "member"}},
             "spec": {"holderIdentity": format!("{name}-forged"), "leaseDurationSeconds": 3600}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": format!("{name}-fine"), "namespace": ns},
             "data": {"from": name}}]}}}})
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn outputs_into_the_hosts_namespace_are_refused() {
    with_scripted_host(
        HATCH.1,
        "wasmpilot-e2e-reserved-ns",
        "e2e-reserved-ns",
        &[OPERATOR],
        |client, ns, log| async move {
            let name = format!("{ns}-h");
            let result = scenario(&client, &ns, &name).await;
            let _ = delete(&client, HATCH.0, HATCH.1, None, &name).await;
            result?;
            let log = std::fs::read_to_string(&log)?;
            ensure!(
                log.contains("refused an output into the host's own namespace"),
                "the host logs the refusal"
            );
            Ok(())
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    apply_yaml(client, &operator().to_string(), None).await?;
    let running = ("Ready", "True", "ControllerRunning");
    wait_condition(client, OPS, None, OPERATOR, running, T).await?;
    // The premise: the operator's own account may write both kinds in the host's namespace, so
    // only the host stands between the worker and those writes.
    let account = format!("system:serviceaccount:{SYSTEM}:op-{OPERATOR}");
    for resource in ["configmaps", "leases.coordination.k8s.io"] {
        let answer = std::process::Command::new("kubectl")
            .args([
                "auth", "can-i", "create", resource, "-n", SYSTEM, "--as", &account,
            ])
            .output()?;
        ensure!(
            String::from_utf8_lossy(&answer.stdout).trim() == "yes",
            "{account} may create {resource} in {SYSTEM} (the grant the test relies on): {}",
            String::from_utf8_lossy(&answer.stderr)
        );
    }

    apply_yaml(client, &hatch(name, ns).to_string(), None).await?;
    let refused = wait_condition(
        client,
        HATCH,
        None,
        name,
        ("Synced", "False", "OutputRefused"),
        T,
    )
    .await?;
    let message = condition(&refused, "Synced")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    ensure!(
        message.contains(&format!("namespace {SYSTEM} is the host's own"))
            && message.contains(&format!("{name}-stolen"))
            && message.contains(&format!("wasmpilot-member-{name}")),
        "the Condition names both refused outputs and why: {message}"
    );
    // The other output was applied: the worker's result was taken, only the two refused.
    wait_for(&format!("ConfigMap {ns}/{name}-fine"), T, || async {
        get(client, "v1", "ConfigMap", Some(ns), &format!("{name}-fine")).await
    })
    .await?;
    ensure!(
        get(
            client,
            "v1",
            "ConfigMap",
            Some(SYSTEM),
            &format!("{name}-stolen")
        )
        .await?
        .is_none(),
        "no ConfigMap of the worker's in {SYSTEM}"
    );
    ensure!(
        get(
            client,
            LEASE.0,
            LEASE.1,
            Some(SYSTEM),
            &format!("wasmpilot-member-{name}")
        )
        .await?
        .is_none(),
        "no Lease of the worker's in {SYSTEM}"
    );
    Ok(())
}
