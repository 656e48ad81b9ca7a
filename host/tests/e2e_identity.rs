//! Each operator acts as its own account (issue 30). Operator A, granted, reads a Secret as its
//! declared input and writes; operator B declares the same Secret input with no grant of its own
//! and is refused (`NotGranted`, naming what is missing) although the host — here the cluster
//! admin — could read the Secret itself. Granted only in one namespace, B reconciles there and
//! its resources elsewhere get a `NotGranted` Condition; its grants revoked, its next resource
//! is refused within seconds (not after `GRANTS_RECHECK`). The API server's audit log shows every
//! write of A's under A's account (impersonated by the host).

mod common;

use anyhow::ensure;
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const A: &str = "ident-a";
const B: &str = "ident-b";
/// `hunter2`, as the Secret's data holds it and an echoing worker would copy it.
const SECRET_VALUE: &str = "aHVudGVyMg==";

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn each_operator_acts_as_its_own_account() {
    with_scripted_host(
        PROBE.1,
        "wasmpilot-e2e-identity",
        "e2e-identity",
        &[A, B],
        |client, ns, log| async move {
            scenario(&client, &ns).await?;
            let log = std::fs::read_to_string(&log)?;
            ensure!(
                !log.contains(SECRET_VALUE) && !log.contains("hunter2"),
                "the host logged the Secret's value"
            );
            Ok(())
        },
    )
    .await;
}

/// An operator of `kind` whose worker (the scripted one) reads Secrets labelled `ident=yes`
/// and writes ConfigMaps.
fn operator(name: &str, kind: (&str, &str)) -> Value {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name}, "spec": {
        "resource": {"apiVersion": kind.0, "kind": kind.1},
        "allowSensitiveKinds": [{"apiVersion": "v1", "kind": "Secret"}],
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"],
             "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}},
             "inputs": [{"name": "secrets", "apiVersion": "v1", "kind": "Secret",
                         "matchLabels": {"ident": "yes"}}],
             "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
            {"name": "Done", "final": true}]}})
}

/// A resource whose worker copies its inputs into its status and returns one ConfigMap.
fn echoing(kind: (&str, &str), name: &str, output: &str) -> Value {
    json!({"apiVersion": kind.0, "kind": kind.1, "metadata": {"name": name},
        "spec": {"phases": {"Start": {"mode": "ok", "echoInputs": true, "next": "Done",
            "outputs": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": output},
                         "data": {"from": name}}]}}}})
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    test_kind_free(client, LAG.1).await?;
    // Grants an interrupted earlier run left would make B's refusal untestable.
    for op in [A, B] {
        revoke_operator(client, op).await?;
    }
    let result = steps(client, ns).await;
    for op in [A, B] {
        let _ = delete(client, OPS.0, OPS.1, None, op).await;
        let _ = revoke_operator(client, op).await;
    }
    result
}

async fn steps(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let other = create_namespace(client, "e2e-identity-other").await?;
    let result = async {
        for namespace in [ns, other.as_str()] {
            apply_yaml(
                client,
                &json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "token", "labels": {"ident": "yes"}},
                        "data": {"password": SECRET_VALUE}})
                .to_string(),
                Some(namespace),
            )
            .await?;
        }
        apply_yaml(client, &operator(A, PROBE).to_string(), None).await?;
        apply_yaml_ungranted(client, &operator(B, LAG).to_string(), None).await?;

        // B: its own account may not read Secrets, whatever the host may.
        let b = wait_condition(client, OPS, None, B, ("Ready", "False", "NotGranted"), T).await?;
        let message = condition_message(&b, "Ready");
        ensure!(
            message.contains("system:serviceaccount:wasmpilot-system:op-ident-b")
                && message.contains("core/secrets (get, list, watch)")
                && message.contains("wasmpilot rbac"),
            "B's refusal names its account, the missing grant and the fix: {message}"
        );
        let a = wait_condition(
            client,
            OPS,
            None,
            A,
            ("Ready", "True", "ControllerRunning"),
            T,
        )
        .await?;
        ensure!(
            condition_message(&a, "Ready")
                .contains("acting as system:serviceaccount:wasmpilot-system:op-ident-a"),
            "A's Ready message names its account: {a}"
        );

        // A reads the Secret and writes. Its worker copies its inputs into its status: the
        // Secret arrives there with its keys, its values redacted by the host.
        apply_yaml(client, &echoing(PROBE, "p", "a-out").to_string(), Some(ns)).await?;
        let p = wait_phase(client, PROBE, ns, "p", "Done").await?;
        echoed_redacted(&p, "A")?;
        must(
            get(client, "v1", "ConfigMap", Some(ns), "a-out").await?,
            "A's output",
        )?;

        // B's resource, in the same namespace: B runs no controller, nothing is read for it.
        apply_yaml(client, &echoing(LAG, "l", "b-out").to_string(), Some(ns)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let l = must(get(client, LAG.0, LAG.1, Some(ns), "l").await?, "Lag l")?;
        ensure!(
            !l.to_string().contains(SECRET_VALUE) && l["status"]["phase"].is_null(),
            "B's resource got nothing: {l}"
        );
        ensure!(
            get(client, "v1", "ConfigMap", Some(ns), "b-out")
                .await?
                .is_none(),
            "B wrote nothing"
        );

        // Granted only in `ns`: B runs, reconciles there, and refuses its resource elsewhere.
        grant_operator(client, &operator(B, LAG), &[ns]).await?;
        let b = wait_condition(
            client,
            OPS,
            None,
            B,
            ("Ready", "True", "ControllerRunning"),
            T,
        )
        .await?;
        let message = condition_message(&b, "Ready");
        ensure!(
            message.contains("not granted cluster-wide")
                && message.contains("core/secrets (get, list, watch)"),
            "B's Ready message says it runs only where granted: {message}"
        );
        let l = wait_phase(client, LAG, ns, "l", "Done").await?;
        echoed_redacted(&l, "B, granted in this namespace,")?;
        apply_yaml(
            client,
            &echoing(LAG, "elsewhere", "b-out").to_string(),
            Some(&other),
        )
        .await?;
        let refused = wait_condition(
            client,
            LAG,
            Some(&other),
            "elsewhere",
            ("Synced", "False", "NotGranted"),
            T,
        )
        .await?;
        let message = condition_message(&refused, "Synced");
        ensure!(
            message.contains(&format!("in namespace {other}"))
                && message.contains("core/secrets (get, list, watch)"),
            "the refusal names the namespace and the grant: {message}"
        );
        ensure!(
            !refused.to_string().contains(SECRET_VALUE) && refused["status"]["phase"].is_null(),
            "nothing was read for the resource outside B's namespace: {refused}"
        );
        ensure!(
            get(client, "v1", "ConfigMap", Some(&other), "b-out")
                .await?
                .is_none(),
            "B wrote nothing outside its namespace"
        );

        // The admin then grants B cluster-wide. With no edit of the WasmOperator, its Ready
        // message stops saying it runs only where granted, and the resource refused elsewhere
        // is reconciled: both ask for the grants again within GRANTS_RECHECK.
        let generation = b["metadata"]["generation"].clone();
        grant_operator(client, &operator(B, LAG), &[]).await?;
        let slow = T + wasmpilot::controller::grants::GRANTS_RECHECK;
        wait_for(
            "B's Ready message follows its cluster-wide grant",
            slow,
            || async {
                let b = must(get(client, OPS.0, OPS.1, None, B).await?, B)?;
                let message = condition_message(&b, "Ready");
                let follows = message.contains("acting as") && !message.contains("not granted");
                Ok((follows && b["metadata"]["generation"] == generation).then_some(()))
            },
        )
        .await?;
        wait_for(
            "Lag elsewhere Done once B is granted there",
            slow,
            || async {
                let o = get(client, LAG.0, LAG.1, Some(&other), "elsewhere").await?;
                Ok(o.filter(|o| o["status"]["phase"] == "Done"))
            },
        )
        .await?;

        // The admin revokes B's grants: B's next reconcile is refused before anything is read
        // for it, within seconds (the host watches RBAC objects), not after GRANTS_RECHECK
        // (its answers were asked moments ago, so they would still be trusted).
        // (Everything but the Secrets is granted again, so the refusal can be reported on the
        // resource as B.)
        revoke_operator(client, B).await?;
        let mut without_secrets = operator(B, LAG);
        without_secrets["spec"]["phases"][0]["inputs"] = json!([]);
        grant_operator(client, &without_secrets, &[]).await?;
        apply_yaml(
            client,
            &echoing(LAG, "revoked", "b-revoked").to_string(),
            Some(ns),
        )
        .await?;
        let refused = wait_condition(
            client,
            LAG,
            Some(ns),
            "revoked",
            ("Synced", "False", "NotGranted"),
            Duration::from_secs(20),
        )
        .await?;
        ensure!(
            condition_message(&refused, "Synced").contains("core/secrets (get, list, watch)")
                && !refused.to_string().contains(SECRET_VALUE)
                && refused["status"]["phase"].is_null(),
            "nothing was read for B once its Secrets were revoked: {refused}"
        );
        ensure!(
            get(client, "v1", "ConfigMap", Some(ns), "b-revoked")
                .await?
                .is_none(),
            "B wrote nothing once revoked"
        );

        audit_shows_operator_accounts(ns).await
    }
    .await;
    let _ = delete(client, "v1", "Namespace", None, &other).await;
    result
}

/// The echoing worker received the Secret (its key is in the status it returned) and its value
/// did not reach the status.
fn echoed_redacted(resource: &Value, who: &str) -> anyhow::Result<()> {
    let status = resource["status"].to_string();
    ensure!(
        status.contains("password") && status.contains("[redacted]"),
        "{who}'s worker received the Secret (its key echoed, the value redacted): {status}"
    );
    ensure!(
        !status.contains(SECRET_VALUE) && !status.contains("hunter2"),
        "the Secret's value reached the status: {status}"
    );
    Ok(())
}

fn condition_message(obj: &Value, type_: &str) -> String {
    condition(obj, type_)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn wait_phase(
    client: &kube::Client,
    kind: (&str, &str),
    ns: &str,
    name: &str,
    phase: &str,
) -> anyhow::Result<Value> {
    wait_for(&format!("{} {ns}/{name} in {phase}", kind.1), T, || async {
        let o = get(client, kind.0, kind.1, Some(ns), name).await?;
        Ok(o.filter(|o| o["status"]["phase"] == phase))
    })
    .await
}

/// In the API server's audit log: every write to A's output and A's resource status in `ns`
/// was sent as A's account, impersonated by the host; B's as B's. (Skipped, saying so, when
/// the cluster is not the local one that writes the log.)
async fn audit_shows_operator_accounts(ns: &str) -> anyhow::Result<()> {
    if audit_entries(ns)?.is_none() {
        eprintln!("SKIPPED: the audit log check (WASMPILOT_AUDIT_LOG is not set: not the local cluster of deploy/local/cluster.sh)");
        return Ok(());
    }
    let account = |op: &str| format!("system:serviceaccount:wasmpilot-system:op-{op}");
    // The audit backend writes in batches: wait for the entries to arrive.
    wait_for("the operators' writes in the audit log", T, || async {
        let writes = audit_entries(ns)?.unwrap_or_default();
        let by = |resource: &str, subresource: Option<&str>, name: &str| -> Vec<&Value> {
            writes
                .iter()
                .filter(|e| {
                    e["objectRef"]["resource"] == resource
                        && e["objectRef"]["subresource"].as_str() == subresource
                        && e["objectRef"]["name"] == name
                })
                .collect()
        };
        let checks = [
            (by("configmaps", None, "a-out"), A),
            (by("probes", Some("status"), "p"), A),
            (by("configmaps", None, "b-out"), B),
            (by("lags", Some("status"), "l"), B),
        ];
        for (entries, op) in &checks {
            if entries.is_empty() {
                return Ok(None);
            }
            for e in entries {
                let as_user = e["impersonatedUser"]["username"].as_str();
                ensure!(
                    as_user == Some(account(op).as_str()),
                    "a write for operator {op} not sent as its account {}: {e}",
                    account(op)
                );
            }
        }
        eprintln!(
            "audit log: {} writes to the operators' outputs and status, each as its operator's account",
            checks.iter().map(|(e, _)| e.len()).sum::<usize>()
        );
        Ok(Some(()))
    })
    .await
}
