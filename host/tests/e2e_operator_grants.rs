//! Consent belongs to the admin (issue 68). A host with `--require-operator-grants` runs a
//! WasmOperator only under the admin's `WasmOperatorGrant` of its name made for its uid:
//!
//! - without one it is `Ready=False`, `GrantMissing`, and its resources are not reconciled;
//! - `wasmpilot grant <name>` (the admin's review) consents, and it runs;
//! - its author asks for Secrets (`allowSensitiveKinds` and a Secret input): refused,
//!   `SensitiveKindNotGranted`, until the admin grants again;
//! - deleted and made again under the granted name — by a user bound only to the shipped
//!   `wasmpilot-operator-author` role, who may not write grants — it has another uid and is
//!   refused, `GrantForAnotherOperator`, although every RBAC grant of `op-<name>` is still there;
//! - the grant revoked, what runs stops.

mod common;

use anyhow::{ensure, Context};
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const GRANT: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperatorGrant");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const OP: &str = "consent-probe";
/// A user bound only to the shipped author role (deploy/operator-authors.yaml).
const AUTHOR: &str = "e2e-operator-author";

fn operator(secret_input: bool) -> Value {
    let mut op = json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OP}, "spec": {
        "resource": {"apiVersion": PROBE.0, "kind": PROBE.1},
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"],
             "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}}},
            {"name": "Done", "final": true}]}});
    if secret_input {
        op["spec"]["allowSensitiveKinds"] = json!([{"apiVersion": "v1", "kind": "Secret"}]);
        op["spec"]["phases"][0]["inputs"] = json!([{"name": "secrets", "apiVersion": "v1",
            "kind": "Secret", "matchLabels": {"consent": "yes"}}]);
    }
    op
}

fn probe(name: &str) -> String {
    json!({"apiVersion": PROBE.0, "kind": PROBE.1, "metadata": {"name": name},
           "spec": {"phases": {"Start": {"next": "Done"}}}})
    .to_string()
}

/// The CLI's standard output and error, together.
fn wasmpilot(args: &[&str]) -> anyhow::Result<String> {
    let (stdout, stderr) = wasmpilot_cli(args)?;
    Ok(stdout + &stderr)
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> anyhow::Result<std::process::Output> {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(text.as_bytes())?;
    }
    Ok(child.wait_with_output()?)
}

async fn done(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    wait_for(&format!("Probe {name} Done"), T, || async {
        Ok(get(client, PROBE.0, PROBE.1, Some(ns), name)
            .await?
            .filter(|o| o["status"]["phase"] == "Done"))
    })
    .await
    .map(|_| ())
}

fn ready_message(o: &Value) -> String {
    condition(o, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn a_wasmoperator_runs_only_under_its_admins_grant() {
    with_scripted_host_args(
        PROBE.1,
        &["--require-operator-grants"],
        "wasmpilot-e2e-operator-grants",
        "e2e-operator-grants",
        &[OP],
        |client, ns, _| async move {
            let result = scenario(&client, &ns).await;
            let _ = delete(&client, GRANT.0, GRANT.1, None, OP).await;
            let _ = kubectl(
                &["delete", "clusterrolebinding", AUTHOR, "--ignore-not-found"],
                None,
            );
            result
        },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    // An earlier run's grant would consent to nothing (another uid) but is not this run's.
    let _ = delete(client, GRANT.0, GRANT.1, None, OP).await;
    // The shipped author role, bound to a user who then writes WasmOperators only.
    let role = std::fs::read_to_string(common::repo_root().join("deploy/operator-authors.yaml"))?;
    let applied = kubectl(&["apply", "-f", "-"], Some(&role))?;
    ensure!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let _ = kubectl(
        &["delete", "clusterrolebinding", AUTHOR, "--ignore-not-found"],
        None,
    );
    let bound = kubectl(
        &[
            "create",
            "clusterrolebinding",
            AUTHOR,
            "--clusterrole=wasmpilot-operator-author",
            &format!("--user={AUTHOR}"),
        ],
        None,
    )?;
    ensure!(
        bound.status.success(),
        "{}",
        String::from_utf8_lossy(&bound.stderr)
    );

    // 1. No grant: refused, its resource untouched.
    apply_yaml(client, &operator(false).to_string(), None).await?;
    let refused =
        wait_condition(client, OPS, None, OP, ("Ready", "False", "GrantMissing"), T).await?;
    ensure!(
        ready_message(&refused).contains(&format!("wasmpilot grant {OP}")),
        "the refusal says how to grant: {}",
        ready_message(&refused)
    );
    apply_yaml(client, &probe("before"), Some(ns)).await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let before = must(
        get(client, PROBE.0, PROBE.1, Some(ns), "before").await?,
        "before",
    )?;
    ensure!(
        before["status"].is_null(),
        "an operator without consent reconciled: {}",
        before["status"]
    );

    // 2. The admin's review and grant: it runs.
    let review = wasmpilot(&["grant", OP])?;
    ensure!(
        review.contains("sensitive kinds: none") && review.contains("WasmOperatorGrant"),
        "the review: {review}"
    );
    let running = ("Ready", "True", "ControllerRunning");
    wait_condition(client, OPS, None, OP, running, T).await?;
    done(client, ns, "before").await?;

    // 3. The author asks for Secrets: the admin has not consented.
    apply_yaml(client, &operator(true).to_string(), None).await?;
    let asked = wait_condition(
        client,
        OPS,
        None,
        OP,
        ("Ready", "False", "SensitiveKindNotGranted"),
        T,
    )
    .await?;
    ensure!(
        ready_message(&asked).contains("v1 Secret"),
        "names the kind: {}",
        ready_message(&asked)
    );
    apply_yaml(client, &operator(false).to_string(), None).await?;
    wait_condition(client, OPS, None, OP, running, T).await?;

    // 4. Made again under the granted name by an author: another uid, not granted.
    let author = ["--as", AUTHOR];
    let can = kubectl(
        &[
            &author[..],
            &["auth", "can-i", "create", "wasmoperatorgrants.wasmpilot.io"],
        ]
        .concat(),
        None,
    )?;
    ensure!(
        String::from_utf8_lossy(&can.stdout).trim() == "no",
        "an author may not write grants"
    );
    let granted_uid = must(get(client, GRANT.0, GRANT.1, None, OP).await?, "the grant")?["spec"]
        ["operatorUID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    delete(client, OPS.0, OPS.1, None, OP).await?;
    wait_for("the WasmOperator gone", T, || async {
        Ok(get(client, OPS.0, OPS.1, None, OP)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    let created = kubectl(
        &[&author[..], &["create", "-f", "-"]].concat(),
        Some(&operator(false).to_string()),
    )?;
    ensure!(
        created.status.success(),
        "the author creates the WasmOperator: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let squatted = wait_condition(
        client,
        OPS,
        None,
        OP,
        ("Ready", "False", "GrantForAnotherOperator"),
        T,
    )
    .await?;
    let uid = squatted["metadata"]["uid"].as_str().unwrap_or_default();
    ensure!(
        uid != granted_uid && ready_message(&squatted).contains(&granted_uid),
        "refused naming the uid the grant was made for: {}",
        ready_message(&squatted)
    );
    apply_yaml(client, &probe("squatted"), Some(ns)).await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let squatted = must(
        get(client, PROBE.0, PROBE.1, Some(ns), "squatted").await?,
        "r",
    )?;
    ensure!(
        squatted["status"].is_null(),
        "the squatting operator reconciled: {}",
        squatted["status"]
    );

    // 5. Granted anew, then revoked: it runs, then stops.
    wasmpilot(&["grant", OP])?;
    wait_condition(client, OPS, None, OP, running, T).await?;
    done(client, ns, "squatted").await?;
    delete(client, GRANT.0, GRANT.1, None, OP).await?;
    wait_condition(client, OPS, None, OP, ("Ready", "False", "GrantMissing"), T).await?;
    apply_yaml(client, &probe("after"), Some(ns)).await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let after = must(
        get(client, PROBE.0, PROBE.1, Some(ns), "after").await?,
        "after",
    )?;
    ensure!(
        after["status"].is_null(),
        "a revoked operator reconciled: {}",
        after["status"]
    );
    Ok(())
}
