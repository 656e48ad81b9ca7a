//! The authoring commands offline, with the AutoRoute example's real components:
//! `wasmpilot simulate` against golden files, `wasmpilot graph`, and their errors.
//! Regenerate the golden files with `WASMPILOT_UPDATE_GOLDEN=1 cargo test -p wasmpilot --test authoring`.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn wasmpilot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .current_dir(common::repo_root())
        .output()
        .expect("running wasmpilot")
}

/// Component digests change with every toolchain or SDK change; the golden files name none.
fn without_digests(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("sha256:") {
        out.push_str(&rest[..i + 7]);
        rest = &rest[i + 7..];
        let hex = rest.bytes().take_while(|b| b.is_ascii_hexdigit()).count();
        if hex == 64 {
            out.push_str("<digest>");
            rest = &rest[64..];
        }
    }
    out.push_str(rest);
    out
}

fn golden(name: &str, actual: &str) {
    let path: PathBuf = common::repo_root().join("host/tests/golden").join(name);
    if std::env::var_os("WASMPILOT_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("writing the golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (e, a))| e != a)
            .take(5)
            .map(|(i, (e, a))| format!("line {}:\n  expected: {e}\n  actual:   {a}", i + 1))
            .collect();
        panic!(
            "{} differs from this run ({} vs {} lines):\n{}\n--- actual output ---\n{actual}\nIf the change is intended: WASMPILOT_UPDATE_GOLDEN=1 cargo test -p wasmpilot --test authoring",
            path.display(),
            expected.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}

fn simulate(resource: &str, objects: &str, extra: &[&str]) -> Output {
    let wasm_dir = common::wasm_dir();
    let mut args = vec![
        "simulate",
        "examples/autoroute",
        "--module-dir",
        wasm_dir.to_str().expect("utf-8 path"),
        "--resource",
        resource,
        "--objects",
        objects,
    ];
    args.extend_from_slice(extra);
    wasmpilot(&args)
}

#[test]
fn simulate_the_sample_autoroute_to_ready() {
    let out = simulate(
        "examples/autoroute/sample.yaml",
        "examples/autoroute/sample.yaml",
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    golden("simulate-autoroute-sample.yaml", &without_digests(&stdout));
    // The same run twice gives the same bytes (digests included).
    let again = simulate(
        "examples/autoroute/sample.yaml",
        "examples/autoroute/sample.yaml",
        &[],
    );
    assert_eq!(String::from_utf8_lossy(&again.stdout), stdout);
}

#[test]
fn simulate_drift_back_to_syncing_prunes_what_is_no_longer_returned() {
    let fixture = "host/tests/golden/autoroute-drift.yaml";
    let out = simulate(fixture, fixture, &["--now", "2026-11-21T12:00:00Z"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("deleted VirtualService default/retired.example (no longer returned)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("deleted VirtualService default/handmade"),
        "{stdout}"
    );
    golden("simulate-autoroute-drift.yaml", &without_digests(&stdout));
}

#[test]
fn simulate_stops_at_the_step_limit_and_explains_missing_components() {
    let out = simulate(
        "examples/autoroute/sample.yaml",
        "examples/autoroute/sample.yaml",
        &["--steps", "1"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.contains("nextPhase: Syncing"), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .ends_with("# stop: 1 steps ran (raise --steps to see more); phase Syncing"),
        "{stdout}"
    );

    let out = wasmpilot(&[
        "simulate",
        "examples/autoroute/operator.yaml",
        "--module-dir",
        "/nonexistent",
        "--resource",
        "examples/autoroute/sample.yaml",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("autoroute_initializing.wasm, autoroute_syncing.wasm, autoroute_ready.wasm not found in /nonexistent: build the components first (wasmpilot build examples/autoroute)"),
        "{err}"
    );
}

#[test]
fn simulate_reports_a_refused_transition_like_the_host() {
    // Syncing may only stay: the worker's move to Ready is refused, as the host would.
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest =
        std::fs::read_to_string(common::repo_root().join("examples/autoroute/operator.yaml"))
            .expect("operator.yaml")
            .replace(
                "        path: autoroute_syncing.wasm\n",
                "        path: autoroute_syncing.wasm\n    next: [Initializing]\n",
            );
    let op = dir.path().join("operator.yaml");
    std::fs::write(&op, manifest).expect("writing operator.yaml");
    let wasm_dir = common::wasm_dir();
    let out = wasmpilot(&[
        "simulate",
        op.to_str().expect("utf-8"),
        "--module-dir",
        wasm_dir.to_str().expect("utf-8"),
        "--resource",
        "examples/autoroute/sample.yaml",
        "--objects",
        "examples/autoroute/sample.yaml",
    ]);
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("error: worker for phase Syncing returned next phase \"Ready\", but Syncing may only move to Initializing"),
        "{stdout}"
    );
    assert!(err.contains("step 2 (Syncing) failed"), "{err}");
    assert!(err.contains("run wasmpilot build again"), "{err}");
}

#[test]
fn graph_prints_mermaid() {
    let out = wasmpilot(&["graph", "examples/myownshell/operator.yaml"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("stateDiagram-v2\n    [*] --> Initializing\n"),
        "{text}"
    );
    assert!(text.contains("finalizer worker runs"), "{text}");

    // Errors say what to do next.
    let out = wasmpilot(&["graph", "no/such/operator.yaml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no WasmOperator manifest at no/such/operator.yaml: pass the operator directory (holding operator.yaml) or the manifest's path"),
        "{stderr}"
    );
    assert!(stderr.contains("reading no/such/operator.yaml"), "{stderr}");
    let out = wasmpilot(&["graph", "examples/autoroute/sample.yaml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("examples/autoroute/sample.yaml is not a WasmOperator: fix the field named below (compare examples/autoroute/operator.yaml, or scaffold a project with `wasmpilot init <dir>`)"),
        "{stderr}"
    );
}

fn simulate_scripted(spec: &str, steps: &str) -> (bool, String) {
    let (ok, stdout, _) = simulate_scripted_with(
        "host/tests/manifests/scripted.yaml",
        spec,
        &["--steps", steps],
    );
    (ok, stdout)
}

/// Simulates a Scripted resource with `spec` under `operator`; returns (success, stdout, stderr).
fn simulate_scripted_with(operator: &str, spec: &str, extra: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let resource = dir.path().join("scripted.yaml");
    std::fs::write(
        &resource,
        format!("apiVersion: test.wasmpilot.io/v1\nkind: Scripted\nmetadata: {{name: s, namespace: default}}\nspec: {spec}\n"),
    )
    .expect("writing the resource");
    let wasm_dir = common::wasm_dir();
    let mut args = vec![
        "simulate",
        operator,
        "--module-dir",
        wasm_dir.to_str().expect("utf-8"),
        "--resource",
        resource.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let out = wasmpilot(&args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_virtual_clock_follows_requeue_after_and_final_phases_stop() {
    // Staying with a requeue-after: the clock moves by the worker's delay at every step, the
    // first's status write included (the host's own writes wake nothing), as the host runs it.
    let (ok, stdout) = simulate_scripted(
        "{phases: {Start: {mode: ok, requeueAfterMs: 15000, statusInfo: {waiting: true}}}}",
        "4",
    );
    assert!(ok, "{stdout}");
    let times: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("time: "))
        .collect();
    assert_eq!(
        times,
        [
            "2025-01-01T00:00:00Z",
            "2025-01-01T00:00:15Z",
            "2025-01-01T00:00:30Z",
            "2025-01-01T00:00:45Z"
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("then: 'reconcile again after 15s (requeue-after), at 2025-01-01T00:00:15Z; the status (conditions, moduleDigest, observedGeneration, phase, waiting) changed, which wakes nothing: the host''s own writes'"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("then: reconcile again after 15s (requeue-after), at 2025-01-01T00:00:30Z\n"),
        "{stdout}"
    );
    // A shorter ask is raised to the host's 1 s, as the host raises it.
    let (ok, stdout) = simulate_scripted("{phases: {Start: {mode: ok, requeueAfterMs: 0}}}", "2");
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("reconcile again after 1s (requeue-after), at 2025-01-01T00:00:01Z"),
        "{stdout}"
    );

    // A status changed at every call with no requeue-after: the host runs it again at the
    // resync interval, not at once.
    let (ok, stdout) = simulate_scripted(
        "{phases: {Start: {mode: ok, statusInfo: {waiting: true}}}}",
        "3",
    );
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains(
            "reconcile again after 1m (resync interval), at 2025-01-01T00:01:00Z; the status"
        ),
        "{stdout}"
    );

    // Moving to a final phase: the host runs no worker there.
    let (ok, stdout) = simulate_scripted("{phases: {Start: {mode: ok, next: Done}}}", "5");
    assert!(ok, "{stdout}");
    assert_eq!(stdout.matches("\nstep: ").count(), 1, "{stdout}");
    assert!(
        stdout
            .trim_end()
            .ends_with("# stop: Done is final; the host runs no worker until the spec changes"),
        "{stdout}"
    );

    // A fatal worker error ends the run with the host's message.
    let (ok, stdout) = simulate_scripted("{phases: {Start: {mode: fatal, message: no way}}}", "5");
    assert!(!ok);
    assert!(
        stdout.contains("the worker returned a fatal error: no way"),
        "{stdout}"
    );
}

#[test]
fn metric_queries_get_the_samples_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let operator = dir.path().join("operator.yaml");
    std::fs::write(
        &operator,
        "apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: scripted}
spec:
  resource: {apiVersion: test.wasmpilot.io/v1, kind: Scripted}
  phases:
  - name: Start
    initial: true
    module: {file: {path: wasmpilot_test_scripted.wasm}}
    queries:
    - {name: rate, query: 'sum(rate(requests_total[1m]))'}
    - {name: errors, query: 'sum(errors_total)'}
",
    )
    .expect("writing operator.yaml");
    let samples = dir.path().join("samples.yaml");
    std::fs::write(&samples, "rate: [0.5, {labels: {pod: a}, value: 0.7}]\n").expect("samples");
    let (ok, stdout, stderr) = simulate_scripted_with(
        operator.to_str().expect("utf-8"),
        "{phases: {Start: {mode: ok, countInputs: true}}}",
        &[
            "--samples",
            samples.to_str().expect("utf-8"),
            "--steps",
            "1",
        ],
    );
    assert!(ok, "{stderr}\n{stdout}");
    assert!(
        stdout.contains("  inputCounts:\n    errors: 0\n    rate: 2\n"),
        "{stdout}"
    );
    assert!(
        stderr.contains("no --samples for query errors of phase Start: it gets no samples"),
        "{stderr}"
    );

    std::fs::write(&samples, "latency: 3\n").expect("samples");
    let (ok, _, stderr) = simulate_scripted_with(
        operator.to_str().expect("utf-8"),
        "{}",
        &["--samples", samples.to_str().expect("utf-8")],
    );
    assert!(!ok);
    assert!(
        stderr.contains("\"latency\" is not a query of scripted (queries: errors, rate)"),
        "{stderr}"
    );
}

#[test]
fn simulate_delete_runs_the_finalizer_after_the_phases() {
    let wasm_dir = common::wasm_dir();
    let out = wasmpilot(&[
        "simulate",
        "examples/myownshell",
        "--module-dir",
        wasm_dir.to_str().expect("utf-8 path"),
        "--resource",
        "examples/myownshell/sample.yaml",
        "--now",
        "2026-11-21T12:00:00Z",
        "--delete",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Ready writes its status once and converges at the next resync (1m), when it is deleted.
    let deleted = stdout
        .find("# deleted at 2026-11-21T12:01:00Z")
        .unwrap_or_else(|| panic!("no deletion after the phases:\n{stdout}"));
    let after = &stdout[deleted..];
    assert!(after.contains("phase: finalizer"), "{after}");
    assert!(
        after.contains("finalizedAt: 2026-11-21T12:01:00Z"),
        "the finalizer's status info, merged into the resource: {after}"
    );
    assert!(
        after.contains("stop: finalizer done; the host removes its finalizer"),
        "{after}"
    );
    assert!(
        stdout[..deleted].contains("phase: Ready"),
        "the phases ran first: {stdout}"
    );

    // An operator without a finalizer: the resource goes at once.
    let out = simulate(
        "examples/autoroute/sample.yaml",
        "examples/autoroute/sample.yaml",
        &["--delete"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("# deleted: autoroute declares no finalizer"),
        "{stdout}"
    );
}
