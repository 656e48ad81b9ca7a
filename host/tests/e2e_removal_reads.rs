//! A deleted operator's finalizer is fed nothing its grant does not allow (issue 68). The
//! operator runs granted ConfigMaps only; its author then edits it to declare a Secret as a
//! finalizer input (and lists Secret in `allowSensitiveKinds`) and deletes it at once, so that
//! its `runFinalizer` removal would hand its last worker every Secret of the namespace — which
//! the host, here the cluster admin, could read. The removal runs the definition the operator
//! last ran with, and reads as the operator: the worker never sees the Secret, and the host log
//! and Events do not name it.

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const OP: &str = "removal-reads";
const FINALIZER: &str = "wasmpilot.io/removal-reads";
const SECRET: &str = "removal-reads-token";

fn operator() -> Value {
    let file = json!({"file": {"path": "wasmpilot_test_scripted.wasm"}});
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OP}, "spec": {
        "resource": {"apiVersion": LAG.0, "kind": LAG.1},
        "phases": [{"name": "Start", "initial": true, "module": file, "next": ["Done"]},
                   {"name": "Done", "final": true}],
        "finalizer": {"module": file, "onOperatorDeletion": "runFinalizer",
            "inputs": [{"name": "configs", "apiVersion": "v1", "kind": "ConfigMap",
                        "matchLabels": {"removal-reads": "yes"}}]}}})
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_deleted_operators_finalizer_reads_only_its_grant() {
    with_scripted_host(
        LAG.1,
        "wasmpilot-e2e-removal-reads",
        "e2e-removal-reads",
        &[OP],
        |client, ns, log| async move {
            scenario(&client, &ns).await?;
            let log = std::fs::read_to_string(&log)?;
            ensure!(
                !log.contains(SECRET),
                "the host log names the Secret: the finalizer worker was handed it"
            );
            Ok(())
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    for (kind, name) in [("Secret", SECRET), ("ConfigMap", "removal-reads-config")] {
        apply_yaml(
            client,
            &json!({"apiVersion": "v1", "kind": kind,
                    "metadata": {"name": name, "labels": {"removal-reads": "yes"}},
                    "data": {"k": "aHVudGVyMg=="}})
            .to_string(),
            Some(ns),
        )
        .await?;
    }
    apply_yaml(client, &operator().to_string(), None).await?;
    let running = ("Ready", "True", "ControllerRunning");
    wait_condition(client, OPS, None, OP, running, T).await?;
    apply_yaml(
        client,
        &json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": "kept"},
                "spec": {"phases": {"Start": {"next": "Done"}},
                         "finalize": {"mode": "ok", "countInputs": true}}})
        .to_string(),
        Some(ns),
    )
    .await?;
    wait_for("Lag kept Done with the finalizer", T, || async {
        let o = get(client, LAG.0, LAG.1, Some(ns), "kept").await?;
        Ok(o.filter(|o| {
            o["status"]["phase"] == "Done"
                && str_list(&o["metadata"]["finalizers"]).contains(&FINALIZER.to_string())
        })
        .map(|_| ()))
    })
    .await?;

    // The attack: a Secret input declared, then the operator deleted at once.
    let api = dynamic_api(client, OPS.0, OPS.1, None).await?;
    let mut spec = operator()["spec"].clone();
    spec["allowSensitiveKinds"] = json!([{"apiVersion": "v1", "kind": "Secret"}]);
    spec["finalizer"]["inputs"]
        .as_array_mut()
        .expect("inputs")
        .push(
            json!({"name": "secrets", "apiVersion": "v1", "kind": "Secret",
                     "matchLabels": {"removal-reads": "yes"}}),
        );
    api.patch(
        OP,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": spec})),
    )
    .await?;
    // The premise: the WasmOperator being deleted declares the Secret input.
    let edited = must(get(client, OPS.0, OPS.1, None, OP).await?, OP)?;
    ensure!(
        edited["spec"]["finalizer"]["inputs"]
            .to_string()
            .contains("\"Secret\""),
        "the edit landed: {}",
        edited["spec"]
    );
    delete(client, OPS.0, OPS.1, None, OP).await?;
    wait_for("the WasmOperator gone", T, || async {
        Ok(get(client, OPS.0, OPS.1, None, OP)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;

    let kept = must(get(client, LAG.0, LAG.1, Some(ns), "kept").await?, "kept")?;
    ensure!(
        !str_list(&kept["metadata"]["finalizers"]).contains(&FINALIZER.to_string()),
        "released: {}",
        kept["metadata"]
    );
    let events = events_for(client, ns, "kept").await?;
    let released: Vec<&str> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FinalizerReleased"))
        .filter_map(|e| e.message.as_deref())
        .collect();
    ensure!(
        !released.is_empty(),
        "a FinalizerReleased Event: {:?}",
        events.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    ensure!(
        released.iter().all(|m| !m.contains(SECRET)),
        "an Event names the Secret: {released:?}"
    );
    // The edited definition ran (granted only where Secrets are): reading as the operator, the
    // removal was refused the Secrets and did not run the worker on a partial view; had it run
    // the definition before the edit, its worker would have seen the ConfigMap only.
    ensure!(
        released.iter().any(|m| {
            m.contains("did not run: listing its input v1 Secret as the operator failed")
                || m.contains("ran and reported done")
        }),
        "the Event says what the finalizer did: {released:?}"
    );
    Ok(())
}
