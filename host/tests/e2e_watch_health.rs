//! A watch an operator depends on fails — its resource kind's CRD is deleted under it: the
//! WasmOperator says so (`Ready=False`, reason `WatchFailing`, naming the kind) instead of
//! reading as running, and goes back to `ControllerRunning` once the CRD returns, reconciling
//! the kind's new resources again.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const MAYFLY: (&str, &str) = ("test.wasmpilot.io/v1", "Mayfly");
const CRD: (&str, &str) = ("apiextensions.k8s.io/v1", "CustomResourceDefinition");
const CRD_NAME: &str = "mayflies.test.wasmpilot.io";
const OPERATOR: &str = "watch-health";

fn crd() -> Value {
    json!({"apiVersion": CRD.0, "kind": CRD.1, "metadata": {"name": CRD_NAME}, "spec": {
        "group": "test.wasmpilot.io", "scope": "Namespaced",
        "names": {"plural": "mayflies", "singular": "mayfly", "kind": MAYFLY.1},
        "versions": [{"name": "v1", "served": true, "storage": true,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object",
                "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn operator() -> String {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OPERATOR}, "spec": {
        "resource": {"apiVersion": MAYFLY.0, "kind": MAYFLY.1},
        "phases": [
            {"name": "Start", "initial": true, "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
             "next": ["Done"]},
            {"name": "Done", "final": true}
        ]}})
    .to_string()
}

/// A Mayfly whose Start moves to Done.
fn mayfly(name: &str) -> String {
    json!({"apiVersion": MAYFLY.0, "kind": MAYFLY.1, "metadata": {"name": name},
           "spec": {"phases": {"Start": {"next": "Done"}}}})
    .to_string()
}

/// Waits until no Mayfly CRD exists (one being deleted goes once its objects have).
async fn gone(client: &kube::Client) -> anyhow::Result<()> {
    wait_for("the Mayfly CRD gone", T, || async {
        let crd = get(client, CRD.0, CRD.1, None, CRD_NAME).await?;
        Ok(crd.is_none().then_some(()))
    })
    .await
}

async fn done(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    wait_for(&format!("Mayfly {name} Done"), T, || async {
        Ok(get(client, MAYFLY.0, MAYFLY.1, Some(ns), name)
            .await?
            .filter(|o| o["status"]["phase"] == "Done"))
    })
    .await
    .map(|_| ())
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_failing_watch_is_reported_until_it_works_again() {
    let client = client().await;
    // An earlier run's CRD may still be there (a run cut off before its cleanup) or going (its
    // deletion waits for its objects'): this run starts from none.
    let _ = delete(&client, CRD.0, CRD.1, None, CRD_NAME).await;
    gone(&client)
        .await
        .expect("no Mayfly CRD left from an earlier run");
    wasmpilot::deploy::apply_crd(&client, crd())
        .await
        .expect("the Mayfly CRD");
    with_scripted_host(
        MAYFLY.1,
        "wasmpilot-e2e-watch-health",
        "e2e-watch-health",
        &[OPERATOR],
        |client, ns, _| async move { scenario(&client, &ns).await },
    )
    .await;
    let _ = delete(&client, CRD.0, CRD.1, None, CRD_NAME).await;
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    apply_yaml(client, &operator(), None).await?;
    let running = ("Ready", "True", "ControllerRunning");
    wait_condition(client, OPS, None, OPERATOR, running, T).await?;
    apply_yaml(client, &mayfly("before"), Some(ns)).await?;
    done(client, ns, "before").await?;

    // The CRD goes (with its Mayflies): the operator's resource watch cannot list or watch.
    delete(client, CRD.0, CRD.1, None, CRD_NAME).await?;
    gone(client).await?;
    let failing = wait_condition(
        client,
        OPS,
        None,
        OPERATOR,
        ("Ready", "False", "WatchFailing"),
        T,
    )
    .await?;
    let message = condition(&failing, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    ensure!(
        message.contains("the watch of test.wasmpilot.io/v1 Mayfly fails") && message.len() < 2048,
        "the report names the kind, bounded: {message}"
    );
    // The API server's answer as a person reads it, not kube's debug output of it.
    ensure!(
        message.contains("HTTP 404") && !message.contains("Status {"),
        "the report quotes the API server briefly: {message}"
    );

    // The CRD returns: the watch works again, and so does the operator.
    wasmpilot::deploy::apply_crd(client, crd()).await?;
    wait_condition(client, OPS, None, OPERATOR, running, T).await?;
    apply_yaml(client, &mayfly("after"), Some(ns)).await?;
    done(client, ns, "after").await?;
    Ok(())
}
