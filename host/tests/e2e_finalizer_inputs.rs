//! A finalizer with inputs on the local cluster (issue 14 §4): the WasmOperator declares
//! `spec.finalizer.inputs` (selected by the resource's own selector, as a phase's are); when a
//! Leaser is deleted its finalizer gets exactly the ConfigMaps that selector matches, a change
//! to one of them re-runs the finalizer of the terminating resource, and once the finalizer is
//! done the resource goes.

mod common;

use anyhow::ensure;
use common::cluster::*;
use kube::Client;
use serde_json::{json, Value};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
const LEASER: (&str, &str) = ("test.wasmpilot.io/v1", "Leaser");

const MANIFESTS: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: leasers.test.wasmpilot.io}
spec:
  group: test.wasmpilot.io
  scope: Namespaced
  names: {plural: leasers, singular: leaser, kind: Leaser}
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
metadata: {name: leaser}
spec:
  resource: {apiVersion: test.wasmpilot.io/v1, kind: Leaser}
  phases:
    - name: Hold
      initial: true
      module: {file: {path: wasmpilot_test_scripted.wasm}}
  finalizer:
    module: {file: {path: wasmpilot_test_scripted.wasm}}
    inputs:
      - name: leases
        apiVersion: v1
        kind: ConfigMap
        selectorFrom: spec.pick
        fields: [data.holder]
";

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_finalizer_reads_the_inputs_it_declares() {
    let client = client().await;
    // This build's WasmOperator CRD (with finalizer inputs), then the test's.
    let crd =
        serde_yaml::to_string(&<wasmpilot::crd::WasmOperator as kube::CustomResourceExt>::crd())
            .expect("the CRD as YAML");
    apply_yaml(&client, &crd, None)
        .await
        .expect("WasmOperator CRD");
    apply_yaml(&client, MANIFESTS, None)
        .await
        .expect("Leaser CRD and operator");
    let wasm_dir = common::wasm_dir();
    let host = Host::start(
        &["--module-dir", wasm_dir.to_str().expect("utf-8 path")],
        "wasmpilot-e2e-finalizer-inputs",
    );
    let ns = create_namespace(&client, "finalizer-inputs")
        .await
        .expect("namespace");
    let result = scenario(&client, &ns).await;
    // Whatever happened, leave no finalizer behind (the host stops with this test).
    let api = dynamic_api(&client, LEASER.0, LEASER.1, Some(&ns)).await;
    if let Ok(api) = api {
        let _ = api
            .patch(
                "r",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    let _ = delete(
        &client,
        "wasmpilot.io/v1alpha1",
        "WasmOperator",
        None,
        "leaser",
    )
    .await;
    drop(host);
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

fn lease(name: &str, app: &str) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"app": app}}, "data": {"holder": name}})
    .to_string()
}

async fn finalizer_saw(client: &Client, ns: &str, want: Value) -> anyhow::Result<Value> {
    wait_for(&format!("the finalizer to see {want}"), T, || async {
        let r = must(get(client, LEASER.0, LEASER.1, Some(ns), "r").await?, "r")?;
        Ok((r["status"]["finalizerInputs"]["leases"] == want).then_some(r))
    })
    .await
}

async fn scenario(client: &Client, ns: &str) -> anyhow::Result<()> {
    wait_condition(
        client,
        ("wasmpilot.io/v1alpha1", "WasmOperator"),
        None,
        "leaser",
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    for (name, app) in [("l1", "x"), ("l2", "x"), ("other", "y")] {
        apply_yaml(client, &lease(name, app), Some(ns)).await?;
    }
    // Pending for 10 minutes after each run: only a change re-runs it within the test.
    let leaser = |mode: &str| {
        json!({"apiVersion": LEASER.0, "kind": LEASER.1, "metadata": {"name": "r"},
               "spec": {"pick": {"matchLabels": {"app": "x"}},
                        "phases": {"Hold": {"mode": "ok"}},
                        "finalize": {"mode": mode, "countInputs": true, "requeueAfterMs": 600_000}}})
        .to_string()
    };
    apply_yaml(client, &leaser("pending"), Some(ns)).await?;
    wait_for("the host's finalizer on r", T, || async {
        let r = must(get(client, LEASER.0, LEASER.1, Some(ns), "r").await?, "r")?;
        Ok((str_list(&r["metadata"]["finalizers"]) == ["wasmpilot.io/leaser"]).then_some(()))
    })
    .await?;

    delete(client, LEASER.0, LEASER.1, Some(ns), "r").await?;
    // The finalizer got the leases r's selector matches, not `other`.
    let r = finalizer_saw(client, ns, json!(["l1", "l2"])).await?;
    ensure!(
        !r["metadata"]["deletionTimestamp"].is_null(),
        "the premise: r is being deleted"
    );

    // A new matching lease re-runs the terminating resource's finalizer (its own requeue is
    // ten minutes away).
    apply_yaml(client, &lease("l3", "x"), Some(ns)).await?;
    finalizer_saw(client, ns, json!(["l1", "l2", "l3"])).await?;

    // Done: the host releases r.
    apply_yaml(client, &leaser("ok"), Some(ns)).await?;
    wait_for("r deleted after its finalizer", T, || async {
        Ok(get(client, LEASER.0, LEASER.1, Some(ns), "r")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    Ok(())
}
