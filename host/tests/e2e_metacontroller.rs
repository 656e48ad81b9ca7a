//! Metacontroller's example controllers ported to wasmpilot (`examples/metacontroller/`), each
//! checked by its own `test.sh` — the original's kubectl checks, the install step replaced by
//! `../install.sh` (CRD, `wasmpilot deploy`, the admin's grant) — against a host that requires
//! grants, as the shipped Deployment does; and a hook written for Metacontroller, imported with
//! `wasmpilot import metacontroller`, deployed and run unchanged (issue 69).

mod common;

use anyhow::Context;
use common::cluster::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Each example's budget, as Metacontroller's examples/test.sh gives each.
const BUDGET: Duration = Duration::from_secs(300);

/// The ported examples whose checks need no pods.
const EXAMPLES: [&str; 6] = [
    "update-strategy",
    "configmap-list-v2",
    "namespace-list-v2",
    "configmappropagation",
    "secretpropagation",
    "globalconfigmap",
];

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn metacontroller_examples_pass_their_own_checks() {
    let client = client().await;
    let mut host = Host::start(
        &["--require-operator-grants"],
        "wasmpilot-e2e-metacontroller",
    );
    let mut failures = Vec::new();
    for example in EXAMPLES {
        let (passed, took, output) = run_checks(example);
        eprintln!(
            "{example}: {} in {:.1} s",
            if passed { "passed" } else { "FAILED" },
            took.as_secs_f64()
        );
        if !passed {
            failures.push(format!("{example}:\n{output}"));
        }
    }
    let imported = imported_hook_runs_on_the_cluster(&client).await;
    if let Err(e) = &imported {
        failures.push(format!("the imported hook: {e:#}"));
    }
    // Later tests' hosts would load these operators, and the RBAC `wasmpilot deploy` made for
    // them (the host's right to read Secrets for secret-propagation, say) would widen what later
    // tests' hosts may do: both go, the operators first, released by this host.
    let operators = operators_of_the_examples();
    for name in &operators {
        let _ = delete(&client, "wasmpilot.io/v1alpha1", "WasmOperator", None, name).await;
    }
    let _ = wait_for(
        "the examples' operators released",
        Duration::from_secs(60),
        || async {
            let mut left = 0;
            for name in &operators {
                if get(&client, "wasmpilot.io/v1alpha1", "WasmOperator", None, name)
                    .await?
                    .is_some()
                {
                    left += 1;
                }
            }
            Ok((left == 0).then_some(()))
        },
    )
    .await;
    for name in &operators {
        if let Err(e) = revoke_operator(&client, name).await {
            failures.push(format!("revoking {name}'s RBAC: {e:#}"));
        }
    }
    let alive = host.is_alive();
    host.kill();
    assert!(alive, "the host process died: {}", host.log.display());
    assert!(
        failures.is_empty(),
        "examples failing their checks (host log {}):\n{}",
        host.log.display(),
        failures.join("\n")
    );
}

/// Runs `examples/metacontroller/<example>/test.sh v1` from its directory, within [`BUDGET`],
/// with the CLI under test as `wasmpilot`: whether it passed, how long it took, what it printed.
fn run_checks(example: &str) -> (bool, Duration, String) {
    let dir: PathBuf = common::repo_root()
        .join("examples/metacontroller")
        .join(example);
    let cli = env!("CARGO_BIN_EXE_wasmpilot");
    let start = Instant::now();
    let out = Command::new("timeout")
        .arg(BUDGET.as_secs().to_string())
        .args(["bash", "test.sh", "v1"])
        .current_dir(&dir)
        .env("WASMPILOT", cli)
        .output()
        .expect("running test.sh");
    let took = start.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The last lines say where it stopped.
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    (out.status.success(), took, tail.join("\n"))
}

/// The WasmOperators the examples deploy (each operator.yaml's name).
fn operators_of_the_examples() -> Vec<String> {
    let root = common::repo_root().join("examples/metacontroller");
    let mut manifests = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "operator.yaml") {
                manifests.push(path);
            }
        }
    }
    manifests
        .iter()
        .filter_map(|m| std::fs::read_to_string(m).ok())
        .filter_map(|text| {
            let doc: serde_json::Value = serde_yaml::from_str(&text).ok()?;
            Some(doc["metadata"]["name"].as_str()?.to_string())
        })
        .chain(["hook-writer".to_string()])
        .collect()
}

const HOOK_CONTROLLER: &str = r#"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: hook-writer}
spec:
  parentResource: {apiVersion: hooks.example.com/v1, resource: hookwriters}
  childResources:
  - {apiVersion: v1, resource: configmaps, updateStrategy: {method: InPlace}}
  hooks:
    sync: {webhook: {url: http://hook-writer.metacontroller/sync}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: hookwriters.hooks.example.com}
spec:
  group: hooks.example.com
  names: {kind: HookWriter, plural: hookwriters}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// A hook as Metacontroller users write them: request in, response out.
const HOOK: &str = r#"
def sync(request):
    parent = request["parent"]
    child = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": parent["metadata"]["name"] + "-data"},
             "data": {"value": parent["spec"]["value"]}}
    return {"status": {"children": len(request["children"]["ConfigMap.v1"])}, "children": [child]}
"#;

/// `wasmpilot import metacontroller` of a controller and its Python hook, built, deployed with
/// `wasmpilot deploy` and granted: a parent gets its child, and the status the hook computed
/// from the children it saw; an edit of the parent reaches the child.
async fn imported_hook_runs_on_the_cluster(client: &kube::Client) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let work = work.path();
    std::fs::write(work.join("controller.yaml"), HOOK_CONTROLLER)?;
    std::fs::write(work.join("hook.py"), HOOK)?;
    let cli = |args: &[&str], dir: &Path| -> anyhow::Result<String> {
        let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
            .args(args)
            .current_dir(dir)
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        anyhow::ensure!(out.status.success(), "wasmpilot {args:?}: {text}");
        Ok(text)
    };
    let sdk = common::repo_root().join("guest-sdk-python");
    cli(
        &[
            "import",
            "metacontroller",
            "controller.yaml",
            "--hook",
            "hook.py",
            "--out",
            "writer",
            "--sdk-path",
            &sdk.display().to_string(),
        ],
        work,
    )?;
    let dir = work.join("writer");
    // The CRD the controller's manifest holds, as Metacontroller's `kubectl apply -k` installs it.
    std::fs::create_dir_all(dir.join("crds"))?;
    let crd = HOOK_CONTROLLER.split("---").nth(1).context("the CRD")?;
    std::fs::write(dir.join("crds/crd.yaml"), crd)?;
    cli(&["build", "."], &dir)?;
    cli(&["deploy", "--no-build", "."], &dir)?;
    let ns = create_namespace(client, "e2e-mc-import").await?;
    apply_yaml(
        client,
        &format!("{{apiVersion: hooks.example.com/v1, kind: HookWriter, metadata: {{name: w, namespace: {ns}}}, spec: {{value: hello}}}}"),
        Some(&ns),
    )
    .await?;
    let value = |want: &'static str| {
        let ns = ns.clone();
        move || {
            let ns = ns.clone();
            async move {
                let cm = get(client, "v1", "ConfigMap", Some(&ns), "w-data").await?;
                Ok(cm.filter(|cm| cm["data"]["value"] == want))
            }
        }
    };
    wait_for(
        "the imported hook's child w-data = hello",
        Duration::from_secs(120),
        value("hello"),
    )
    .await?;
    apply_yaml(
        client,
        &format!("{{apiVersion: hooks.example.com/v1, kind: HookWriter, metadata: {{name: w, namespace: {ns}}}, spec: {{value: again}}}}"),
        Some(&ns),
    )
    .await?;
    wait_for(
        "the edit reaching w-data",
        Duration::from_secs(60),
        value("again"),
    )
    .await?;
    // The decision after the edit saw the child the first one applied (a decision sees the
    // children as they were when it was asked: the host does not wake a resource for its own
    // writes).
    wait_for(
        "the hook's status counting the child it saw",
        Duration::from_secs(60),
        || async {
            let w = get(client, "hooks.example.com/v1", "HookWriter", Some(&ns), "w").await?;
            Ok(w.filter(|w| w["status"]["children"] == 1).map(|_| ()))
        },
    )
    .await?;
    let _ = delete(client, "v1", "Namespace", None, &ns).await;
    Ok(())
}
