//! MyOwnShell end to end on a real kube-apiserver (KUBECONFIG; `deploy/local/test.sh` starts
//! the local one): `wasmpilot deploy examples/myownshell` and a host of its own, then what the
//! operator-sdk tutorial promises — a Deployment of `spec.size` busybox pods owned by the
//! MyOwnShell, resized when the spec changes, a finalizer that runs on delete, the Deployment
//! garbage-collected after it. Also: a hand-scaled Deployment is put back to `spec.size`, and
//! a deleted one is created again.

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// Garbage collection of dependents runs in kube-controller-manager, on its own schedule.
const GC: Duration = Duration::from_secs(90);
const MOS: (&str, &str) = ("shell.examples.io/v1", "MyOwnShell");
const DEP: (&str, &str) = ("apps/v1", "Deployment");
const WOP: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const OPERATOR: &str = "myownshell";
const HOST_FINALIZER: &str = "wasmpilot.io/myownshell";
/// A finalizer of the test's own, so the deleted MyOwnShell stays visible after the host
/// released it and `status.finalizedAt` can be read.
const HOLD_FINALIZER: &str = "e2e.examples.io/hold";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn myownshell_on_a_real_cluster() {
    let started = Instant::now();
    let client = client().await;
    let root = common::repo_root();

    // Ship MyOwnShell exactly as a user does (components were built by the test command).
    let status = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build", "examples/myownshell"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy examples/myownshell failed (build the components first: \
         cargo build --release --target wasm32-wasip2 -p myownshell-initializing \
         -p myownshell-syncing -p myownshell-ready -p myownshell-finalizer)"
    );

    let wasm_dir = common::wasm_dir();
    let mut host = Host::start(
        &["--module-dir", wasm_dir.to_str().expect("utf-8 path")],
        "wasmpilot-e2e-myownshell",
    );
    let op = wait_condition(
        &client,
        WOP,
        None,
        OPERATOR,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    let modules: Vec<&String> = op["status"]["modules"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        modules,
        ["Initializing", "Ready", "Syncing", "finalizer"],
        "{}",
        op["status"]
    );
    eprintln!("[{:>5.1?}] operator running", started.elapsed());

    let ns = create_namespace(&client, "myownshell-e2e")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut result = scenario(&client, &ns, started).await;
    if result.is_ok() {
        result = clean_delete(&client, &ns, &host, started).await;
    }
    let alive = host.is_alive();
    cleanup(&client, &ns).await;
    eprintln!("[{:>5.1?}] done", started.elapsed());
    assert!(alive, "the host process died");
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

/// A plain delete, as a user does it (no other finalizer holds the object): the finalizer worker
/// runs exactly once, the MyOwnShell is gone, and no Warning Event is left behind.
async fn clean_delete(
    client: &Client,
    ns: &str,
    host: &Host,
    started: Instant,
) -> anyhow::Result<()> {
    let shell = "clean";
    apply_yaml(
        client,
        &json!({"apiVersion": MOS.0, "kind": MOS.1, "metadata": {"name": shell}, "spec": {"size": 1}})
            .to_string(),
        Some(ns),
    )
    .await?;
    wait_ready(client, ns, shell, 1).await?;
    delete(client, MOS.0, MOS.1, Some(ns), shell).await?;
    wait_for("the MyOwnShell gone", T, || async {
        Ok(get(client, MOS.0, MOS.1, Some(ns), shell)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    // Events and log lines of the deletion's reconciles arrive within moments of it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = events_for(client, ns, shell).await?;
    let finalized: i32 = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Finalized"))
        .map(|e| e.count.unwrap_or(1).max(1))
        .sum();
    ensure!(finalized == 1, "{finalized} Finalized events: {events:?}");
    let warnings: Vec<_> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| format!("{:?}: {:?}", e.reason, e.message))
        .collect();
    ensure!(
        warnings.is_empty(),
        "a clean delete left Warning events: {warnings:?}"
    );
    let marker = format!("resource={ns}/{shell}");
    let log = host.log_text();
    let runs = log
        .lines()
        .filter(|l| l.contains(&marker) && l.contains("successfully finalized MyOwnShell"))
        .count();
    ensure!(
        runs == 1,
        "the finalizer worker ran {runs} times for one deletion"
    );
    ensure!(
        !log.lines()
            .any(|l| l.contains(&marker) && l.contains("could not record the failure")),
        "a failed status write was logged for the deleted MyOwnShell"
    );
    eprintln!(
        "[{:>5.1?}] clean delete: finalized once, no Warning",
        started.elapsed()
    );
    Ok(())
}

async fn scenario(client: &Client, ns: &str, started: Instant) -> anyhow::Result<()> {
    let step = |what: &str| eprintln!("[{:>5.1?}] {what}", started.elapsed());
    let shell = "shell";

    // Created with size 2 (and no image: the CRD defaults it) → Ready, Deployment of 2 owned by it.
    apply_yaml(
        client,
        &json!({"apiVersion": MOS.0, "kind": MOS.1, "metadata": {"name": shell}, "spec": {"size": 2}})
            .to_string(),
        Some(ns),
    )
    .await?;
    let obj = wait_ready(client, ns, shell, 2)
        .await
        .context("first sync")?;
    step("size 2: Ready");
    let uid = obj["metadata"]["uid"].clone();
    ensure!(
        str_list(&obj["metadata"]["finalizers"]) == [HOST_FINALIZER],
        "finalizer added: {}",
        obj["metadata"]
    );
    ensure!(
        obj["spec"]["image"] == "busybox:1.36",
        "image defaulted by the CRD: {}",
        obj["spec"]
    );
    ensure!(
        obj["status"]["deployment"] == shell,
        "status: {}",
        obj["status"]
    );
    let synced = must(condition(&obj, "Synced").cloned(), "Synced condition")?;
    ensure!(synced["status"] == "True", "{synced}");
    ensure!(obj["status"]["moduleDigest"]
        .as_str()
        .is_some_and(|d| d.starts_with("sha256:")));

    let dep = must(
        get(client, DEP.0, DEP.1, Some(ns), shell).await?,
        "Deployment",
    )?;
    ensure!(dep["spec"]["replicas"] == 2, "replicas: {}", dep["spec"]);
    let owners = dep["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        owners.len() == 1
            && owners[0]["uid"] == uid
            && owners[0]["kind"] == MOS.1
            && owners[0]["apiVersion"] == MOS.0
            && owners[0]["controller"] == true,
        "owned by the MyOwnShell (controller): {owners:?}"
    );
    let app = json!({"app": shell});
    ensure!(
        dep["spec"]["selector"]["matchLabels"] == app,
        "selector: {}",
        dep["spec"]["selector"]
    );
    ensure!(
        dep["spec"]["template"]["metadata"]["labels"] == app,
        "pod labels: {}",
        dep["spec"]["template"]["metadata"]
    );
    let container = &dep["spec"]["template"]["spec"]["containers"][0];
    ensure!(
        container["name"] == "shell" && container["image"] == "busybox:1.36",
        "container: {container}"
    );
    ensure!(
        container["command"][2]
            .as_str()
            .is_some_and(|c| c.contains("sleep 3600")),
        "command: {}",
        container["command"]
    );
    let labels = &dep["metadata"]["labels"];
    ensure!(
        labels["wasmpilot.io/operator"] == OPERATOR
            && labels["app.kubernetes.io/managed-by"] == "myownshell",
        "labels: {labels}"
    );
    let event = wait_event(client, ns, shell, "PhaseChanged", T).await?;
    ensure!(event.type_.as_deref() == Some("Normal"), "{event:?}");

    // A new spec.size reaches the Deployment (Ready notices the difference → Syncing → Ready).
    merge_patch(client, MOS, ns, shell, json!({"spec": {"size": 3}})).await?;
    wait_replicas(client, ns, shell, 3).await?;
    wait_ready(client, ns, shell, 3)
        .await
        .context("after size 3")?;
    step("size 3: Deployment resized, Ready");

    // Someone scales the Deployment by hand: the operator puts spec.size back.
    merge_patch(client, DEP, ns, shell, json!({"spec": {"replicas": 5}})).await?;
    wait_replicas(client, ns, shell, 3)
        .await
        .context("a hand-scaled Deployment is put back to spec.size")?;
    wait_ready(client, ns, shell, 3).await?;
    step("hand-scaled to 5: back to 3");

    // Someone deletes the Deployment: Ready finds it missing and Syncing creates it again.
    let old_uid = must(
        get(client, DEP.0, DEP.1, Some(ns), shell).await?,
        "Deployment",
    )?["metadata"]["uid"]
        .clone();
    delete(client, DEP.0, DEP.1, Some(ns), shell).await?;
    wait_for("the Deployment re-created", T, || async {
        let dep = get(client, DEP.0, DEP.1, Some(ns), shell).await?;
        Ok(dep
            .filter(|d| d["metadata"]["uid"] != old_uid && d["spec"]["replicas"] == 3)
            .map(|_| ()))
    })
    .await?;
    wait_ready(client, ns, shell, 3).await?;
    step("Deployment deleted: re-created");

    // Delete: the finalizer worker runs and the host removes its finalizer (only its own);
    // once the MyOwnShell is gone, the Deployment is garbage-collected.
    merge_patch(
        client,
        MOS,
        ns,
        shell,
        json!({"metadata": {"finalizers": [HOST_FINALIZER, HOLD_FINALIZER]}}),
    )
    .await?;
    delete(client, MOS.0, MOS.1, Some(ns), shell).await?;
    let event = wait_event(client, ns, shell, "Finalized", T).await?;
    ensure!(event.type_.as_deref() == Some("Normal"), "{event:?}");
    let held = wait_for("the host to release its finalizer", T, || async {
        let Some(o) = get(client, MOS.0, MOS.1, Some(ns), shell).await? else {
            return Ok(None);
        };
        Ok((str_list(&o["metadata"]["finalizers"]) == [HOLD_FINALIZER]).then_some(o))
    })
    .await?;
    ensure!(
        held["status"]["finalizedAt"].as_str().is_some(),
        "status.finalizedAt recorded by the finalizer worker: {}",
        held["status"]
    );
    step("deleted: Finalized, finalizer released");
    merge_patch(
        client,
        MOS,
        ns,
        shell,
        json!({"metadata": {"finalizers": null}}),
    )
    .await?;
    wait_for("the MyOwnShell gone", T, || async {
        Ok(get(client, MOS.0, MOS.1, Some(ns), shell)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    wait_for("the Deployment garbage-collected", GC, || async {
        Ok(get(client, DEP.0, DEP.1, Some(ns), shell)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    step("Deployment garbage-collected");
    Ok(())
}

/// Waits until the MyOwnShell is Ready for its current generation with `size` synced and
/// Ready has run (it reports `readyReplicas`); returns the object.
async fn wait_ready(client: &Client, ns: &str, name: &str, size: i64) -> anyhow::Result<Value> {
    wait_for(
        &format!("MyOwnShell {name} Ready at size {size}"),
        T,
        || async {
            let Some(o) = get(client, MOS.0, MOS.1, Some(ns), name).await? else {
                return Ok(None);
            };
            let s = &o["status"];
            let ok = s["phase"] == "Ready"
                && s["syncedSize"] == size
                && s["readyReplicas"].is_i64()
                && s["observedGeneration"] == o["metadata"]["generation"];
            Ok(ok.then_some(o))
        },
    )
    .await
}

async fn wait_replicas(client: &Client, ns: &str, name: &str, replicas: i64) -> anyhow::Result<()> {
    wait_for(
        &format!("Deployment {name} with {replicas} replicas"),
        T,
        || async {
            let dep = get(client, DEP.0, DEP.1, Some(ns), name).await?;
            Ok(dep
                .filter(|d| d["spec"]["replicas"] == replicas)
                .map(|_| ()))
        },
    )
    .await
}

/// A JSON merge patch (as `kubectl patch --type merge`), which leaves other fields alone.
async fn merge_patch(
    client: &Client,
    (api_version, kind): (&str, &str),
    ns: &str,
    name: &str,
    patch: Value,
) -> anyhow::Result<()> {
    let api = dynamic_api(client, api_version, kind, Some(ns)).await?;
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching {kind} {ns}/{name}"))?;
    Ok(())
}

/// Removes the operator (so later tests' hosts do not reconcile it), then whatever the test
/// left in its namespace, then the namespace.
async fn cleanup(client: &Client, ns: &str) {
    if let Err(e) = delete(client, WOP.0, WOP.1, None, OPERATOR).await {
        eprintln!("deleting WasmOperator {OPERATOR}: {e:#}");
    }
    // Without the operator nobody removes the host's finalizer from leftovers of a failed run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let Ok(api) = dynamic_api(client, MOS.0, MOS.1, Some(ns)).await {
        if let Ok(list) = api.list(&Default::default()).await {
            for o in list.items {
                let name = o.metadata.name.unwrap_or_default();
                let _ = api
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
    }
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    if let Err(e) = namespaces.delete(ns, &Default::default()).await {
        eprintln!("deleting namespace {ns}: {e:#}");
    }
}
