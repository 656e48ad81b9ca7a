//! End to end on a real kube-apiserver (KUBECONFIG; `deploy/local/test.sh` starts the local one):
//! `wasmpilot deploy examples/autoroute`, the host as a process, and the behaviour users rely on —
//! AutoRoute to Ready with exactly the right outputs, input changes, worker errors as Conditions
//! and Events while other resources reconcile, hostile workers contained, finalizers, GC.

mod common;

use anyhow::{ensure, Context};
use common::cluster::*;
use kube::Client;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
const AR: (&str, &str) = ("examples.io/v1", "AutoRoute");
const SC: (&str, &str) = ("test.wasmpilot.io/v1", "Scripted");
const VS: (&str, &str) = ("networking.istio.io/v1alpha3", "VirtualService");
const GW: (&str, &str) = ("networking.istio.io/v1alpha3", "Gateway");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn operators_on_a_real_cluster() {
    let client = client().await;
    let root = common::repo_root();

    // Ship AutoRoute exactly as a user does: the acceptance command, build included (the test
    // command built the components already, so cargo finds them fresh).
    let status = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "examples/autoroute"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy examples/autoroute failed"
    );
    purge_terminating_operators(&client)
        .await
        .expect("no WasmOperator left terminating");
    apply_file(
        &client,
        &root.join("host/tests/manifests/scripted.yaml"),
        None,
    )
    .await
    .expect("scripted operator");
    cleanup_scripted(&client).await; // leftovers of an interrupted earlier run

    let wasm_dir = common::wasm_dir();
    let mut host = Host::start(
        &["--module-dir", wasm_dir.to_str().expect("utf-8 path")],
        "wasmpilot-e2e",
    );
    for op in ["autoroute", "scripted"] {
        wait_condition(
            &client,
            ("wasmpilot.io/v1alpha1", "WasmOperator"),
            None,
            op,
            ("Ready", "True", "ControllerRunning"),
            T,
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    }

    let (a, b, c, e, q) = tokio::join!(
        autoroute(&client),
        scripted(&client),
        broken_operator(&client),
        stale_decisions(&client, &host.log),
        quota_refusal(&client),
    );
    let d = reconfigure_and_remove(&client).await;
    let results = [
        ("autoroute", a),
        ("scripted", b),
        ("broken operator", c),
        ("stale decisions", e),
        ("quota refusal", q),
        ("reconfigure and remove", d),
    ];
    let alive = host.is_alive();
    for (name, r) in &results {
        if let Err(e) = r {
            eprintln!("scenario {name} failed: {e:#}");
        }
    }
    cleanup_scripted(&client).await;
    delete_test_namespaces(&client).await;
    assert!(alive, "the host process died");
    assert!(
        results.iter().all(|(_, r)| r.is_ok()),
        "a scenario failed (see above)"
    );
}

fn deployment(name: &str, labels: Value, port: Option<i32>) -> String {
    let ports = port
        .map(|p| json!([{"containerPort": p}]))
        .unwrap_or(json!([]));
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx", "ports": ports}]}
            }
        }
    })
    .to_string()
}

fn autoroute_yaml(name: &str, selector: Value) -> String {
    json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": name}, "spec": {"deploymentSelector": selector}}).to_string()
}

async fn wait_synced(
    client: &Client,
    ns: &str,
    name: &str,
    want: &[&str],
) -> anyhow::Result<Value> {
    wait_for(
        &format!("AutoRoute {name} Ready with {want:?}"),
        T,
        || async {
            let Some(o) = get(client, AR.0, AR.1, Some(ns), name).await? else {
                return Ok(None);
            };
            let ok = o["status"]["phase"] == "Ready"
                && str_list(&o["status"]["syncedDeployments"]) == want;
            Ok(ok.then_some(o))
        },
    )
    .await
}

async fn autoroute(client: &Client) -> anyhow::Result<()> {
    let ns = create_namespace(client, "e2e-autoroute").await?;
    let ns = ns.as_str();
    let demo = json!({"part-of": "demo"});
    for (name, labels, port) in [
        ("a", demo.clone(), Some(8080)),
        ("b", demo.clone(), Some(9090)),
        ("c", json!({"part-of": "other"}), Some(80)),
        ("d", demo.clone(), None),
    ] {
        apply_yaml(client, &deployment(name, labels, port), Some(ns)).await?;
    }
    apply_yaml(
        client,
        &autoroute_yaml("r1", json!({"matchLabels": {"part-of": "demo"}})),
        Some(ns),
    )
    .await?;
    // Every matching Deployment is recorded, as the seed's deploymentNames; `d` (no port) gets
    // no route.
    let r1 = wait_synced(client, ns, "r1", &["a", "b", "d"])
        .await
        .context("first sync")?;
    let uid = r1["metadata"]["uid"].clone();
    // Done as the tools users already run read it: Ready (a phase marked ready), kstatus
    // Current, Argo CD Healthy, and `kubectl wait --for=condition=Ready` returns.
    ensure!(
        kstatus(&r1) == "Current" && argo_health(&r1) == "Healthy",
        "r1 in Ready: kstatus {}, Argo CD {}: {}",
        kstatus(&r1),
        argo_health(&r1),
        r1["status"]["conditions"]
    );
    let (waited, text) = kubectl_wait("autoroute", "r1", ns, "Ready", Duration::from_secs(60))?;
    ensure!(
        waited,
        "kubectl wait --for=condition=Ready autoroute/r1: {text}"
    );

    // Exactly the seed tutorial's outputs, owned by the AutoRoute.
    for (dep, port) in [("a", 8080), ("b", 9090)] {
        let svc = must(
            get(client, "v1", "Service", Some(ns), dep).await?,
            "Service",
        )?;
        ensure!(
            svc["spec"]["ports"][0]["port"] == port,
            "Service {dep} port: {}",
            svc["spec"]["ports"]
        );
        ensure!(svc["spec"]["ports"][0]["name"] == "http");
        ensure!(
            svc["spec"]["selector"] == json!({"app": dep}),
            "Service {dep} selector {}",
            svc["spec"]["selector"]
        );
        let owner = &svc["metadata"]["ownerReferences"][0];
        ensure!(
            owner["uid"] == uid && owner["controller"] == true,
            "Service {dep} owner {owner}"
        );
        let vs = must(
            get(client, VS.0, VS.1, Some(ns), &format!("{dep}.r1")).await?,
            "VirtualService",
        )?;
        ensure!(
            vs["spec"]["hosts"] == json!([format!("{dep}.r1")])
                && vs["spec"]["gateways"] == json!(["r1"]),
            "VirtualService {dep}: {}",
            vs["spec"]
        );
        ensure!(vs["spec"]["http"][0]["match"][0]["uri"]["prefix"] == "/");
        ensure!(
            vs["spec"]["http"][0]["route"][0]["destination"]
                == json!({"host": dep, "port": {"number": port}}),
            "{}",
            vs["spec"]
        );
    }
    for absent in ["c", "d"] {
        ensure!(
            get(client, "v1", "Service", Some(ns), absent)
                .await?
                .is_none(),
            "Service {absent} must not exist"
        );
    }
    let gw = must(get(client, GW.0, GW.1, Some(ns), "r1").await?, "Gateway")?;
    ensure!(
        gw["spec"]["selector"] == json!({"istio": "ingressgateway"}),
        "{}",
        gw["spec"]
    );
    ensure!(
        gw["spec"]["servers"][0]["hosts"] == json!(["*.r1"])
            && gw["spec"]["servers"][0]["port"]
                == json!({"number": 80, "name": "http", "protocol": "HTTP"}),
        "{}",
        gw["spec"]
    );
    let synced = must(condition(&r1, "Synced").cloned(), "Synced condition")?;
    ensure!(synced["status"] == "True", "{synced}");
    ensure!(r1["status"]["observedGeneration"] == r1["metadata"]["generation"]);
    ensure!(r1["status"]["moduleDigest"]
        .as_str()
        .is_some_and(|d| d.starts_with("sha256:")));

    // An input change: a new matching deployment → Syncing → Ready with it included.
    apply_yaml(client, &deployment("e", demo.clone(), Some(7070)), Some(ns)).await?;
    wait_synced(client, ns, "r1", &["a", "b", "d", "e"])
        .await
        .context("resync after a new deployment")?;
    // It went through Syncing: the Ready worker saw the difference and handed over.
    let events = events_for(client, ns, "r1").await?;
    ensure!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("PhaseChanged")
                && e.action.as_deref() == Some("ReadyToSyncing")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Ready → Syncing"))),
        "no Ready → Syncing event: {:?}",
        events
            .iter()
            .map(|e| (&e.action, &e.message))
            .collect::<Vec<_>>()
    );
    must(
        get(client, "v1", "Service", Some(ns), "e").await?,
        "Service e",
    )?;

    // A deployment goes away → its Service and VirtualService are pruned (r1 still exists, so
    // this is the host's pruning, not garbage collection).
    delete(client, "apps/v1", "Deployment", Some(ns), "b").await?;
    wait_synced(client, ns, "r1", &["a", "d", "e"])
        .await
        .context("resync after a deployment is deleted")?;
    wait_for("Service b and VirtualService b.r1 pruned", T, || async {
        let gone = get(client, "v1", "Service", Some(ns), "b").await?.is_none()
            && get(client, VS.0, VS.1, Some(ns), "b.r1").await?.is_none();
        Ok(gone.then_some(()))
    })
    .await?;
    must(
        get(client, "v1", "Service", Some(ns), "a").await?,
        "Service a kept",
    )?;

    // An invalid selector in one route (the host reads spec.deploymentSelector: `selectorFrom`)
    // lands on that resource only, naming the field; another resource reconciles meanwhile.
    apply_yaml(
        client,
        &autoroute_yaml(
            "r2",
            json!({"matchExpressions": [{"key": "part-of", "operator": "Bogus", "values": ["x"]}]}),
        ),
        Some(ns),
    )
    .await?;
    apply_yaml(
        client,
        &deployment("f", json!({"part-of": "other-app"}), Some(5000)),
        Some(ns),
    )
    .await?;
    apply_yaml(
        client,
        &autoroute_yaml("r3", json!({"matchLabels": {"part-of": "other-app"}})),
        Some(ns),
    )
    .await?;
    let r2 = wait_condition(
        client,
        AR,
        Some(ns),
        "r2",
        ("Synced", "False", "InvalidSelector"),
        T,
    )
    .await?;
    let msg = must(
        condition(&r2, "Synced").and_then(|c| c["message"].as_str()),
        "message",
    )?;
    ensure!(
        msg.contains("Bogus")
            && msg.contains("Syncing")
            && msg.contains("spec.deploymentSelector.matchExpressions[0].operator"),
        "condition message names the field and the problem: {msg}"
    );
    wait_event(client, ns, "r2", "InvalidSelector", T).await?;
    wait_synced(client, ns, "r3", &["f"])
        .await
        .context("r3 reconciles while r2 fails")?;

    // Deleting the AutoRoute garbage-collects its outputs (and only its outputs).
    delete(client, AR.0, AR.1, Some(ns), "r1").await?;
    // Kubernetes' garbage collector deletes them, not the host; it notices a custom kind's
    // owner references only after its periodic discovery, which a loaded 2-core cluster has
    // taken longer than 90 s for (a clean-clone run of this stop).
    wait_for(
        "r1's outputs garbage-collected",
        Duration::from_secs(180),
        || async {
            for dep in ["a", "e"] {
                if get(client, "v1", "Service", Some(ns), dep).await?.is_some()
                    || get(client, VS.0, VS.1, Some(ns), &format!("{dep}.r1"))
                        .await?
                        .is_some()
                {
                    return Ok(None);
                }
            }
            Ok(get(client, GW.0, GW.1, Some(ns), "r1")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    must(
        get(client, "v1", "Service", Some(ns), "f").await?,
        "r3's Service f survives",
    )?;
    Ok(())
}

fn scripted_yaml(name: &str, start: Value, finalize: Value) -> String {
    json!({"apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted", "metadata": {"name": name},
           "spec": {"phases": {"Start": start}, "finalize": finalize}})
    .to_string()
}

async fn scripted(client: &Client) -> anyhow::Result<()> {
    let ns = create_namespace(client, "e2e-scripted").await?;
    let ns = ns.as_str();
    // Hostile workers first, then a good one that must reconcile regardless.
    let hostile = [
        // Start's limits in the WasmOperator (400ms, 24 MiB) override the host's defaults.
        (
            "s-loop",
            json!({"mode": "loop"}),
            "WorkerDeadlineExceeded",
            "exceeded its 400ms deadline",
        ),
        (
            "s-alloc",
            json!({"mode": "alloc"}),
            "WorkerMemoryLimitExceeded",
            "memory limit of 24 MiB",
        ),
        (
            "s-held",
            json!({"mode": "ok", "next": "Held"}),
            "TransitionNotAllowed",
            "may only move to Done",
        ),
        (
            "s-panic",
            json!({"mode": "panic", "message": "boom-123"}),
            "WorkerTrapped",
            "boom-123",
        ),
        (
            "s-badphase",
            json!({"mode": "ok", "next": "Nowhere"}),
            "UnknownNextPhase",
            "Nowhere",
        ),
        (
            "s-badout",
            json!({"mode": "ok", "next": "Done", "outputs": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fine"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "escape", "namespace": "kube-system"}}]}),
            "OutputRefused",
            "kube-system",
        ),
        // Start's logLines (20) and maxOutputKib (64) overrides.
        (
            "s-chatty",
            json!({"mode": "chatty", "count": 50, "next": "Done"}),
            "WorkerLogLimitExceeded",
            "20 log lines",
        ),
        (
            "s-bloat",
            json!({"mode": "bloat", "count": 100_000, "next": "Done"}),
            "OutputLimitExceeded",
            "more than the limit of 65536",
        ),
        // Start's maxOutputs override (3).
        (
            "s-many",
            json!({"mode": "ok", "next": "Done", "outputs": (0..4).map(|i| json!(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("many-{i}")}})).collect::<Vec<_>>()}),
            "OutputLimitExceeded",
            "more than the limit of 3",
        ),
        // Output policy: only declared kinds; ownerReferences are the host's to set.
        (
            "s-secret",
            json!({"mode": "ok", "next": "Done", "outputs": [
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "loot"}}]}),
            "OutputRefused",
            "Secret is not a declared output",
        ),
        (
            "s-owner",
            json!({"mode": "ok", "next": "Done", "outputs": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "adopted",
                 "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "kube-system", "uid": "x", "controller": true}]}}]}),
            "OutputRefused",
            "sets ownerReferences",
        ),
        // A finalizer nothing would remove (the resource's deletion, and its namespace's, would
        // hang).
        (
            "s-hold",
            json!({"mode": "ok", "next": "Done", "outputs": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held",
                 "finalizers": ["example.org/hold"]}}]}),
            "OutputRefused",
            "sets finalizers example.org/hold",
        ),
        // An object the host did not create is never taken over (nor, later, pruned).
        (
            "s-takeover",
            json!({"mode": "ok", "next": "Done", "outputs": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "users-own"}, "data": {"k": "worker"}}]}),
            "OutputRefused",
            "users-own already exists and has no controller",
        ),
    ];
    apply_yaml(
        client,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"users-own"},"data":{"k":"user"}}"#,
        Some(ns),
    )
    .await?;
    // The takeover check reads the host's ConfigMap cache: let its watch see the object first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (name, start, _, _) in &hostile {
        apply_yaml(
            client,
            &scripted_yaml(name, start.clone(), json!({"mode": "done"})),
            Some(ns),
        )
        .await?;
    }
    // As a worker's modified copy of an object it read: what the API server set (a uid that
    // would fail the apply, a resourceVersion that would fail the next) and Kubernetes' own
    // finalizers are dropped.
    let good_cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good-out",
        "uid": "0000-1111", "resourceVersion": "1", "finalizers": ["kubernetes.io/pvc-protection"]},
        "data": {"k": "v"}});
    apply_yaml(
        client,
        &scripted_yaml(
            "s-good",
            json!({"mode": "ok", "next": "Done", "outputs": [good_cm], "countInputs": true}),
            json!({"mode": "done"}),
        ),
        Some(ns),
    )
    .await?;

    for (name, _, reason, text) in &hostile {
        let o = wait_condition(client, SC, Some(ns), name, ("Synced", "False", reason), T).await?;
        // kstatus and Argo CD never read a failing resource as done: a refused output stalls
        // it (Failed, Degraded); a missed deadline is retried (InProgress, Progressing).
        let expected = match *reason {
            "OutputRefused" => Some(("Failed", "Degraded")),
            "WorkerDeadlineExceeded" => Some(("InProgress", "Progressing")),
            _ => None,
        };
        ensure!(
            kstatus(&o) != "Current" && argo_health(&o) != "Healthy",
            "{name} ({reason}) read as done: {}",
            o["status"]["conditions"]
        );
        if let Some((k, a)) = expected {
            ensure!(
                (kstatus(&o), argo_health(&o)) == (k, a),
                "{name} ({reason}): kstatus {}, Argo CD {}, expected {k}, {a}: {}",
                kstatus(&o),
                argo_health(&o),
                o["status"]["conditions"]
            );
        }
        let msg = must(
            condition(&o, "Synced").and_then(|c| c["message"].as_str()),
            "message",
        )?;
        ensure!(
            msg.contains(text),
            "{name}: message {msg:?} should mention {text:?}"
        );
        wait_event(client, ns, name, reason, T).await?;
    }
    // All or nothing: the refused result wrote neither of its two ConfigMaps.
    ensure!(
        get(client, "v1", "ConfigMap", Some("kube-system"), "escape")
            .await?
            .is_none(),
        "escaped into kube-system"
    );
    ensure!(
        get(client, "v1", "ConfigMap", Some(ns), "fine")
            .await?
            .is_none(),
        "partial apply of a refused result"
    );
    for (kind, name) in [
        ("ConfigMap", "many-0"),
        ("Secret", "loot"),
        ("ConfigMap", "adopted"),
        ("ConfigMap", "held"),
    ] {
        ensure!(
            get(client, "v1", kind, Some(ns), name).await?.is_none(),
            "a refused result wrote {kind} {name}"
        );
    }
    let users = must(
        get(client, "v1", "ConfigMap", Some(ns), "users-own").await?,
        "the user's ConfigMap",
    )?;
    ensure!(
        users["data"]["k"] == "user"
            && users["metadata"]["ownerReferences"].is_null()
            && users["metadata"]["labels"].is_null(),
        "the user's ConfigMap was taken over: {users}"
    );

    let good = wait_for("s-good Done", T, || async {
        let o = get(client, SC.0, SC.1, Some(ns), "s-good").await?;
        Ok(o.filter(|o| o["status"]["phase"] == "Done"))
    })
    .await?;
    ensure!(
        str_list(&good["metadata"]["finalizers"]) == ["wasmpilot.io/scripted"],
        "finalizer added: {}",
        good["metadata"]
    );
    ensure!(
        good["status"]["inputCounts"]["configmaps"] == 0,
        "inputs scoped by labels: {}",
        good["status"]
    );
    ensure!(
        (kstatus(&good), argo_health(&good)) == ("Current", "Healthy"),
        "s-good in its final phase: {}",
        good["status"]["conditions"]
    );
    let cm = must(
        get(client, "v1", "ConfigMap", Some(ns), "good-out").await?,
        "output ConfigMap",
    )?;
    ensure!(cm["metadata"]["labels"]["wasmpilot.io/operator"] == "scripted");
    ensure!(
        cm["metadata"]["finalizers"].is_null() && cm["metadata"]["uid"] != "0000-1111",
        "server-set metadata and Kubernetes' finalizers applied: {}",
        cm["metadata"]
    );

    // A labelled input appears → counted on the next run (after a spec change restarts the final phase).
    apply_yaml(client, r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"in-1","labels":{"scripted-input":"yes"}}}"#, Some(ns)).await?;
    // Looks like an output (same labels) but the host did not create it for s-good: never pruned.
    apply_yaml(client, r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bystander","labels":{"wasmpilot.io/operator":"scripted","wasmpilot.io/phase":"Start"}}}"#, Some(ns)).await?;
    // Round 2 returns a different ConfigMap: the one from round 1 is pruned.
    let round2_cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good-out-2"}});
    let patch = scripted_yaml(
        "s-good",
        json!({"mode": "ok", "next": "Done", "outputs": [round2_cm], "countInputs": true, "statusInfo": {"round": 2}}),
        json!({"mode": "done"}),
    );
    apply_yaml(client, &patch, Some(ns)).await?;
    wait_for(
        "s-good restarted from its final phase and Done again",
        T,
        || async {
            let Some(o) = get(client, SC.0, SC.1, Some(ns), "s-good").await? else {
                return Ok(None);
            };
            let ok = o["status"]["phase"] == "Done"
                && o["status"]["round"] == 2
                && o["status"]["observedGeneration"] == o["metadata"]["generation"]
                && o["status"]["inputCounts"]["configmaps"] == 1;
            Ok(ok.then_some(()))
        },
    )
    .await?;

    wait_for("round 1's output pruned", T, || async {
        Ok(get(client, "v1", "ConfigMap", Some(ns), "good-out")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    must(
        get(client, "v1", "ConfigMap", Some(ns), "good-out-2").await?,
        "round 2's output",
    )?;
    must(
        get(client, "v1", "ConfigMap", Some(ns), "bystander").await?,
        "an object the host did not create survives pruning",
    )?;

    // Delete → the finalizer worker runs, then the host releases the object; outputs are collected.
    delete(client, SC.0, SC.1, Some(ns), "s-good").await?;
    wait_for("s-good deleted after its finalizer", T, || async {
        Ok(get(client, SC.0, SC.1, Some(ns), "s-good")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    wait_event(client, ns, "s-good", "Finalized", T).await?;
    wait_for(
        "s-good's output collected",
        Duration::from_secs(90),
        || async {
            Ok(get(client, "v1", "ConfigMap", Some(ns), "good-out-2")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// A namespace's ResourceQuota refuses an output: the resource stalls (kstatus `Stalled`),
/// quoting the quota as the API server said it (not kube's debug output of its answer), and
/// is not retried in a tight loop.
async fn quota_refusal(client: &Client) -> anyhow::Result<()> {
    let ns = create_namespace(client, "e2e-quota").await?;
    let ns = ns.as_str();
    // The quota admits what the namespace holds already (its kube-root-ca.crt), nothing more.
    wait_for("the namespace's root CA ConfigMap", T, || async {
        Ok(get(client, "v1", "ConfigMap", Some(ns), "kube-root-ca.crt")
            .await?
            .map(|_| ()))
    })
    .await?;
    apply_yaml(
        client,
        r#"{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"one"},"spec":{"hard":{"configmaps":"1"}}}"#,
        Some(ns),
    )
    .await?;
    wait_for("the quota's usage counted", T, || async {
        Ok(get(client, "v1", "ResourceQuota", Some(ns), "one")
            .await?
            .filter(|q| q["status"]["used"]["configmaps"] == "1")
            .map(|_| ()))
    })
    .await?;
    let out = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "over-quota"}});
    apply_yaml(
        client,
        &scripted_yaml(
            "s-quota",
            json!({"mode": "ok", "next": "Done", "outputs": [out]}),
            json!({"mode": "done"}),
        ),
        Some(ns),
    )
    .await?;
    let o = wait_condition(
        client,
        SC,
        Some(ns),
        "s-quota",
        ("Stalled", "True", "ApplyFailed"),
        T,
    )
    .await?;
    let message = condition(&o, "Stalled")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default();
    ensure!(
        message.contains("exceeded quota: one")
            && message.contains("(Forbidden, HTTP 403)")
            && message.contains("tried again after a change or at the resync")
            && !message.contains("Status {"),
        "the quota's refusal, said once and briefly: {message}"
    );
    ensure!(
        get(client, "v1", "ConfigMap", Some(ns), "over-quota")
            .await?
            .is_none(),
        "the output was created past the quota"
    );
    Ok(())
}

async fn broken_operator(client: &Client) -> anyhow::Result<()> {
    let ops = ("wasmpilot.io/v1alpha1", "WasmOperator");
    let scripted = json!({"apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted"});
    let file = json!({"file": {"path": "wasmpilot_test_scripted.wasm"}});
    let start = |module: Value| json!({"name": "Start", "initial": true, "module": module});
    let zeros = "0".repeat(64);
    // Module ConfigMaps: garbage whose digest matches (corrupt), and the real component under a
    // wrong digest (tampered).
    let component = common::component("wasmpilot_test_scripted.wasm");
    let garbage = b"definitely not a wasm component".to_vec();
    store_module(client, "corrupt-module", &garbage).await?;
    store_module(client, "tampered-module", &component).await?;
    let cm = |name: &str, sha: &str| json!({"configMap": {"name": name, "namespace": "wasmpilot-system", "key": "component.wasm.gz", "sha256": sha}});

    // A name past a label value's 63 characters: every output carries it as a label.
    let long_name = format!("bad-long-name-{}", "n".repeat(50));
    let cases: Vec<(&str, Value, &str, Vec<&str>)> = vec![
        (
            &long_name,
            json!({"resource": scripted, "phases": [start(file.clone())]}),
            "InvalidDefinition",
            vec!["metadata.name", "is 64 characters", "at most 63"],
        ),
        (
            "bad-missing",
            json!({"resource": scripted, "phases": [start(cm("does-not-exist", &zeros))]}),
            "ModuleFetchFailed",
            vec!["does-not-exist", "phase Start"],
        ),
        (
            "bad-noinitial",
            json!({"resource": scripted, "phases": [{"name": "A", "module": file}]}),
            "InvalidDefinition",
            vec!["spec.phases", "no phase is marked initial"],
        ),
        (
            "bad-twoinitial",
            json!({"resource": scripted, "phases": [start(file.clone()), {"name": "B", "initial": true, "module": file}]}),
            "InvalidDefinition",
            vec!["2 phases are marked initial"],
        ),
        (
            "bad-duplicate",
            json!({"resource": scripted, "phases": [start(file.clone()), {"name": "Start", "module": file}]}),
            "InvalidDefinition",
            vec!["spec.phases[1].name", "duplicate"],
        ),
        (
            "bad-builtin",
            json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment"}, "phases": [start(file.clone())]}),
            "InvalidDefinition",
            vec!["spec.resource", "one of Kubernetes' own kinds"],
        ),
        (
            "bad-kind",
            json!({"resource": {"apiVersion": "test.wasmpilot.io/v1", "kind": "Nope"}, "phases": [start(file.clone())]}),
            "KindNotServed",
            vec!["spec.resource", "Nope"],
        ),
        (
            "bad-input",
            json!({"resource": scripted, "phases": [{"name": "Start", "initial": true, "module": file, "inputs": [{"name": "x", "apiVersion": "nowhere.io/v1", "kind": "Ghost"}]}]}),
            "KindNotServed",
            vec!["spec.phases[0].inputs[0]", "Ghost"],
        ),
        (
            "bad-corrupt",
            json!({"resource": scripted, "phases": [start(cm("corrupt-module", &sha256_hex(&garbage)))]}),
            "ModuleCompileFailed",
            vec!["not a valid Wasm component"],
        ),
        (
            "bad-tampered",
            json!({"resource": {"apiVersion": "test.wasmpilot.io/v1", "kind": "Probe"}, "phases": [start(cm("tampered-module", &zeros)), {"name": "Done", "final": true}]}),
            "ModuleDigestMismatch",
            vec!["sha256 mismatch", &zeros],
        ),
    ];
    for (name, spec, _, _) in &cases {
        let op =
            json!({"apiVersion": ops.0, "kind": ops.1, "metadata": {"name": name}, "spec": spec});
        if *name == long_name {
            // No grants: labelled with the name, they cannot be applied (`wasmpilot rbac`
            // refuses it), and the host refuses the definition before it looks at any.
            apply_yaml_ungranted(client, &op.to_string(), None).await?;
        } else {
            apply_yaml(client, &op.to_string(), None).await?;
        }
    }
    for (name, _, reason, words) in &cases {
        let o = wait_condition(client, ops, None, name, ("Ready", "False", reason), T).await?;
        let msg = must(
            condition(&o, "Ready").and_then(|c| c["message"].as_str()),
            "message",
        )?;
        for w in words {
            ensure!(msg.contains(w), "{name}: message {msg:?} should name {w:?}");
        }
        // As the tools users run read the WasmOperator: a definition that waits for an edit
        // has failed; a failure the host retries (a kind served later, a module replaced) is
        // in progress.
        let expected = if *reason == "InvalidDefinition" {
            ("Failed", "Degraded")
        } else {
            ("InProgress", "Progressing")
        };
        ensure!(
            (kstatus(&o), argo_health(&o)) == expected,
            "{name} ({reason}): kstatus {}, Argo CD {}, expected {expected:?}: {}",
            kstatus(&o),
            argo_health(&o),
            o["status"]
        );
    }
    // Validated by the CRD schema: the API server refuses an invalid duration outright.
    let bad_duration = json!({"apiVersion": ops.0, "kind": ops.1, "metadata": {"name": "bad-duration"},
        "spec": {"resource": scripted, "resyncInterval": "soon", "phases": [start(file.clone())]}});
    let refused = apply_yaml(client, &bad_duration.to_string(), None).await;
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("resyncInterval")),
        "invalid duration accepted: {refused:?}"
    );
    // The host's limits are in the schema too: past one, `kubectl apply` is refused, naming
    // the field, before any host sees the definition.
    let many_phases: Vec<Value> = std::iter::once(start(file.clone()))
        .chain(
            (1..=wasmpilot::crd::MAX_PHASES)
                .map(|i| json!({"name": format!("P{i}"), "final": true})),
        )
        .collect();
    let wide_outputs: Vec<Value> = (0..=wasmpilot::crd::MAX_PER_PHASE)
        .map(|i| json!({"apiVersion": "v1", "kind": format!("Kind{i}")}))
        .collect();
    let mut wide = start(file.clone());
    wide["outputs"] = json!(wide_outputs);
    let long_input = json!({"name": "x".repeat(254), "apiVersion": "v1", "kind": "ConfigMap"});
    let mut long = start(file.clone());
    long["inputs"] = json!([long_input]);
    // (Kubernetes 1.20 says `spec.phases.outputs in body should have at most 32 items`, later
    // versions `spec.phases[0].outputs: Too many: 33: must have at most 32 items`.)
    for (name, phases, field, limit) in [
        (
            "bad-many-phases",
            json!(many_phases),
            "spec.phases",
            "at most 100",
        ),
        ("bad-wide-outputs", json!([wide]), "outputs", "at most 32"),
        ("bad-long-input", json!([long]), "inputs", "at most 253"),
    ] {
        let op = json!({"apiVersion": ops.0, "kind": ops.1, "metadata": {"name": name},
            "spec": {"resource": scripted, "phases": phases}});
        let refused = apply_yaml(client, &op.to_string(), None).await;
        let said = refused.as_ref().err().map(|e| format!("{e:#}"));
        ensure!(
            said.as_deref()
                .is_some_and(|e| e.contains(field) && e.contains(limit)),
            "{name}: a definition past the host's limits was accepted, or refused without naming {field} ({limit}): {said:?}"
        );
        ensure!(
            get(client, ops.0, ops.1, None, name).await?.is_none(),
            "{name} was stored"
        );
    }

    // Fixing the object recovers without a restart: pin the right digest.
    let fixed = json!({"spec": {"phases": [start(cm("tampered-module", &sha256_hex(&component))), {"name": "Done", "final": true}]}});
    let api = dynamic_api(client, ops.0, ops.1, None).await?;
    api.patch(
        "bad-tampered",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&fixed),
    )
    .await?;
    wait_condition(
        client,
        ops,
        None,
        "bad-tampered",
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await
    .context("recovery after fixing the digest")?;
    let ns = create_namespace(client, "e2e-probe").await?;
    let probe = json!({"apiVersion": "test.wasmpilot.io/v1", "kind": "Probe", "metadata": {"name": "p"},
                       "spec": {"phases": {"Start": {"mode": "ok", "next": "Done"}}}});
    apply_yaml(client, &probe.to_string(), Some(&ns)).await?;
    wait_for("the recovered operator reconciles", T, || async {
        Ok(get(client, "test.wasmpilot.io/v1", "Probe", Some(&ns), "p")
            .await?
            .filter(|o| o["status"]["phase"] == "Done")
            .map(|_| ()))
    })
    .await?;
    // A bad edit of a running operator fails (the running definition keeps running); putting
    // the running definition back reports Ready for that generation, not the stale failure.
    let running = fixed.clone();
    let broken = json!({"spec": {"phases": [start(cm("tampered-module", &zeros)), {"name": "Done", "final": true}]}});
    let patch = |body: Value| {
        let api = api.clone();
        async move {
            api.patch(
                "bad-tampered",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&body),
            )
            .await
        }
    };
    patch(broken).await?;
    wait_condition(
        client,
        ops,
        None,
        "bad-tampered",
        ("Ready", "False", "ModuleDigestMismatch"),
        T,
    )
    .await
    .context("a wrong digest on a running operator")?;
    let reverted = patch(running).await?;
    let generation = reverted.metadata.generation;
    let restored = wait_for("Ready again for the reverted generation", T, || async {
        let Some(o) = get(client, ops.0, ops.1, None, "bad-tampered").await? else {
            return Ok(None);
        };
        let ready = condition(&o, "Ready").is_some_and(|c| c["status"] == "True");
        Ok((ready && o["status"]["observedGeneration"] == json!(generation)).then_some(o))
    })
    .await?;
    let message = condition(&restored, "Ready").map(|c| c["message"].clone());
    ensure!(
        !format!("{message:?}").contains("mismatch"),
        "the stale failure lingers: {message:?}"
    );
    for (name, _, _, _) in &cases {
        delete(client, ops.0, ops.1, None, name).await?;
    }
    Ok(())
}

/// A decision made from a cached resource that changed while the worker ran is not applied:
/// the worker sleeps 3 s deciding to output ConfigMap `first`; meanwhile the spec changes to
/// output `second`. `first` must never exist (a watch sees every ConfigMap of the namespace),
/// `second` must, and the host log shows the stale decision was caught (the premise).
async fn stale_decisions(client: &Client, host_log: &std::path::Path) -> anyhow::Result<()> {
    use futures::StreamExt;
    let ops = ("wasmpilot.io/v1alpha1", "WasmOperator");
    let lag = ("test.wasmpilot.io/v1", "Lag");
    let op = json!({"apiVersion": ops.0, "kind": ops.1, "metadata": {"name": "lag"}, "spec": {
    "resource": {"apiVersion": lag.0, "kind": lag.1},
    "phases": [
        {"name": "Start", "initial": true, "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
         "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}], "limits": {"deadline": "10s"}},
        {"name": "Done", "final": true}
    ]}});
    apply_yaml(client, &op.to_string(), None).await?;
    wait_condition(
        client,
        ops,
        None,
        "lag",
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;
    let ns = create_namespace(client, "e2e-stale").await?;
    let ns = ns.as_str();

    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), ns);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let watching = {
        let seen = seen.clone();
        let stream = kube::runtime::watcher(configmaps, Default::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(
                    kube::runtime::watcher::Event::Apply(cm)
                    | kube::runtime::watcher::Event::InitApply(cm),
                ) = event
                {
                    if let (Some(name), Ok(mut seen)) = (cm.metadata.name, seen.lock()) {
                        seen.insert(name);
                    }
                }
            }
        })
    };
    let step = |mode: &str, sleep: u64, output: &str| {
        json!({"mode": mode, "count": sleep, "next": "Done", "outputs": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": output}}]})
    };
    let resource = |start: Value| {
        json!({"apiVersion": lag.0, "kind": lag.1, "metadata": {"name": "l"},
               "spec": {"phases": {"Start": start}}})
        .to_string()
    };
    apply_yaml(client, &resource(step("sleep", 3000, "first")), Some(ns)).await?;
    let marker = format!("resource={ns}/l");
    wait_for("the sleeping worker to start", T, || async {
        let log = std::fs::read_to_string(host_log).unwrap_or_default();
        Ok(log
            .lines()
            .any(|l| l.contains(&marker) && l.contains("scripted step"))
            .then_some(()))
    })
    .await?;
    apply_yaml(client, &resource(step("ok", 0, "second")), Some(ns)).await?;
    wait_for("the Lag Done with ConfigMap second", T, || async {
        let done = get(client, lag.0, lag.1, Some(ns), "l")
            .await?
            .is_some_and(|o| o["status"]["phase"] == "Done");
        let second = get(client, "v1", "ConfigMap", Some(ns), "second")
            .await?
            .is_some();
        Ok((done && second).then_some(()))
    })
    .await?;
    // Give the watch a moment to deliver anything still on its way.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching.abort();
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    ensure!(
        !seen.contains("first"),
        "the stale decision's ConfigMap was applied: {seen:?}"
    );
    let log = std::fs::read_to_string(host_log).unwrap_or_default();
    ensure!(
        log.lines().any(|l| l.contains(&marker)
            && l.contains("the resource changed after the decision was made")),
        "the host never caught a stale decision for {marker} (the test's premise)"
    );
    delete(client, ops.0, ops.1, None, "lag").await?;
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    wasmpilot::modules::digest_of(bytes)
        .trim_start_matches("sha256:")
        .to_string()
}

/// Stores bytes as a gzip module ConfigMap in wasmpilot-system, like `wasmpilot deploy`.
async fn store_module(client: &Client, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes)?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "wasmpilot-system"},
                    "binaryData": {"component.wasm.gz": k8s_openapi::ByteString(gz.finish()?)}});
    apply_yaml(client, &cm.to_string(), None).await
}

/// Changing a WasmOperator swaps its controller without a restart; deleting it stops it.
async fn reconfigure_and_remove(client: &Client) -> anyhow::Result<()> {
    let ns = create_namespace(client, "e2e-swap").await?;
    let ns = ns.as_str();
    let ops = ("wasmpilot.io/v1alpha1", "WasmOperator");
    // Another resync interval, and another component for Start: AutoRoute's Initializing worker,
    // which refuses a Scripted resource (no deploymentSelector): the error names its digest.
    let op = must(
        get(client, ops.0, ops.1, None, "scripted").await?,
        "scripted",
    )?;
    let original_phases = op["spec"]["phases"].clone();
    let mut phases = original_phases.clone();
    phases[0]["module"] = json!({"file": {"path": "autoroute_initializing.wasm"}});
    let new_digest =
        wasmpilot::modules::digest_of(&common::component("autoroute_initializing.wasm"));
    let patch = json!({"spec": {"resyncInterval": "2m", "phases": phases}});
    // A merge patch through apply would drop other fields; use a JSON merge patch instead.
    let api = dynamic_api(client, ops.0, ops.1, None).await?;
    api.patch(
        "scripted",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    wait_for("scripted controller swapped", T, || async {
        let Some(o) = get(client, ops.0, ops.1, None, "scripted").await? else {
            return Ok(None);
        };
        let ok = condition(&o, "Ready").is_some_and(|c| {
            c["status"] == "True" && c["message"].as_str().is_some_and(|m| m.contains("swapped"))
        }) && o["status"]["observedGeneration"] == o["metadata"]["generation"]
            && o["status"]["modules"]["Start"] == json!(new_digest);
        Ok(ok.then_some(()))
    })
    .await?;
    apply_yaml(
        client,
        &scripted_yaml(
            "after-swap",
            json!({"mode": "ok", "next": "Done"}),
            json!({"mode": "done"}),
        ),
        Some(ns),
    )
    .await?;
    let o = wait_condition(
        client,
        SC,
        Some(ns),
        "after-swap",
        ("Synced", "False", "WorkerFatalError"),
        T,
    )
    .await
    .context("the swapped-in component runs")?;
    let msg = condition(&o, "Synced")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default();
    ensure!(
        msg.contains(&new_digest),
        "run by the new component ({new_digest}): {msg}"
    );

    // Swap back: the next reconcile runs the scripted worker again.
    api.patch(
        "scripted",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&json!({"spec": {"phases": original_phases}})),
    )
    .await?;
    wait_for(
        "a resource reconciled by the swapped-back controller",
        T,
        || async {
            Ok(get(client, SC.0, SC.1, Some(ns), "after-swap")
                .await?
                .filter(|o| o["status"]["phase"] == "Done")
                .map(|_| ()))
        },
    )
    .await?;

    delete(client, ops.0, ops.1, None, "scripted").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    apply_yaml(
        client,
        &scripted_yaml(
            "after-delete",
            json!({"mode": "ok", "next": "Done"}),
            json!({"mode": "done"}),
        ),
        Some(ns),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let o = must(
        get(client, SC.0, SC.1, Some(ns), "after-delete").await?,
        "after-delete",
    )?;
    ensure!(
        o["status"].is_null() && o["metadata"]["finalizers"].is_null(),
        "a deleted operator still reconciled: {o}"
    );
    // Leave no finalizer behind on the earlier object: its operator is gone.
    let api = dynamic_api(client, SC.0, SC.1, Some(ns)).await?;
    api.patch(
        "after-swap",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}

/// Test objects of the Scripted kind carry finalizers and hostile scripts; remove them all so a
/// later run's host does not inherit them.
async fn cleanup_scripted(client: &Client) {
    let Ok(api) = dynamic_api(client, SC.0, SC.1, None).await else {
        return;
    };
    let Ok(list) = api.list(&Default::default()).await else {
        return;
    };
    for o in list.items {
        let (Some(ns), Some(name)) = (o.metadata.namespace.clone(), o.metadata.name.clone()) else {
            continue;
        };
        let Ok(napi) = dynamic_api(client, SC.0, SC.1, Some(&ns)).await else {
            continue;
        };
        let _ = napi
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = napi.delete(&name, &Default::default()).await;
    }
}

/// Deletes the namespaces this suite created (their names start with `e2e-`).
async fn delete_test_namespaces(client: &Client) {
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let Ok(list) = api.list(&Default::default()).await else {
        return;
    };
    for ns in list.items {
        let name = ns.metadata.name.unwrap_or_default();
        if name.starts_with("e2e-") {
            let _ = api.delete(&name, &Default::default()).await;
        }
    }
}
