//! The AutoRoute example's real components run offline through the host's own definition,
//! input gathering, sandbox and output checks (`wasmpilot run-phase`), no cluster involved.

mod common;

use serde_json::Value;
use std::process::Command;
use wasmpilot::offline::{run_phase, OfflineRun};
use wasmpilot::sandbox::SandboxLimits;

fn autoroute_run(phase: &str) -> OfflineRun {
    let root = common::repo_root();
    OfflineRun {
        operator: root.join("examples/autoroute/operator.yaml"),
        module_dir: common::wasm_dir(),
        resource: root.join("examples/autoroute/sample.yaml"),
        objects: Some(root.join("examples/autoroute/sample.yaml")),
        phase: Some(phase.into()),
        now: Some("2026-11-21T12:00:00Z".into()),
    }
}

#[tokio::test]
async fn syncing_routes_the_selected_deployments() {
    let out = run_phase(&autoroute_run("Syncing"), SandboxLimits::default())
        .await
        .expect("Syncing runs");
    assert_eq!(out.next_phase, "Ready");
    assert!(out.module.starts_with("sha256:"));
    assert_eq!(
        out.status_info.as_ref().unwrap()["syncedDeployments"],
        serde_json::json!(["backend", "frontend"])
    );
    let names = |kind: &str| -> Vec<String> {
        let mut v: Vec<String> = out
            .outputs
            .iter()
            .filter(|o| o["kind"] == kind)
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("Service"), ["backend", "frontend"]);
    assert_eq!(
        names("VirtualService"),
        ["backend.example", "frontend.example"]
    );
    assert_eq!(names("Gateway"), ["example"]);
    for o in &out.outputs {
        assert_eq!(
            o["metadata"]["namespace"], "default",
            "outputs land in the resource's namespace"
        );
        assert_eq!(o["metadata"]["ownerReferences"][0]["kind"], "AutoRoute");
        assert_eq!(o["metadata"]["ownerReferences"][0]["controller"], true);
    }
}

#[tokio::test]
async fn initializing_and_ready_decide_without_outputs() {
    let init = run_phase(&autoroute_run("Initializing"), SandboxLimits::default())
        .await
        .unwrap();
    assert_eq!(init.next_phase, "Syncing");
    assert!(init.outputs.is_empty());
    // The sample has no status yet, so Ready sees a difference and goes back to Syncing.
    let ready = run_phase(&autoroute_run("Ready"), SandboxLimits::default())
        .await
        .unwrap();
    assert_eq!(ready.next_phase, "Syncing");
}

#[test]
fn run_phase_cli_prints_the_decision_as_yaml() {
    let root = common::repo_root();
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args([
            "run-phase",
            "--phase",
            "Syncing",
            "--now",
            "2026-11-21T12:00:00Z",
        ])
        .arg("--operator")
        .arg(root.join("examples/autoroute/operator.yaml"))
        .arg("--module-dir")
        .arg(common::wasm_dir())
        .arg("--resource")
        .arg(root.join("examples/autoroute/sample.yaml"))
        .arg("--objects")
        .arg(root.join("examples/autoroute/sample.yaml"))
        .output()
        .expect("running wasmpilot run-phase");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_yaml::from_slice(&out.stdout).expect("YAML on stdout");
    assert_eq!(v["nextPhase"], "Ready");
    assert_eq!(v["outputs"].as_array().map(Vec::len), Some(5));
}

#[test]
fn run_phase_cli_explains_a_missing_module() {
    let root = common::repo_root();
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args([
            "run-phase",
            "--phase",
            "Syncing",
            "--module-dir",
            "/nonexistent",
        ])
        .arg("--operator")
        .arg(root.join("examples/autoroute/operator.yaml"))
        .arg("--resource")
        .arg(root.join("examples/autoroute/sample.yaml"))
        .output()
        .expect("running wasmpilot run-phase");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/autoroute_syncing.wasm"), "{err}");
}

#[tokio::test]
async fn a_wrong_pin_says_how_to_repin() {
    let root = common::repo_root();
    let manifest = std::fs::read_to_string(root.join("examples/autoroute/operator.yaml")).unwrap();
    let zeros = "0".repeat(64);
    let pinned = manifest.replace(
        "path: autoroute_syncing.wasm",
        &format!("path: autoroute_syncing.wasm\n        sha256: {zeros}"),
    );
    assert_ne!(pinned, manifest, "the example names autoroute_syncing.wasm");
    let dir = tempfile::tempdir().unwrap();
    let operator = dir.path().join("operator.yaml");
    std::fs::write(&operator, pinned).unwrap();
    let run = OfflineRun {
        operator,
        ..autoroute_run("Syncing")
    };
    let e = run_phase(&run, SandboxLimits::default())
        .await
        .expect_err("the pin does not match");
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!(
            "sha256 mismatch: the reference pins sha256:{zeros}"
        )),
        "{msg}"
    );
    assert!(
        msg.contains("pin the sha256 `wasmpilot build`/`push` printed (or redeploy with `wasmpilot deploy <dir>`)"),
        "{msg}"
    );
}
