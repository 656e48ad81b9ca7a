//! Input selection in the host on the local cluster (issue 14 §2): each Picker selects
//! ConfigMaps by the label selector in its own `spec.pick` (`selectorFrom`) plus the input's
//! `matchExpressions`; the worker gets only those, a ConfigMap change requeues only the
//! Pickers whose selector matches its old or new labels, and an invalid selector is an
//! `InvalidSelector` Condition naming the field while the other Pickers carry on. The input
//! declares `fields`: the worker gets each ConfigMap cut to `data.v` (and its name), and a
//! change to another field reconciles nobody.

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::Client;
use serde_json::{json, Value};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
const PICKER: (&str, &str) = ("test.wasmpilot.io/v1", "Picker");

const MANIFESTS: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pickers.test.wasmpilot.io}
spec:
  group: test.wasmpilot.io
  scope: Namespaced
  names: {plural: pickers, singular: picker, kind: Picker}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: picker}
spec:
  resource: {apiVersion: test.wasmpilot.io/v1, kind: Picker}
  phases:
    - name: Watch
      initial: true
      module: {file: {path: wasmpilot_test_scripted.wasm}}
      inputs:
        - name: picked
          apiVersion: v1
          kind: ConfigMap
          selectorFrom: spec.pick
          matchExpressions: [{key: retired, operator: DoesNotExist}]
          fields: [data.v]
";

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn the_host_selects_and_requeues_by_each_resources_selector() {
    let client = client().await;
    // This build's WasmOperator CRD (with selectorFrom and matchExpressions), then the test's.
    let crd =
        serde_yaml::to_string(&<wasmpilot::crd::WasmOperator as kube::CustomResourceExt>::crd())
            .expect("the CRD as YAML");
    apply_yaml(&client, &crd, None)
        .await
        .expect("WasmOperator CRD");
    apply_yaml(&client, MANIFESTS, None)
        .await
        .expect("Picker CRD and operator");
    let wasm_dir = common::wasm_dir();
    let mut host = Host::start(
        &["--module-dir", wasm_dir.to_str().expect("utf-8 path")],
        "wasmpilot-e2e-selectors",
    );
    let ns = create_namespace(&client, "selectors")
        .await
        .expect("namespace");
    let result = scenario(&client, &ns, &host).await;
    let alive = host.is_alive();
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    let _ = delete(
        &client,
        "wasmpilot.io/v1alpha1",
        "WasmOperator",
        None,
        "picker",
    )
    .await;
    assert!(alive, "the host process died");
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

fn config_map(name: &str, labels: Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": {"v": "1"}})
    .to_string()
}

fn picker(name: &str, pick: Value) -> String {
    json!({"apiVersion": PICKER.0, "kind": PICKER.1, "metadata": {"name": name},
           "spec": {"pick": pick, "phases": {"Watch": {"mode": "ok", "countInputs": true, "echoInputs": true}}}})
    .to_string()
}

async fn picked(client: &Client, ns: &str, name: &str, want: i64) -> anyhow::Result<()> {
    wait_for(
        &format!("Picker {name} to have picked {want}"),
        T,
        || async {
            let p = must(get(client, PICKER.0, PICKER.1, Some(ns), name).await?, name)?;
            Ok((p["status"]["inputCounts"]["picked"] == want).then_some(()))
        },
    )
    .await
}

/// Host log lines of reconciles of Picker `picker` that `cause` (a ConfigMap name) triggered,
/// after byte `from` of the log.
fn reconciles_caused(host: &Host, from: usize, ns: &str, picker: &str, cause: &str) -> usize {
    let log = host.log_text();
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "object.ref=Picker.v1.test.wasmpilot.io/{picker}.{ns} "
            )) && l.contains(&format!("ConfigMap.v1./{cause}.{ns}"))
                && l.contains("scripted step")
        })
        .count()
}

async fn scenario(client: &Client, ns: &str, host: &Host) -> anyhow::Result<()> {
    wait_condition(
        client,
        ("wasmpilot.io/v1alpha1", "WasmOperator"),
        None,
        "picker",
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    for (name, labels) in [
        ("a1", json!({"team": "a"})),
        ("a-retired", json!({"team": "a", "retired": "yes"})),
        ("b1", json!({"team": "b", "tier": "web"})),
        ("b2", json!({"team": "b", "tier": "db"})),
    ] {
        apply_yaml(client, &config_map(name, labels), Some(ns)).await?;
    }
    apply_yaml(
        client,
        &picker("pa", json!({"matchLabels": {"team": "a"}})),
        Some(ns),
    )
    .await?;
    apply_yaml(
        client,
        &picker(
            "pb",
            json!({"matchExpressions": [
                {"key": "team", "operator": "In", "values": ["b"]},
                {"key": "tier", "operator": "NotIn", "values": ["db"]}]}),
        ),
        Some(ns),
    )
    .await?;
    // The worker gets only what the selectors pick (a-retired: the input's own expression).
    picked(client, ns, "pa", 1).await?;
    picked(client, ns, "pb", 1).await?;
    // ...cut to the declared fields: no labels, no other data, no bookkeeping.
    let pa = must(get(client, PICKER.0, PICKER.1, Some(ns), "pa").await?, "pa")?;
    ensure!(
        pa["status"]["inputs"]["picked"]
            == json!([{"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "a1", "namespace": ns}, "data": {"v": "1"}}]),
        "pa's worker got {}",
        pa["status"]["inputs"]
    );

    // A change to a field no worker reads (a1's data.w) reconciles nobody; a later change to
    // b1 proves the host's watch has passed it.
    let from = host.log_text().len();
    apply_yaml(
        client,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a1", "labels": {"team": "a"}},
                "data": {"v": "1", "w": "unread"}})
        .to_string(),
        Some(ns),
    )
    .await?;
    let a1 = must(get(client, "v1", "ConfigMap", Some(ns), "a1").await?, "a1")?;
    ensure!(
        a1["data"]["w"] == "unread",
        "the premise: a1 changed on the cluster"
    );
    apply_yaml(
        client,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "b1", "labels": {"team": "b", "tier": "web"}},
                "data": {"v": "1b"}})
        .to_string(),
        Some(ns),
    )
    .await?;
    wait_for("pb reconciled for b1's data.v", T, || async {
        Ok((reconciles_caused(host, from, ns, "pb", "b1") > 0).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        reconciles_caused(host, from, ns, "pa", "a1") == 0,
        "pa was reconciled for a change to a1's data.w, which no input declares"
    );

    // A change to b1 (labels unchanged) requeues pb only.
    let from = host.log_text().len();
    apply_yaml(
        client,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "b1", "labels": {"team": "b", "tier": "web"}},
                "data": {"v": "2"}})
        .to_string(),
        Some(ns),
    )
    .await?;
    wait_for("pb reconciled for b1", T, || async {
        Ok((reconciles_caused(host, from, ns, "pb", "b1") > 0).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        reconciles_caused(host, from, ns, "pa", "b1") == 0,
        "pa was reconciled for b1, which its selector does not match"
    );

    // A ConfigMap no selector matches reconciles nobody.
    let from = host.log_text().len();
    apply_yaml(client, &config_map("c1", json!({"team": "c"})), Some(ns)).await?;
    // Premise for the silence below: the change reached the host (b1 changed again after it).
    apply_yaml(
        client,
        &config_map("b1", json!({"team": "b", "tier": "web", "n": "3"})),
        Some(ns),
    )
    .await?;
    wait_for("pb reconciled for b1 again", T, || async {
        Ok((reconciles_caused(host, from, ns, "pb", "b1") > 0).then_some(()))
    })
    .await?;
    for p in ["pa", "pb"] {
        ensure!(
            reconciles_caused(host, from, ns, p, "c1") == 0,
            "{p} was reconciled for c1"
        );
    }

    // Relabelling b1 to team a requeues both: pa by its new labels, pb by its old ones.
    apply_yaml(
        client,
        &config_map("b1", json!({"team": "a", "tier": "web"})),
        Some(ns),
    )
    .await?;
    picked(client, ns, "pa", 2).await?;
    picked(client, ns, "pb", 0).await?;

    // An invalid selector: a Condition naming the field; the others carry on.
    apply_yaml(
        client,
        &picker(
            "bad",
            json!({"matchExpressions": [{"key": "team", "operator": "Equals", "values": ["a"]}]}),
        ),
        Some(ns),
    )
    .await?;
    let bad = wait_condition(
        client,
        PICKER,
        Some(ns),
        "bad",
        ("Synced", "False", "InvalidSelector"),
        T,
    )
    .await?;
    let message = condition(&bad, "Synced")
        .and_then(|c| c["message"].as_str())
        .context("Synced message")?;
    ensure!(
        message.contains(r#"spec.pick.matchExpressions[0].operator: "Equals" is not In, NotIn, Exists or DoesNotExist"#),
        "{message}"
    );
    apply_yaml(client, &config_map("a2", json!({"team": "a"})), Some(ns)).await?;
    picked(client, ns, "pa", 3).await?;
    Ok(())
}
