//! Upgrade evidence on the local cluster (issue 15's acceptance): the AutoRoute operator with a
//! shadow Syncing module that labels its Services (ShadowDiffered Events, metrics and
//! `status.shadows`, while the live Services stay unlabelled), then an identical shadow (no
//! difference over the reconciles that follow); the host records every decision, and 100 of
//! them replay as 100 same against the example and as exactly the Service-routing Syncing cases
//! against the candidate; each route's provenance history is bounded and its input hashes are
//! recorded requests' sha256; a shadow that stalls past its deadline does not hold up live
//! routes; a captured live request replays as the same.

mod common;

use anyhow::{ensure, Context};
use common::autoroute::{create_route, wait_ready, AR, T};
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use wasmpilot::evidence::case::DecisionCase;

const OPERATOR: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const ROUTES: usize = 20;

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn upgrade_evidence_on_a_real_cluster() {
    let client = client().await;
    deploy_example("examples/autoroute");
    let records = tempfile::tempdir().expect("record dir");
    let addr = format!("127.0.0.1:{}", free_port());
    let shadow_addr = format!("127.0.0.1:{}", free_port());
    let wasm_dir = common::wasm_dir();
    let mut host = Host::start(
        &[
            "--module-dir",
            wasm_dir.to_str().expect("utf-8 path"),
            "--record-dir",
            records.path().to_str().expect("utf-8 path"),
            "--metrics-addr",
            &addr,
            "--shadow-cases-addr",
            &shadow_addr,
        ],
        "wasmpilot-e2e-evidence",
    );
    let ns = create_namespace(&client, "evidence")
        .await
        .expect("namespace");
    let result = scenario(
        &client,
        &ns,
        (&addr, &shadow_addr),
        records.path(),
        &host.log,
    )
    .await;
    let alive = host.is_alive();
    // Later tests get the example as shipped (no shadow).
    deploy_example("examples/autoroute");
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    assert!(alive, "the host process died");
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenario(
    client: &Client,
    ns: &str,
    (addr, shadow_addr): (&str, &str),
    records: &Path,
    host_log: &Path,
) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let wasm_dir = common::wasm_dir();
    let candidate = wasm_dir.join("wasmpilot_test_relabeled.wasm");
    let example = wasm_dir.join("autoroute_syncing.wasm");

    // 1. A differing shadow.
    let candidate_digest = set_shadow(client, "wasmpilot_test_relabeled.wasm", &candidate).await?;
    let names: Vec<String> = (0..ROUTES).map(|i| format!("r{i}")).collect();
    for name in &names {
        create_route(client, ns, name, 2).await?;
    }
    for name in &names {
        wait_ready(client, ns, name, 2).await?;
    }
    for name in &names {
        let event = wait_event(client, ns, name, "ShadowDiffered", T).await?;
        let note = event.message.unwrap_or_default();
        ensure!(
            note.contains("metadata.labels.candidate") && note.contains(&candidate_digest[..19]),
            "the ShadowDiffered Event names the changed field and the shadow: {note}"
        );
    }
    let different = shadow_metric(addr, "different")?;
    ensure!(
        different >= ROUTES as f64,
        "shadow_decisions_total{{result=different}} is {different}, want at least {ROUTES}"
    );
    let services = dynamic_api(client, "v1", "Service", Some(ns)).await?;
    let live = services.list(&Default::default()).await?.items;
    ensure!(
        live.len() == 2 * ROUTES,
        "{} live Services, want {}",
        live.len(),
        2 * ROUTES
    );
    ensure!(
        live.iter().all(|s| !s.labels().contains_key("candidate")),
        "a shadow's outputs were applied"
    );
    let counts = wait_shadow_counts(client, &candidate_digest, |c| {
        c["different"].as_u64() >= Some(ROUTES as u64)
    })
    .await?;
    eprintln!("differing shadow: {counts}");
    // The kept differing cases replay: the live module decides them as recorded, the candidate
    // as the shadow did.
    // On their own loopback listener, not beside /metrics (which a Service exposes).
    let kept = http_get(shadow_addr, "/shadow-cases?operator=autoroute")?;
    ensure!(
        !http_get(addr, "/shadow-cases?operator=autoroute")?.contains(&candidate_digest),
        "the metrics listener serves the shadow cases"
    );
    let shadow_cases = work.path().join("shadow.jsonl");
    std::fs::write(&shadow_cases, &kept)?;
    let kept_count = kept.lines().count();
    ensure!(
        (1..=10).contains(&kept_count),
        "{kept_count} shadow cases kept, want 1..=10"
    );
    let (ok, text) = common::replay_autoroute(&shadow_cases, &[]);
    ensure!(
        ok && text.contains(&format!("{kept_count} cases: {kept_count} same")),
        "shadow cases against the live module: {text}"
    );
    let candidate_module = format!("Syncing={}", candidate.display());
    let (ok, text) = common::replay_autoroute(&shadow_cases, &["--module", &candidate_module]);
    ensure!(
        !ok && text.contains(&format!("{kept_count} different")),
        "shadow cases against the candidate: {text}"
    );

    // 2. An identical shadow (the live module itself): the reconciles after the swap agree.
    let example_digest = set_shadow(client, "autoroute_syncing.wasm", &example).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let different_before = shadow_metric(addr, "different")?;
    for name in &names {
        apply_yaml(
            client,
            &common::autoroute::deployment(&format!("{name}-2"), name, 9000),
            Some(ns),
        )
        .await?;
    }
    for name in &names {
        wait_ready(client, ns, name, 3).await?;
    }
    let counts = wait_shadow_counts(client, &example_digest, |c| {
        c["same"].as_u64() >= Some(ROUTES as u64)
    })
    .await?;
    ensure!(
        counts["different"] == 0 && counts["errors"] == 0,
        "an identical shadow differed: {counts}"
    );
    // The candidate's component, used by no worker since the swapped-out controller drained,
    // leaves the host's memory (it was there: its shadow runs were counted above).
    wait_for(
        "the host to forget the candidate's component",
        T,
        || async {
            let log = std::fs::read_to_string(host_log)?;
            Ok(log
                .lines()
                .any(|l| l.contains("forgot a compiled module") && l.contains(&candidate_digest))
                .then_some(()))
        },
    )
    .await?;
    ensure!(
        http_get(addr, "/metrics")?.contains("wasmpilot_modules_in_memory "),
        "/metrics has the gauge of components in memory"
    );
    ensure!(
        shadow_metric(addr, "different")? == different_before,
        "differences counted after the identical shadow took over"
    );

    // 3. Replay 100 recorded decisions of this namespace.
    let lines = recorded_lines(records, ns)?;
    ensure!(
        lines.len() >= 100,
        "only {} decisions recorded in {ns}",
        lines.len()
    );
    let hundred = work.path().join("hundred.jsonl");
    std::fs::write(&hundred, lines[..100].join("\n") + "\n")?;
    let (ok, text) = common::replay_autoroute(&hundred, &[]);
    ensure!(
        ok && text.contains("100 cases: 100 same, 0 different"),
        "replay against the example: {text}"
    );
    let module = format!("Syncing={}", candidate.display());
    let (ok, text) = common::replay_autoroute(&hundred, &["--module", &module]);
    ensure!(!ok, "differences must fail the replay: {text}");
    let reported: BTreeSet<usize> = text
        .lines()
        .filter(|l| l.starts_with("different"))
        .filter_map(|l| l.rsplit(':').next()?.trim_end_matches(']').parse().ok())
        .collect();
    let routing_services: BTreeSet<usize> = lines[..100]
        .iter()
        .enumerate()
        .filter(|(_, l)| routes_a_service(l))
        .map(|(i, _)| i + 1)
        .collect();
    ensure!(
        !routing_services.is_empty() && reported == routing_services,
        "the candidate differs on lines {reported:?}, want exactly the Syncing cases routing a Service {routing_services:?}"
    );

    // 4. Provenance: bounded histories whose input hashes are recorded requests' sha256.
    let by_hash: HashMap<String, DecisionCase> = recorded_lines(records, ns)?
        .iter()
        .map(|l| DecisionCase::parse(l).map(|c| (c.input_hash.clone(), c)))
        .collect::<Result<_, _>>()?;
    for name in &names {
        let route = must(get(client, AR.0, AR.1, Some(ns), name).await?, name)?;
        let history = route["status"]["history"]
            .as_array()
            .context("status.history")?;
        ensure!(
            !history.is_empty() && history.len() <= 10,
            "{name}: {} transitions kept, want 1..=10",
            history.len()
        );
        for t in history {
            let hash = t["inputHash"].as_str().unwrap_or_default();
            let case = by_hash.get(hash).with_context(|| {
                format!("{name}: no recorded request has the input hash {hash} of {t}")
            })?;
            ensure!(
                case.input_hash_reproduces(),
                "{name}: the recorded request does not hash to {hash}"
            );
            ensure!(
                case.module == t["module"].as_str().unwrap_or_default(),
                "{name}: recorded module {} ≠ history's {}",
                case.module,
                t["module"]
            );
        }
    }

    // 5. A shadow that stalls past its deadline changes nothing for the live path: new routes
    // get Ready while its runs (one at a time, 2 s each) are still queued.
    let stalling = wasm_dir.join("wasmpilot_test_stalling.wasm");
    let stalling_digest = set_shadow(client, "wasmpilot_test_stalling.wasm", &stalling).await?;
    let errors_before = shadow_metric(addr, "error")?;
    let late: Vec<String> = (0..6).map(|i| format!("late{i}")).collect();
    for name in &late {
        create_route(client, ns, name, 1).await?;
    }
    for name in &late {
        wait_ready(client, ns, name, 1).await?;
    }
    let errors_when_ready = shadow_metric(addr, "error")? - errors_before;
    ensure!(
        errors_when_ready < late.len() as f64,
        "the live routes were Ready only after {errors_when_ready} stalled shadow runs"
    );
    wait_shadow_counts(client, &stalling_digest, |c| {
        c["errors"].as_u64() >= Some(2)
    })
    .await?;
    let host_log = std::fs::read_to_string(host_log)?;
    ensure!(
        host_log.contains("exceeded its 2s deadline"),
        "premise: the shadow stalled until its deadline"
    );

    // 6. A capture of a live resource replays as the same.
    let captured = work.path().join("captured.json");
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["capture", "autoroute/r0", "-n", ns, "-o"])
        .arg(&captured)
        .output()?;
    ensure!(
        out.status.success(),
        "capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, text) = common::replay_autoroute(&captured, &[]);
    ensure!(ok && text.contains("1 cases: 1 same"), "{text}");

    // 7. A shadow whose bytes are not the sha256 it pins is not loaded; the operator stays
    // Ready and the reason reaches status.shadows[].message (a write the API server once
    // refused for its shape: a failed shadow's module was null).
    let wrong = "0".repeat(64);
    let api = dynamic_api(client, OPERATOR.0, OPERATOR.1, None).await?;
    let op = serde_json::to_value(api.get("autoroute").await?)?;
    let mut phases = op["spec"]["phases"].clone();
    for p in phases.as_array_mut().context("spec.phases")? {
        if p["name"] == "Syncing" {
            p["shadow"] =
                json!({"file": {"path": "wasmpilot_test_relabeled.wasm", "sha256": wrong}});
        }
    }
    api.patch(
        "autoroute",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"phases": phases}})),
    )
    .await?;
    let reported = wait_for(
        "status.shadows of autoroute to report the shadow that did not load",
        T,
        || async {
            let op = must(
                get(client, OPERATOR.0, OPERATOR.1, None, "autoroute").await?,
                "WasmOperator autoroute",
            )?;
            let syncing = op["status"]["shadows"]
                .as_array()
                .and_then(|s| s.iter().find(|c| c["phase"] == "Syncing"))
                .cloned();
            let ready = condition(&op, "Ready").is_some_and(|c| c["status"] == "True");
            Ok(syncing.filter(|c| ready && c["message"].is_string()))
        },
    )
    .await?;
    let message = reported["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains("shadow not loaded (ModuleDigestMismatch)") && message.contains(&wrong),
        "status.shadows[].message names the mismatch and the pinned digest: {reported}"
    );
    ensure!(
        reported.get("module").is_none() && reported["same"] == 0,
        "a shadow that did not load names no module and counts nothing: {reported}"
    );
    let late = "after-bad-shadow";
    create_route(client, ns, late, 1).await?;
    wait_ready(client, ns, late, 1).await?;
    Ok(())
}

/// Makes `file` (a component in the module dir, pinned by its sha256) the shadow of Syncing;
/// waits until the host runs it. Returns its digest.
async fn set_shadow(client: &Client, file: &str, path: &Path) -> anyhow::Result<String> {
    let hex = sha256_hex(&std::fs::read(path)?);
    let api = dynamic_api(client, OPERATOR.0, OPERATOR.1, None).await?;
    let op = serde_json::to_value(api.get("autoroute").await?)?;
    let mut phases = op["spec"]["phases"].clone();
    for p in phases.as_array_mut().context("spec.phases")? {
        if p["name"] == "Syncing" {
            p["shadow"] = json!({"file": {"path": file, "sha256": hex}});
        }
    }
    api.patch(
        "autoroute",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"phases": phases}})),
    )
    .await?;
    let digest = format!("sha256:{hex}");
    wait_shadow_counts(client, &digest, |_| true).await?;
    Ok(digest)
}

/// Until `status.shadows` reports the Syncing shadow `digest` with counts `accept`s.
async fn wait_shadow_counts(
    client: &Client,
    digest: &str,
    accept: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    wait_for(
        &format!("status.shadows of autoroute to report {digest}"),
        T,
        || async {
            let op = must(
                get(client, OPERATOR.0, OPERATOR.1, None, "autoroute").await?,
                "WasmOperator autoroute",
            )?;
            let syncing = op["status"]["shadows"]
                .as_array()
                .and_then(|s| s.iter().find(|c| c["phase"] == "Syncing"))
                .cloned();
            Ok(syncing.filter(|c| c["module"] == digest && accept(c)))
        },
    )
    .await
}

/// `wasmpilot_shadow_decisions_total{operator="autoroute",phase="Syncing",result=…}`.
fn shadow_metric(addr: &str, result: &str) -> anyhow::Result<f64> {
    let text = http_get(addr, "/metrics")?;
    let prefix = format!(
        "wasmpilot_shadow_decisions_total{{operator=\"autoroute\",phase=\"Syncing\",result=\"{result}\"}} "
    );
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(0.0))
}

/// The recorded decisions about resources of namespace `ns`, oldest first, as written.
fn recorded_lines(records: &Path, ns: &str) -> anyhow::Result<Vec<String>> {
    let mut files: Vec<_> = std::fs::read_dir(records)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(&file)?.lines() {
            // The writer may be in the middle of the last line.
            let Ok(case) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if case["source"] == "recorded"
                && case["resource"]
                    .as_str()
                    .is_some_and(|r| r.starts_with(&format!("{ns}/")))
            {
                lines.push(line.to_string());
            }
        }
    }
    Ok(lines)
}

/// Whether a recorded case is a Syncing decision with a Service among its outputs.
fn routes_a_service(line: &str) -> bool {
    let case: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    case["request"]["phase"] == "Syncing"
        && case["result"]["outputs"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["kind"] == "Service"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
