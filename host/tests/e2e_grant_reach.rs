//! What the admin's grant pins beyond consent (issue 68), on a host with
//! `--require-operator-grants`:
//!
//! - a cluster-scoped resource's output goes only to a namespace the grant lists: refused
//!   (`Synced=False`, `OutputRefused`, `NamespaceNotGranted` in the message) although the
//!   operator's account may write there, applied once the admin grants the namespace
//!   (`wasmpilot grant --output-namespace`);
//! - its author switches its module to a registry with another team's pull Secret (labelled as a
//!   pull Secret: one the host reads as itself): refused before anything is read or fetched (`ModuleSourceNotGranted`, no
//!   connection to the registry);
//! - granted, the registry on a loopback address is still refused (the host's egress policy);
//!   the admin allows that address to this operator alone (`--allow-fetch-from` of the grant):
//!   the host connects.

mod common;

use anyhow::{ensure, Context};
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const GRANT: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperatorGrant");
const HATCH: (&str, &str) = ("test.wasmpilot.io/v1", "Hatch");
const OP: &str = "grant-reach";
const SECRET: &str = "other-team-regcred";

fn operator(module: Value) -> Value {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OP}, "spec": {
        "resource": {"apiVersion": HATCH.0, "kind": HATCH.1},
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"], "module": module,
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
            {"name": "Done", "final": true}]}})
}

fn scripted() -> Value {
    json!({"file": {"path": "wasmpilot_test_scripted.wasm"}})
}

/// A Hatch (cluster-scoped) whose worker writes a ConfigMap into `ns`.
fn hatch(name: &str, ns: &str) -> Value {
    json!({"apiVersion": HATCH.0, "kind": HATCH.1, "metadata": {"name": name},
        "spec": {"phases": {"Start": {"mode": "ok", "next": "Done", "outputs": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": format!("{name}-out"), "namespace": ns},
             "data": {"from": name}}]}}}})
}

fn wasmpilot(args: &[&str]) -> anyhow::Result<String> {
    Ok(wasmpilot_cli(args)?.0)
}

fn message(o: &Value, condition_type: &str) -> String {
    condition(o, condition_type)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A "registry" on a loopback port that counts the connections made to it and answers 404.
async fn counting_registry() -> anyhow::Result<(u16, Arc<AtomicUsize>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await;
            });
        }
    });
    Ok((port, connections))
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn the_grant_pins_output_namespaces_module_sources_and_fetch_allowances() {
    with_scripted_host_args(
        HATCH.1,
        &["--require-operator-grants"],
        "wasmpilot-e2e-grant-reach",
        "e2e-grant-reach",
        &[OP],
        |client, ns, log| async move {
            let name = format!("{ns}-h");
            let result = scenario(&client, &ns, &name).await;
            let _ = delete(&client, HATCH.0, HATCH.1, None, &name).await;
            let _ = delete(&client, GRANT.0, GRANT.1, None, OP).await;
            result?;
            let log = std::fs::read_to_string(&log)?;
            ensure!(
                log.contains("refused an output into a namespace its grant does not list"),
                "the host logs the refusal"
            );
            Ok(())
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let _ = delete(client, GRANT.0, GRANT.1, None, OP).await;
    apply_yaml(client, &operator(scripted()).to_string(), None).await?;
    wait_condition(client, OPS, None, OP, ("Ready", "False", "GrantMissing"), T).await?;
    let review = wasmpilot(&["grant", OP])?;
    ensure!(
        review.contains("WasmOperatorGrant"),
        "the grant is applied: {review}"
    );
    let grant = must(get(client, GRANT.0, GRANT.1, None, OP).await?, "the grant")?;
    ensure!(
        grant["spec"]["modules"]["files"] == json!(["wasmpilot_test_scripted.wasm"]),
        "the grant lists the module source it consents to: {}",
        grant["spec"]
    );
    let running = ("Ready", "True", "ControllerRunning");
    wait_condition(client, OPS, None, OP, running, T).await?;

    // 1. The premise: the operator's account may write ConfigMaps in `ns`; only the grant stops
    //    a cluster-scoped resource's output there.
    let account = format!("system:serviceaccount:wasmpilot-system:op-{OP}");
    let can = std::process::Command::new("kubectl")
        .args([
            "auth",
            "can-i",
            "create",
            "configmaps",
            "-n",
            ns,
            "--as",
            &account,
        ])
        .output()?;
    ensure!(
        String::from_utf8_lossy(&can.stdout).trim() == "yes",
        "{account} may create ConfigMaps in {ns}: {}",
        String::from_utf8_lossy(&can.stderr)
    );
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
    let text = message(&refused, "Synced");
    ensure!(
        text.contains(&format!(
            "namespace {ns} is not one its WasmOperatorGrant lists"
        )) && text.contains(&format!("{name}-out")),
        "the Condition names the output and why: {text}"
    );
    ensure!(
        get(client, "v1", "ConfigMap", Some(ns), &format!("{name}-out"))
            .await?
            .is_none(),
        "no ConfigMap in a namespace the grant does not list"
    );
    // The admin grants the namespace: the operator reloads under the new grant, the output lands.
    wasmpilot(&["grant", OP, "--output-namespace", ns])?;
    wait_for(&format!("ConfigMap {ns}/{name}-out"), T, || async {
        get(client, "v1", "ConfigMap", Some(ns), &format!("{name}-out")).await
    })
    .await?;

    // 2. The author switches the module to a registry, with another team's pull Secret.
    let (port, connections) = counting_registry().await?;
    let registry = format!("127.0.0.1:{port}");
    let auth = format!(r#"{{"auths":{{"{registry}":{{"auth":"b3RoZXI6dGVhbQ=="}}}}}}"#);
    apply_yaml(
        client,
        &json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": ns,
                         "labels": {"wasmpilot.io/pull-secret": "true"}},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": auth}})
        .to_string(),
        Some(ns),
    )
    .await?;
    let pulled = json!({"oci": {"reference": format!("{registry}/team/worker:1"),
        "insecure": true, "pullSecret": {"name": SECRET, "namespace": ns}}});
    apply_yaml(client, &operator(pulled.clone()).to_string(), None).await?;
    let refused = wait_condition(
        client,
        OPS,
        None,
        OP,
        ("Ready", "False", "ModuleSourceNotGranted"),
        T,
    )
    .await?;
    let text = message(&refused, "Ready");
    ensure!(
        text.contains(&format!("pull Secret {ns}/{SECRET}"))
            && text.contains(&format!("host {registry}")),
        "the refusal names the pull Secret and the registry: {text}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    ensure!(
        connections.load(Ordering::SeqCst) == 0,
        "nothing fetched for a module source the grant does not list"
    );

    // 3. The admin grants it: a loopback registry is still beyond the host's egress policy...
    wasmpilot(&["grant", OP])?;
    let egress = wait_for("the registry refused by the egress policy", T, || async {
        Ok(get(client, OPS.0, OPS.1, None, OP)
            .await?
            .filter(|o| message(o, "Ready").contains("which the host does not fetch from")))
    })
    .await?;
    ensure!(
        connections.load(Ordering::SeqCst) == 0,
        "a loopback registry is not connected to without an allowance: {}",
        message(&egress, "Ready")
    );
    // ...until the admin allows that address to this operator: the host connects.
    wasmpilot(&["grant", OP, "--allow-fetch-from", "127.0.0.1"])?;
    let grant = must(get(client, GRANT.0, GRANT.1, None, OP).await?, "the grant")?;
    ensure!(
        grant["spec"]["outputNamespaces"] == json!([ns]),
        "a grant made again keeps its output namespaces: {}",
        grant["spec"]
    );
    wait_for("a connection to the registry", T, || async {
        Ok((connections.load(Ordering::SeqCst) > 0).then_some(()))
    })
    .await
    .context("the operator's own allowance lets the host fetch its module")?;
    Ok(())
}
