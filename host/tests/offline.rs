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
        crds: Vec::new(),
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

/// A Scripted operator in a temporary directory whose Start phase may output `outputs` (kinds),
/// with `crds` written to its crds/ directory; returns the directory.
fn scripted_operator(outputs: &[(&str, &str)], crds: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let outputs: String = outputs
        .iter()
        .map(|(v, k)| format!("        - {{apiVersion: {v}, kind: {k}}}\n"))
        .collect();
    // Allowed by the admin: what is checked here is the decision's refusal.
    let manifest = format!(
        "apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {{name: scripted}}
spec:
  resource: {{apiVersion: test.wasmpilot.io/v1, kind: Scripted}}
  allowSensitiveKinds:
{outputs}  phases:
    - name: Start
      initial: true
      module: {{file: {{path: wasmpilot_test_scripted.wasm}}}}
      outputs:
{outputs}      next: [Done]
    - name: Done
      final: true
"
    );
    std::fs::write(dir.path().join("operator.yaml"), manifest).unwrap();
    std::fs::create_dir(dir.path().join("crds")).unwrap();
    std::fs::write(dir.path().join("crds/extra.yaml"), crds).unwrap();
    dir
}

/// Writes a Scripted resource in namespace `default` whose Start step is `step`.
fn scripted_resource(dir: &std::path::Path, step: Value) -> std::path::PathBuf {
    let resource = serde_json::json!({
        "apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted",
        "metadata": {"name": "s", "namespace": "default", "uid": "u-1"},
        "spec": {"phases": {"Start": step}}
    });
    let path = dir.join("resource.yaml");
    std::fs::write(&path, serde_yaml::to_string(&resource).unwrap()).unwrap();
    path
}

fn wasmpilot(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .output()
        .expect("running wasmpilot")
}

fn run_phase_cli(dir: &std::path::Path, resource: &std::path::Path) -> std::process::Output {
    run_phase_cli_with(dir, resource, &[])
}

/// `run-phase` of the operator in `dir` with the test components, plus `extra` arguments.
fn run_phase_cli_with(
    dir: &std::path::Path,
    resource: &std::path::Path,
    extra: &[&std::ffi::OsStr],
) -> std::process::Output {
    let operator = dir.join("operator.yaml");
    let wasm = common::wasm_dir();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "run-phase".as_ref(),
        "--operator".as_ref(),
        operator.as_os_str(),
        "--module-dir".as_ref(),
        wasm.as_os_str(),
        "--resource".as_ref(),
        resource.as_os_str(),
    ];
    args.extend_from_slice(extra);
    wasmpilot(&args)
}

const TENANT_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: tenants.example.io}
spec:
  group: example.io
  scope: Cluster
  names: {plural: tenants, kind: Tenant}
  versions: [{name: v1, served: true, storage: true}]
";

/// `run-phase` and `simulate` refuse a cluster-scoped output of a namespaced resource as the
/// controller does: a Kubernetes kind (ClusterRole, from the built-in table) and a custom one
/// (from the CRD in the operator's crds/); a namespaced ConfigMap in the same setup passes.
#[test]
fn offline_tools_refuse_cluster_scoped_outputs_like_the_host() {
    let dir = scripted_operator(
        &[
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("example.io/v1", "Tenant"),
            ("v1", "ConfigMap"),
        ],
        TENANT_CRD,
    );
    for (api_version, kind) in [
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("example.io/v1", "Tenant"),
    ] {
        let step = serde_json::json!({"mode": "ok", "next": "Done", "outputs": [
            {"apiVersion": api_version, "kind": kind, "metadata": {"name": "admin"}}
        ]});
        let resource = scripted_resource(dir.path(), step);
        let out = run_phase_cli(dir.path(), &resource);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{kind} was accepted: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            err.contains(&format!(
                "output #0 ({kind} admin): cluster-scoped outputs of a namespaced resource are not allowed"
            )),
            "{err}"
        );
        let wasm = common::wasm_dir();
        let sim = wasmpilot(&[
            "simulate".as_ref(),
            dir.path().as_os_str(),
            "--module-dir".as_ref(),
            wasm.as_os_str(),
            "--resource".as_ref(),
            resource.as_os_str(),
        ]);
        let err = String::from_utf8_lossy(&sim.stderr);
        assert!(!sim.status.success(), "simulate accepted {kind}");
        assert!(
            err.contains("cluster-scoped outputs of a namespaced resource are not allowed"),
            "{err}"
        );
    }
    // Premise: the same operator and worker pass with a namespaced kind.
    let step = serde_json::json!({"mode": "ok", "next": "Done", "outputs": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "admin"}}
    ]});
    let resource = scripted_resource(dir.path(), step);
    let out = run_phase_cli(dir.path(), &resource);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A kind whose scope is not known offline is named, with how to make the check exact.
#[test]
fn offline_tools_name_kinds_of_unknown_scope() {
    let dir = scripted_operator(&[("example.io/v1", "Gadget")], "");
    let step = serde_json::json!({"mode": "ok", "next": "Done", "outputs": [
        {"apiVersion": "example.io/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    ]});
    let resource = scripted_resource(dir.path(), step);
    let out = run_phase_cli(dir.path(), &resource);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("whether example.io/v1 Gadget is namespaced is not known offline"),
        "{err}"
    );
    assert!(err.contains("pass --crds DIR"), "{err}");
}

/// Offline calls end at their deadline like the controller's: a guest sleeping 300 s is stopped
/// at the host's default 2 s deadline, with the same message.
#[test]
fn offline_calls_end_at_their_deadline() {
    let dir = scripted_operator(&[("v1", "ConfigMap")], "");
    let resource = scripted_resource(
        dir.path(),
        serde_json::json!({"mode": "sleep", "count": 300_000}),
    );
    let started = std::time::Instant::now();
    let out = run_phase_cli(dir.path(), &resource);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the worker exceeded its 2s deadline"), "{err}");
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
}

/// A 16 MiB next phase or fatal message reaches the user bounded, saying it was cut.
#[test]
fn offline_errors_bound_worker_text() {
    let dir = scripted_operator(&[("v1", "ConfigMap")], "");
    for step in [
        serde_json::json!({"mode": "bignext", "count": 16 << 20}),
        serde_json::json!({"mode": "bigfatal", "count": 16 << 20}),
    ] {
        let resource = scripted_resource(dir.path(), step.clone());
        let out = run_phase_cli(dir.path(), &resource);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.len() < 8 << 10, "{step}: {} bytes of error", err.len());
        assert!(err.contains("more bytes truncated"), "{step}: {err}");
    }
}

/// Inputs selected by the host: `matchExpressions` declared on the input and a label selector
/// read from the resource (`selectorFrom`); the worker gets only the matching objects. An
/// invalid selector in the resource is the host's `InvalidSelector` error naming the field.
#[test]
fn the_host_selects_inputs_by_expressions_and_by_the_resources_selector() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.yaml"),
        "apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: scripted}
spec:
  resource: {apiVersion: test.wasmpilot.io/v1, kind: Scripted}
  phases:
    - name: Start
      initial: true
      module: {file: {path: wasmpilot_test_scripted.wasm}}
      inputs:
        - name: picked
          apiVersion: v1
          kind: ConfigMap
          matchExpressions: [{key: retired, operator: DoesNotExist}]
          selectorFrom: spec.pick
        - name: all
          apiVersion: v1
          kind: ConfigMap
",
    )
    .unwrap();
    let config_map = |name: &str, labels: Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": labels}})
    };
    let objects: Vec<String> = [
        config_map("web-a", serde_json::json!({"tier": "web"})),
        config_map(
            "web-b",
            serde_json::json!({"tier": "web", "track": "canary"}),
        ),
        config_map(
            "web-old",
            serde_json::json!({"tier": "web", "retired": "yes"}),
        ),
        config_map("db", serde_json::json!({"tier": "db"})),
    ]
    .iter()
    .map(|o| serde_yaml::to_string(o).unwrap())
    .collect();
    let objects_path = dir.path().join("objects.yaml");
    std::fs::write(&objects_path, objects.join("---\n")).unwrap();
    let run = |pick: Value| {
        let resource = serde_json::json!({
            "apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted",
            "metadata": {"name": "s", "namespace": "default", "uid": "u-1"},
            "spec": {"pick": pick, "phases": {"Start": {"mode": "ok", "countInputs": true}}}
        });
        let path = dir.path().join("resource.yaml");
        std::fs::write(&path, serde_yaml::to_string(&resource).unwrap()).unwrap();
        run_phase_cli_with(
            dir.path(),
            &path,
            &["--objects".as_ref(), objects_path.as_os_str()],
        )
    };
    let out = run(serde_json::json!({
        "matchLabels": {"tier": "web"},
        "matchExpressions": [{"key": "track", "operator": "NotIn", "values": ["canary"]}]
    }));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decision: Value = serde_yaml::from_str(&text).unwrap();
    // web-a only: web-b is canary, web-old retired (the input's own expression), db not web.
    assert_eq!(decision["statusInfo"]["inputCounts"]["picked"], 1, "{text}");
    assert_eq!(decision["statusInfo"]["inputCounts"]["all"], 4, "{text}");

    let out = run(serde_json::json!({
        "matchExpressions": [{"key": "tier", "operator": "Equals", "values": ["web"]}]
    }));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(r#"an input selector of phase Start is invalid: spec.pick.matchExpressions[0].operator: "Equals" is not In, NotIn, Exists or DoesNotExist"#),
        "{err}"
    );
    assert_eq!(
        err.matches("is not In, NotIn").count(),
        1,
        "the problem is said once: {err}"
    );
    // A value Kubernetes would not accept as a label's (a space) is invalid too, not a
    // selector that quietly matches nothing.
    let out = run(serde_json::json!({"matchLabels": {"tier": "web server"}}));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(
            r#"spec.pick.matchLabels: "web server" (key "tier") is not a valid label value"#
        ),
        "{err}"
    );
    let out = run(Value::Null);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.pick: is not set: input picked selects by the label selector there"),
        "{err}"
    );
}

fn myownshell_run() -> OfflineRun {
    let root = common::repo_root();
    OfflineRun {
        operator: root.join("examples/myownshell/operator.yaml"),
        module_dir: common::wasm_dir(),
        resource: root.join("examples/myownshell/sample.yaml"),
        objects: None,
        phase: None,
        now: Some("2026-11-21T12:00:00Z".into()),
        crds: Vec::new(),
    }
}

#[tokio::test]
async fn the_finalizer_runs_offline_as_on_deletion() {
    let out = wasmpilot::offline::run_finalizer(&myownshell_run(), SandboxLimits::default())
        .await
        .expect("the finalizer runs");
    assert_eq!(out.phase, "finalizer");
    assert!(out.module.starts_with("sha256:"), "{}", out.module);
    assert!(out.done, "MyOwnShell's finalizer lets the deletion proceed");
    assert_eq!(out.requeue_after_ms, None, "done: nothing to run again");
    assert_eq!(
        out.status_info.as_ref().map(|s| s["finalizedAt"].clone()),
        Some(serde_json::json!("2026-11-21T12:00:00Z")),
        "the finalizer's status info, with the clock it was handed"
    );
}

#[tokio::test]
async fn an_operator_without_a_finalizer_says_so() {
    let e = wasmpilot::offline::run_finalizer(&autoroute_run("Syncing"), SandboxLimits::default())
        .await
        .expect_err("AutoRoute has no finalizer");
    assert!(
        format!("{e:#}").contains("declares no finalizer (spec.finalizer)"),
        "{e:#}"
    );
}

#[test]
fn run_phase_cli_runs_the_finalizer() {
    let root = common::repo_root();
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["run-phase", "--finalizer", "--now", "2026-11-21T12:00:00Z"])
        .arg("--operator")
        .arg(root.join("examples/myownshell/operator.yaml"))
        .arg("--module-dir")
        .arg(common::wasm_dir())
        .arg("--resource")
        .arg(root.join("examples/myownshell/sample.yaml"))
        .output()
        .expect("running wasmpilot run-phase --finalizer");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_yaml::from_slice(&out.stdout).expect("YAML on stdout");
    assert_eq!(v["phase"], "finalizer");
    assert_eq!(v["done"], true);
    assert_eq!(v["statusInfo"]["finalizedAt"], "2026-11-21T12:00:00Z");
}

/// A kubeconfig in `dir` naming a port nothing listens on: a command that contacts the cluster
/// fails there, and says so.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
         current-context: x\n",
    )
    .unwrap();
    kubeconfig
}

/// `wasmpilot deploy` validates the definition as the host will before it builds, stores or
/// applies anything: an input selector Kubernetes would refuse (a label key with a space) is
/// named by field, and no cluster is contacted (the kubeconfig names a port nothing listens on).
#[test]
fn deploy_refuses_an_invalid_definition_before_touching_the_cluster() {
    let root = common::repo_root();
    let text = std::fs::read_to_string(root.join("examples/autoroute/operator.yaml")).unwrap();
    let mut op: Value = serde_yaml::from_str(&text).unwrap();
    let phases = op["spec"]["phases"].as_array_mut().unwrap();
    let (index, phase) = phases
        .iter_mut()
        .enumerate()
        .find(|(_, p)| p["inputs"].as_array().is_some_and(|i| !i.is_empty()))
        .expect("the example has a phase with inputs");
    phase["inputs"][0]["matchExpressions"] =
        serde_json::json!([{"key": "app name", "operator": "Exists"}]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.yaml"),
        serde_yaml::to_string(&op).unwrap(),
    )
    .unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build"])
        .arg(dir.path())
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("running wasmpilot");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "spec.phases[{index}].inputs[0].matchExpressions[0].key: \"app name\" is not a valid label key"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("applying")
            && !stderr.contains("storing")
            && !stderr.contains("127.0.0.1"),
        "nothing was applied or stored: {stderr}"
    );
}

/// `wasmpilot rbac` prints no grants for a definition the host would refuse: here a name longer
/// than a label value, which its grants' labels could not even carry.
#[test]
fn rbac_refuses_a_definition_the_host_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("operator.yaml");
    let name = format!("quill-{}", "q".repeat(60));
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {{name: {name}}}
spec:
  resource: {{apiVersion: test.wasmpilot.io/v1, kind: Probe}}
  phases:
    - {{name: Start, initial: true, module: {{file: {{path: x.wasm}}}}}}
"
        ),
    )
    .unwrap();
    // With no cluster to reach, so that asking one would show as a NOTE.
    let rbac_without_cluster = |manifest: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
            .args(["rbac".as_ref(), manifest.as_os_str()])
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("running wasmpilot")
    };
    let out = rbac_without_cluster(&manifest);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "grants printed: {stderr}");
    assert!(
        stderr.contains("the host would refuse it") && stderr.contains("metadata.name"),
        "{stderr}"
    );
    // Refused before any cluster was looked for: no note about the cluster.
    assert!(!stderr.contains("NOTE"), "{stderr}");
    // The same with a valid name looks for one, and says it found none.
    let valid = dir.path().join("valid.yaml");
    std::fs::write(
        &valid,
        std::fs::read_to_string(&manifest)
            .unwrap()
            .replace(&name, "quill"),
    )
    .unwrap();
    let out = rbac_without_cluster(&valid);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("NOTE: no cluster to ask"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("# NOTE: no cluster to ask"),
        "the note atop the grants too"
    );
}

/// `wasmpilot rbac` gives the operator its own account and role, gives the host only reads and
/// the right to act as that account, and names sensitive kinds (and an output of its own
/// resource kind) in a warning an admin sees.
#[test]
fn rbac_prints_the_operators_own_account_and_warns_of_sensitive_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("operator.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: reader}
spec:
  resource: {apiVersion: test.wasmpilot.io/v1, kind: Probe}
  allowSensitiveKinds: [{apiVersion: v1, kind: Secret}, {apiVersion: test.wasmpilot.io/v1, kind: Probe}]
  phases:
    - name: Start
      initial: true
      module: {file: {path: x.wasm}}
      inputs: [{name: s, apiVersion: v1, kind: Secret}]
      outputs: [{apiVersion: v1, kind: ConfigMap}, {apiVersion: test.wasmpilot.io/v1, kind: Probe}]
",
    )
    .unwrap();
    let out = wasmpilot(&["rbac".as_ref(), manifest.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARNING: operator reader is granted sensitive kinds cluster-wide: v1 Secret (spec.phases[0].inputs[0]), test.wasmpilot.io/v1 Probe (spec.phases[0].outputs[1])"),
        "{stderr}"
    );
    let docs: Vec<Value> =
        wasmpilot::offline::parse_documents(&String::from_utf8_lossy(&out.stdout))
            .expect("YAML documents");
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} in {docs:#?}"))
    };
    find("ServiceAccount", "op-reader");
    let binding = find("ClusterRoleBinding", "wasmpilot-operator-reader");
    assert_eq!(binding["subjects"][0]["name"], "op-reader");
    let host_reads = find("ClusterRole", "wasmpilot-host-reads-reader");
    for rule in host_reads["rules"].as_array().unwrap() {
        assert_eq!(rule["verbs"], serde_json::json!(["get", "list", "watch"]));
    }
    let act_as = find("Role", "wasmpilot-act-as-reader");
    assert_eq!(
        act_as["rules"][0]["resourceNames"],
        serde_json::json!(["op-reader"])
    );
}

/// `wasmpilot deploy` refuses a definition naming an address the host would not fetch from
/// (here the cloud metadata address as its Prometheus, and a loopback OCI registry), in the
/// host's own words, before the cluster is asked; its `--allow-fetch-from` allows as the
/// host's does.
#[test]
fn deploy_refuses_a_literal_forbidden_address_as_the_host_would() {
    let root = common::repo_root();
    let text = std::fs::read_to_string(root.join("examples/autoroute/operator.yaml")).unwrap();
    let mut op: Value = serde_yaml::from_str(&text).unwrap();
    op["spec"]["prometheus"] =
        serde_json::json!({"url": "http://169.254.169.254/latest/meta-data"});
    op["spec"]["phases"][0]["module"] = serde_json::json!({"oci": {"reference": "127.0.0.1:5000/team/worker:v1", "insecure": true}});
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.yaml"),
        serde_yaml::to_string(&op).unwrap(),
    )
    .unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let deploy = |allow: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
            .args(["deploy", "--no-build"])
            .args(allow)
            .arg(dir.path())
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("WASMPILOT_ALLOW_FETCH_FROM")
            .output()
            .expect("running wasmpilot");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = deploy(&[]);
    assert!(
        stderr.contains(
            "spec.prometheus.url: a link-local address 169.254.169.254, which the host does not fetch from for an operator (an admin allows it with `wasmpilot run --allow-fetch-from 169.254.169.254`)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.phases[0].module.oci.reference: a loopback address 127.0.0.1, which the host does not fetch from"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("applying") && !stderr.contains("storing"),
        "{stderr}"
    );
    // Allowed as the host would be run: the addresses pass (deploy stops later, at the
    // unbuilt components).
    let stderr = deploy(&["--allow-fetch-from", "169.254.169.254,127.0.0.0/8"]);
    assert!(!stderr.contains("does not fetch from"), "{stderr}");
}
