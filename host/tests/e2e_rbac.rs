//! The shipped RBAC is enough, and no more: `kubectl apply -k deploy/`, then the host runs with
//! exactly the deploy/ ServiceAccount's token plus `wasmpilot rbac` for AutoRoute, and drives an
//! AutoRoute to Ready; an operator whose role was not granted is reported, naming what is missing.
//! Also checks /metrics, /healthz and /readyz of that host (`--shard`, as deploy/ runs it): 200
//! only once its WasmOperators are listed and loaded and it holds the buckets assigned to it.

mod common;

use anyhow::{anyhow, ensure, Context};
use common::cluster::*;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Client;
use serde_json::json;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use wasmpilot::metrics::{READY, READY_STANDBY};

const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn shipped_rbac_is_enough() {
    let client = client().await;
    if let Err(e) = scenario(&client).await {
        panic!("{e:#}");
    }
}

fn wasmpilot(args: &[&str]) -> anyhow::Result<String> {
    Ok(wasmpilot_cli(args)?.0)
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> anyhow::Result<()> {
    let mut child = Command::new("kubectl")
        .args(args)
        .current_dir(common::repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("running kubectl")?;
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("stdin"))?
            .write_all(text.as_bytes())?;
    }
    let status = child.wait()?;
    ensure!(status.success(), "kubectl {args:?} failed");
    Ok(())
}

/// A kubeconfig for the ServiceAccount's token, against the same server and CA.
async fn service_account_kubeconfig(client: &Client) -> anyhow::Result<std::path::PathBuf> {
    let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), "wasmpilot-system");
    let secret_name = wait_for("the ServiceAccount token Secret", T, || async {
        Ok(sas
            .get_opt("wasmpilot")
            .await?
            .and_then(|sa| sa.secrets)
            .and_then(|s| s.into_iter().next())
            .and_then(|r| r.name))
    })
    .await?;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), "wasmpilot-system");
    let secret = secrets.get(&secret_name).await?;
    let data = secret
        .data
        .ok_or_else(|| anyhow!("token Secret without data"))?;
    let token = String::from_utf8(
        data.get("token")
            .ok_or_else(|| anyhow!("no token"))?
            .0
            .clone(),
    )?;
    let admin = kube::config::Kubeconfig::read()?;
    let cluster = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| anyhow!("no cluster in KUBECONFIG"))?;
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": cluster.server, "certificate-authority-data": cluster.certificate_authority_data}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    });
    let path = std::env::temp_dir().join(format!("wasmpilot-sa-{}.kubeconfig", std::process::id()));
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

async fn scenario(client: &Client) -> anyhow::Result<()> {
    // `kubectl apply -k deploy/`, with the PodDisruptionBudget as the local 1.20 API server serves it.
    run_install()?;
    // This test runs the host binary itself under the Deployment's identity and Leases; the
    // Deployment's own pods (e2e_install.rs runs them) must not compete for it.
    kubectl(
        &[
            "scale",
            "deployment/wasmpilot",
            "-n",
            "wasmpilot-system",
            "--replicas=0",
        ],
        None,
    )
    .context("scaling the in-cluster Deployment to 0")?;
    wait_for("the in-cluster host pods gone", T, || async {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client.clone(), "wasmpilot-system");
        let list = pods
            .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=wasmpilot"))
            .await?;
        Ok(list.items.is_empty().then_some(()))
    })
    .await?;
    wasmpilot(&["deploy", "--no-build", "examples/autoroute"])?;
    let role = wasmpilot(&["rbac", "examples/autoroute/operator.yaml"])?;
    kubectl(&["apply", "-f", "-"], Some(&role)).context("applying wasmpilot rbac output")?;
    let kubeconfig = service_account_kubeconfig(client).await?;

    let port = 18000 + (std::process::id() % 1000) as u16;
    let addr = format!("127.0.0.1:{port}");
    let mut host = Host::start_with_env(
        &[
            "--shard",
            "--leader-election-namespace",
            "wasmpilot-system",
            "--lease-duration",
            "4s",
            "--metrics-addr",
            &addr,
        ],
        &[(
            "KUBECONFIG",
            kubeconfig.to_str().ok_or_else(|| anyhow!("path"))?,
        )],
        "wasmpilot-rbac",
    );

    // /readyz from the first answer on: 503 until the replica has listed its WasmOperators,
    // loaded their modules (autoroute, deployed above) and holds the buckets assigned to it.
    let ready_by = std::time::Instant::now() + T;
    loop {
        let (code, ready) = http_response(&addr, "/readyz").unwrap_or_default();
        if (code, ready.as_str()) == (200, READY) {
            break;
        }
        ensure!(
            code == 0
                || (code, ready.as_str()) == (200, READY_STANDBY)
                || (code == 503
                    && (ready.contains("caches not synced for")
                        || ready.contains("not listed")
                        || ready.contains("buckets assigned to this replica not held yet"))),
            "/readyz is down, a standby, or a 503 naming what it waits for: {code} {ready}"
        );
        ensure!(
            std::time::Instant::now() < ready_by,
            "/readyz not 200 after {T:?}: {code} {ready}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = http_get(&addr, "/metrics")?;
    let running = metrics
        .lines()
        .find_map(|l| l.strip_prefix("wasmpilot_operators_running "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    ensure!(
        running >= 1.0,
        "the replica answered /readyz 200 before loading its WasmOperators: {metrics}"
    );

    // An operator whose role was never granted: reported, not failing at its first write.
    let probe_op = json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator", "metadata": {"name": "rbac-missing"},
        "spec": {"resource": {"apiVersion": "test.wasmpilot.io/v1", "kind": "Probe"},
                 "allowSensitiveKinds": [{"apiVersion": "v1", "kind": "Secret"}],
                 "phases": [{"name": "Start", "initial": true, "module": {"file": {"path": "x.wasm"}},
                             "outputs": [{"apiVersion": "v1", "kind": "Secret"}]}]}});
    apply_file(
        client,
        &common::repo_root().join("host/tests/manifests/scripted.yaml"),
        None,
    )
    .await?;
    // The manifest also declares the `scripted` operator: its grants leave this host out.
    apply_yaml_ungranted(client, &probe_op.to_string(), None).await?;
    // A pull Secret outside the host's namespace: reading it is forbidden, and the Condition says
    // what to do. (Its resource is AutoRoute, whose role is granted, so loading gets that far;
    // the registry is a name that never resolves, read after the Secret: a literal loopback
    // address would be refused with the definition.)
    let secret_op = json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator", "metadata": {"name": "rbac-secret"},
        "spec": {"resource": {"apiVersion": "examples.io/v1", "kind": "AutoRoute"},
                 "phases": [{"name": "Start", "initial": true, "module": {"oci": {
                     "reference": "registry.e2e.invalid:9/wasmpilot/none:v1",
                     "pullSecret": {"name": "registry-credentials", "namespace": "default"}}}}]}});
    grant_operator_to_host(client, &secret_op).await?;
    apply_yaml_ungranted(client, &secret_op.to_string(), None).await?;

    let ns = create_namespace(client, "e2e-rbac").await?;
    apply_yaml(
        client,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"tier": "web"}},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}})
        .to_string(),
        Some(&ns),
    )
    .await?;
    apply_yaml(
        client,
        &json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": "r"}, "spec": {"deploymentSelector": {"matchLabels": {"tier": "web"}}}}).to_string(),
        Some(&ns),
    )
    .await?;
    let result = async {
        wait_for("AutoRoute Ready under the ServiceAccount", T, || async {
            let o = get(client, "examples.io/v1", "AutoRoute", Some(&ns), "r").await?;
            Ok(o.filter(|o| o["status"]["phase"] == "Ready" && str_list(&o["status"]["syncedDeployments"]) == ["web"]).map(|_| ()))
        })
        .await?;
        must(get(client, "v1", "Service", Some(&ns), "web").await?, "Service web")?;
        let o = wait_condition(client, ("wasmpilot.io/v1alpha1", "WasmOperator"), None, "rbac-missing", ("Ready", "False", "MissingPermissions"), T).await?;
        let msg = condition(&o, "Ready").and_then(|c| c["message"].as_str()).unwrap_or_default().to_string();
        ensure!(msg.contains("test.wasmpilot.io/probes") && msg.contains("core/secrets") && msg.contains("wasmpilot rbac"), "names what is missing: {msg}");
        let o = wait_condition(client, ("wasmpilot.io/v1alpha1", "WasmOperator"), None, "rbac-secret", ("Ready", "False", "ModulePullSecretFailed"), T).await?;
        let msg = condition(&o, "Ready").and_then(|c| c["message"].as_str()).unwrap_or_default().to_string();
        ensure!(
            msg.contains("pull Secret default/registry-credentials")
                && msg.contains("not allowed to get Secrets in namespace default")
                && msg.contains("Create the pull Secret in wasmpilot-system")
                && msg.contains("`get` on secrets in default"),
            "a forbidden pull Secret says what to do: {msg}"
        );

        let metrics = http_get(&addr, "/metrics")?;
        ensure!(metrics.contains(r#"wasmpilot_reconciles_total{operator="autoroute""#), "metrics: {metrics}");
        ensure!(metrics.contains("wasmpilot_worker_duration_seconds_bucket"), "histogram exported");
        ensure!(metrics.contains(r#"wasmpilot_operator_load_failures_total{operator="rbac-missing",reason="MissingPermissions"}"#), "load failures counted");
        ensure!(metrics.contains(r#"wasmpilot_operator_load_failures_total{operator="rbac-secret",reason="ModulePullSecretFailed"}"#), "labelled with the Condition's reason");
        ensure!(http_response(&addr, "/healthz")?.0 == 200, "healthz");
        // Still ready, with the failed operators: a failed load does not block
        // readiness, it is reported on the WasmOperator. Waited for, not read once: a
        // WasmOperator another test left (its buckets being taken) may hold it at 503 briefly.
        let ready_by = std::time::Instant::now() + T;
        loop {
            let (code, ready) = http_response(&addr, "/readyz").unwrap_or_default();
            if (code, ready.as_str()) == (200, READY) {
                break;
            }
            ensure!(std::time::Instant::now() < ready_by, "readyz not 200 after {T:?}: {code} {ready}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok(())
    }
    .await;
    ensure!(host.is_alive(), "host alive");
    // The test's WasmOperators deleted while the host runs, so it releases their finalizers:
    // none is left terminating (or running) beside a later test's host or the demo's.
    let ops = ("wasmpilot.io/v1alpha1", "WasmOperator");
    let test_operators = ["rbac-missing", "rbac-secret", "scripted"];
    for op in test_operators {
        let _ = delete(client, ops.0, ops.1, None, op).await;
    }
    for op in test_operators {
        let _ = wait_for(&format!("WasmOperator {op} gone"), T, || async {
            Ok(get(client, ops.0, ops.1, None, op)
                .await?
                .is_none()
                .then_some(()))
        })
        .await;
    }
    let log = host.log_text();
    drop(host);
    let _ = revoke_operator(client, "rbac-secret").await;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let _ = api.delete(&ns, &Default::default()).await;
    result?;
    // Writes that only log a warning when forbidden: the shipped role must cover them too. (An
    // RBAC denial names the user that "cannot" do it; a namespace another test is deleting
    // refuses writes too, for a reason the role cannot fix.)
    for denied in [
        "could not publish event",
        "could not update WasmOperator status",
    ] {
        let rbac_denials: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains(denied) && l.contains("is forbidden: User") && l.contains("cannot")
            })
            .collect();
        ensure!(
            rbac_denials.is_empty(),
            "host log says {denied:?}: {rbac_denials:#?}"
        );
    }
    Ok(())
}

/// deploy/local/install.sh: `kubectl apply -k deploy/` (the PodDisruptionBudget as
/// policy/v1beta1 where the API server serves no policy/v1, as the local cluster's 1.20).
fn run_install() -> anyhow::Result<()> {
    let out = std::process::Command::new(common::repo_root().join("deploy/local/install.sh"))
        .output()
        .context("running deploy/local/install.sh")?;
    anyhow::ensure!(
        out.status.success(),
        "deploy/local/install.sh (kubectl apply -k deploy/) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
