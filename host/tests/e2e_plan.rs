//! `wasmpilot plan` on a real kube-apiserver (KUBECONFIG), with no host running: the AutoRoute
//! operator shipped by `wasmpilot deploy --no-build examples/autoroute` (modules in ConfigMaps),
//! a live AutoRoute in phase Syncing, a Service someone else created with another selector and a
//! stale VirtualService the Syncing phase applied earlier. The plan must show the field-level
//! diff the host would cause, the pruning and the next phase — and write nothing. Without
//! `--operator`, plan finds the operator by the resource's kind.

mod common;

use common::cluster::*;
use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};
use std::process::Command;

const AR: (&str, &str) = ("examples.io/v1", "AutoRoute");
const VS: (&str, &str) = ("networking.istio.io/v1alpha3", "VirtualService");

fn plan(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .arg("plan")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running wasmpilot plan");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn resource_version(o: &Option<Value>) -> Option<String> {
    o.as_ref()
        .and_then(|o| o["metadata"]["resourceVersion"].as_str())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn plan_shows_the_diff_and_writes_nothing() {
    let client = client().await;
    let root = common::repo_root();
    let status = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build", "examples/autoroute"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy --no-build examples/autoroute failed"
    );

    let ns = create_namespace(&client, "e2e-plan")
        .await
        .expect("namespace");
    let result = scenario(&client, &ns).await;
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let demo = json!({"app.kubernetes.io/part-of": "autoroute-demo"});
    for (name, port) in [("frontend", 8080), ("backend", 9090)] {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": demo},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "main", "image": "nginx", "ports": [{"containerPort": port}]}]}
                }
            }
        });
        apply_yaml(client, &deployment.to_string(), Some(ns)).await?;
    }
    let route = json!({
        "apiVersion": AR.0, "kind": AR.1, "metadata": {"name": "example"},
        "spec": {"deploymentSelector": {"matchLabels": demo}},
    });
    apply_yaml(client, &route.to_string(), Some(ns)).await?;
    // As if Initializing had run: the next reconcile is Syncing's.
    let routes = dynamic_api(client, AR.0, AR.1, Some(ns)).await?;
    routes
        .patch_status(
            "example",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "Syncing"}})),
        )
        .await?;
    let uid = must(
        get(client, AR.0, AR.1, Some(ns), "example").await?,
        "the AutoRoute",
    )?["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The route's own Service, drifted: someone changed its selector and dropped its labels.
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "frontend",
            "ownerReferences": [{"apiVersion": AR.0, "kind": AR.1, "name": "example", "uid": uid, "controller": true}],
        },
        "spec": {"selector": {"app": "old"}, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
    });
    apply_yaml(client, &service.to_string(), Some(ns)).await?;
    // … and someone changed its port by hand (`kubectl patch --type=json`): that port entry now
    // belongs to their field manager, and server-side apply alone is refused (two ports `http`).
    let edit: json_patch::Patch = serde_json::from_value(
        json!([{"op": "replace", "path": "/spec/ports/0/port", "value": 9999}]),
    )?;
    dynamic_api(client, "v1", "Service", Some(ns))
        .await?
        .patch(
            "frontend",
            &PatchParams {
                field_manager: Some("kubectl-patch".into()),
                ..Default::default()
            },
            &Patch::<()>::Json(edit),
        )
        .await?;
    // What Syncing applied for a Deployment that is gone: pruned by the host.
    let stale = json!({
        "apiVersion": VS.0, "kind": VS.1,
        "metadata": {
            "name": "retired.example",
            "labels": {"wasmpilot.io/operator": "autoroute", "wasmpilot.io/phase": "Syncing"},
            "ownerReferences": [{"apiVersion": AR.0, "kind": AR.1, "name": "example", "uid": uid, "controller": true}],
        },
        "spec": {"hosts": ["retired.example"]},
    });
    apply_yaml(client, &stale.to_string(), Some(ns)).await?;

    let before = (
        get(client, AR.0, AR.1, Some(ns), "example").await?,
        get(client, "v1", "Service", Some(ns), "frontend").await?,
        get(client, VS.0, VS.1, Some(ns), "retired.example").await?,
    );

    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = plan(&[
        "autoroute/example",
        "-n",
        ns,
        "--operator",
        "autoroute",
        "--now",
        "2026-11-21T12:00:00Z",
    ]);
    eprintln!("plan took {:?}:\n{stdout}", started.elapsed());
    anyhow::ensure!(ok, "wasmpilot plan failed:\n{stderr}\n{stdout}");
    for expected in [
        format!("plan for AutoRoute {ns}/example (operator autoroute)"),
        "phase Syncing → Ready, decided by sha256:".to_string(),
        "from inputs deployments (2)".to_string(),
        format!("\n+ create Gateway {ns}/example\n"),
        "    + spec.selector.istio: \"ingressgateway\"\n".to_string(),
        format!("\n+ create Service {ns}/backend\n"),
        format!("\n+ create VirtualService {ns}/frontend.example\n"),
        "    + spec.http[0].route[0].destination.port.number: 8080\n".to_string(),
        format!("\n~ replace spec.ports of Service {ns}/frontend: field manager(s) kubectl-patch hold entries there that the worker does not return (server-side apply alone is refused: "),
        "the host replaces the list(s) with the worker's, then applies (OutputReplaced)".to_string(),
        format!("\n~ update Service {ns}/frontend\n"),
        "    ~ spec.ports[0].port: 9999 → 8080\n".to_string(),
        "    ~ spec.selector.app: \"old\" → \"frontend\"\n".to_string(),
        "    + metadata.labels[\"wasmpilot.io/phase\"]: \"Syncing\"\n".to_string(),
        format!(
            "\n- delete VirtualService {ns}/retired.example (phase Syncing no longer returns it)\n"
        ),
        format!("\n~ status of AutoRoute {ns}/example\n"),
        "    ~ phase: \"Syncing\" → \"Ready\"\n".to_string(),
        "    + syncedDeployments[0]: \"backend\"\n".to_string(),
        "    + conditions[0].lastTransitionTime: \"2026-11-21T12:00:00Z\"\n".to_string(),
        "4 to create, 1 to update, 0 unchanged, 1 to delete".to_string(),
        "Nothing was written (server-side dry run).".to_string(),
    ] {
        anyhow::ensure!(stdout.contains(&expected), "plan output lacks {expected:?}");
    }
    anyhow::ensure!(
        !stdout.contains("managedFields") && !stdout.contains("resourceVersion"),
        "bookkeeping fields are not part of the diff"
    );

    // Nothing was written: same objects, same resourceVersions, no new outputs.
    let after = (
        get(client, AR.0, AR.1, Some(ns), "example").await?,
        get(client, "v1", "Service", Some(ns), "frontend").await?,
        get(client, VS.0, VS.1, Some(ns), "retired.example").await?,
    );
    anyhow::ensure!(
        resource_version(&before.0) == resource_version(&after.0),
        "the AutoRoute changed"
    );
    anyhow::ensure!(
        resource_version(&before.1) == resource_version(&after.1),
        "the Service frontend changed"
    );
    anyhow::ensure!(after.2.is_some(), "the stale VirtualService was deleted");
    anyhow::ensure!(
        resource_version(&before.2) == resource_version(&after.2),
        "the stale VirtualService changed"
    );
    for (kind, name) in [
        (("networking.istio.io/v1alpha3", "Gateway"), "example"),
        (("v1", "Service"), "backend"),
        (VS, "frontend.example"),
    ] {
        anyhow::ensure!(
            get(client, kind.0, kind.1, Some(ns), name).await?.is_none(),
            "{} {name} was created",
            kind.1
        );
    }
    let svc = must(after.1, "Service frontend")?;
    anyhow::ensure!(
        svc["spec"]["selector"]["app"] == "old",
        "the selector changed"
    );

    // Someone else's Service with a name Syncing returns: the host would refuse that output
    // rather than take it over (and apply the others), and plan says so.
    let theirs = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "backend"},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 9090, "protocol": "TCP"}]},
    });
    apply_yaml(client, &theirs.to_string(), Some(ns)).await?;
    let (ok, stdout, stderr) = plan(&["autoroute/example", "-n", ns, "--operator", "autoroute"]);
    anyhow::ensure!(!ok, "plan must fail when the host would refuse:\n{stdout}");
    anyhow::ensure!(
        stdout.contains(&format!(
            "! Service {ns}/backend already exists and has no controller"
        )) && stderr.contains(&format!(
            "the host would refuse Service {ns}/backend (OutputRefused: they exist without this resource as controller) and apply the other outputs"
        )),
        "plan output:\n{stdout}\n{stderr}"
    );
    delete(client, "v1", "Service", Some(ns), "backend").await?;

    // Errors say what to do next.
    let (ok, _, stderr) = plan(&["autoroute/example", "-n", ns, "--operator", "nope"]);
    anyhow::ensure!(
        !ok && stderr
            .contains("WasmOperator nope not found: deploy it first (wasmpilot deploy <dir>)"),
        "{stderr}"
    );
    let (ok, _, stderr) = plan(&["autoroute/missing", "-n", ns, "--operator", "autoroute"]);
    anyhow::ensure!(
        !ok && stderr.contains(&format!(
            "AutoRoute {ns}/missing not found (kubectl get autoroutes -n {ns})"
        )),
        "{stderr}"
    );
    let (ok, _, stderr) = plan(&["service/frontend", "-n", ns, "--operator", "autoroute"]);
    anyhow::ensure!(
        !ok && stderr.contains("manages AutoRoute (autoroutes), not \"service\""),
        "{stderr}"
    );

    // Without --operator: the WasmOperator whose spec.resource is the kind (or its plural).
    for target in ["AutoRoute/example", "autoroutes/example"] {
        let (ok, stdout, stderr) = plan(&[target, "-n", ns, "--now", "2026-11-21T12:00:00Z"]);
        anyhow::ensure!(
            ok,
            "plan {target} without --operator failed:\n{stderr}\n{stdout}"
        );
        anyhow::ensure!(
            stdout.contains(&format!(
                "plan for AutoRoute {ns}/example (operator autoroute)"
            )) && stdout.contains("4 to create, 1 to update, 0 unchanged, 1 to delete"),
            "plan {target} without --operator:\n{stdout}"
        );
    }
    let (ok, _, stderr) = plan(&["service/frontend", "-n", ns]);
    anyhow::ensure!(
        !ok && stderr.contains("no WasmOperator manages \"service\"")
            && stderr.contains("kubectl get wasmoperators"),
        "{stderr}"
    );
    Ok(())
}
