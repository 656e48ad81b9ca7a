//! Metacontroller's example controllers ported to wasmpilot (`examples/metacontroller/`), each
//! checked by its own `test.sh` — the original's kubectl checks, the install step replaced by
//! `../install.sh` (CRD, `wasmpilot deploy`, the admin's grant) — against a host that requires
//! grants, as the shipped Deployment does (issue 69).

mod common;

use common::cluster::*;
use std::path::PathBuf;
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
    let _client = client().await;
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
