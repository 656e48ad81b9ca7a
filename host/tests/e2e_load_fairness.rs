//! An operator whose modules never come (a registry or server that accepts and answers nothing,
//! careless or hostile) delays no other operator's load.
//!
//! Without a cluster: while three operators' fetches wait on a silent registry, another
//! operator's module loads (before, the fetch budget's two shares went to the first fetches
//! asked, and the other operator waited for them to time out, a minute each). On a real cluster:
//! five WasmOperators whose modules wait on a silent registry, each reported as loading
//! (`Reconciling=True`, `Loading`), then one whose module is a file: the last goes Ready and
//! reconciles while the five still wait (before, the host loaded four WasmOperators at once, so
//! it waited for theirs to fail); at the host's `--load-timeout` the five end as
//! `Ready=False` (`LoadTimedOut`), retried, where before they said nothing until every module
//! had timed out, a minute each.

mod common;

use anyhow::ensure;
use common::cluster::*;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wasmpilot::crd::{FileModule, ModuleRef, OciModule};
use wasmpilot::modules::ModuleCache;
use wasmpilot::sandbox::{Sandbox, SandboxLimits};

const T: Duration = Duration::from_secs(60);
/// Less than a fetch's timeout (`wasmpilot::modules::FETCH_TIMEOUT`): an operator that waited
/// for a silent fetch to give up would not be done in this time.
const QUICKLY: Duration = Duration::from_secs(40);
/// The test host's `--load-timeout`: past `QUICKLY`, short of a fetch's 60 s timeout.
const LOAD_TIMEOUT: &str = "50s";
const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const PROBE: (&str, &str) = ("test.wasmpilot.io/v1", "Probe");
const LAG: (&str, &str) = ("test.wasmpilot.io/v1", "Lag");
const SILENT_OPERATORS: usize = 5;
const QUICK: &str = "load-quick";

/// A registry that accepts connections and answers none (each is held open, unread). Returns
/// its `host:port` and how many connections it accepted.
async fn silent_registry() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address").to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (addr, accepted)
}

fn silent_module(registry: &str, i: usize) -> ModuleRef {
    ModuleRef {
        oci: Some(OciModule {
            reference: format!("{registry}/silent/m{i}:v1"),
            sha256: None,
            pull_secret: None,
            insecure: true,
        }),
        ..Default::default()
    }
}

async fn wait_accepted(accepted: &AtomicUsize, at_least: usize) {
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        while accepted.load(Ordering::SeqCst) < at_least {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "only {} of {at_least} fetches reached the silent registry: the test proves nothing",
        accepted.load(Ordering::SeqCst)
    );
}

// ---------------------------------------------------------------- without a cluster

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_waiting_on_a_silent_registry_hold_up_no_other_operators_module() {
    let (registry, accepted) = silent_registry().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let small = wat::parse_str("(component (core module (func (export \"g\"))))").expect("valid");
    std::fs::write(dir.path().join("small.wasm"), small).expect("written");
    let sandbox = Sandbox::new(SandboxLimits::default()).expect("a sandbox");
    let modules = Arc::new(ModuleCache::new(sandbox, None, Some(dir.path().into())));
    let silent: Vec<_> = (0..3)
        .map(|i| {
            let modules = modules.clone();
            let module = silent_module(&registry, i);
            tokio::spawn(async move { modules.phase(&format!("silent-{i}"), &module).await })
        })
        .collect();
    // The premise: as many fetches wait on the registry as the fetch budget has shares (two),
    // and one more asked.
    wait_accepted(&accepted, 2).await;
    let file = ModuleRef {
        file: Some(FileModule {
            path: "small.wasm".into(),
            sha256: None,
        }),
        ..Default::default()
    };
    // Compiled, then refused as a worker (it is none): either way, through its fetch.
    let other = tokio::time::timeout(QUICKLY, modules.phase("other", &file)).await;
    let still_waiting = silent.iter().filter(|s| !s.is_finished()).count();
    for s in &silent {
        s.abort();
    }
    assert!(
        other.is_ok(),
        "another operator's module waited {QUICKLY:?} behind fetches from a silent registry"
    );
    assert_eq!(
        still_waiting, 3,
        "the silent fetches ended before the other module loaded: the test proves nothing"
    );
}

// ---------------------------------------------------------------- on a cluster

fn operator(name: &str, kind: (&str, &str), module: Value) -> Value {
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": name}, "spec": {
        "resource": {"apiVersion": kind.0, "kind": kind.1},
        "phases": [
            {"name": "Start", "initial": true, "next": ["Done"], "module": module},
            {"name": "Done", "final": true}]}})
}

fn silent_names() -> Vec<String> {
    (0..SILENT_OPERATORS)
        .map(|i| format!("load-silent-{i}"))
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn operators_whose_modules_never_come_hold_up_no_other_operators_load() {
    let (registry, accepted) = silent_registry().await;
    let names = silent_names();
    let mut operators: Vec<&str> = names.iter().map(String::as_str).collect();
    operators.push(QUICK);
    with_scripted_host_args(
        LAG.1,
        // The silent registry listens on loopback, which operators may not reach otherwise.
        &[
            "--allow-fetch-from",
            "127.0.0.1",
            "--load-timeout",
            LOAD_TIMEOUT,
        ],
        "wasmpilot-e2e-load-fairness",
        "e2e-load",
        &operators,
        |client, ns, _log| async move {
            scenario(&client, &ns, &registry, &accepted, &silent_names()).await
        },
    )
    .await;
}

async fn scenario(
    client: &kube::Client,
    ns: &str,
    registry: &str,
    accepted: &AtomicUsize,
    silent: &[String],
) -> anyhow::Result<()> {
    for (i, name) in silent.iter().enumerate() {
        let module = serde_json::to_value(silent_module(registry, i))?;
        apply_yaml(client, &operator(name, PROBE, module).to_string(), None).await?;
    }
    // The premise: the host loads the silent operators, each waiting on the registry (at least
    // four of them: as many as it loaded at once before).
    wait_accepted(accepted, 4).await;
    for name in &silent[..4] {
        wait_condition(
            client,
            OPS,
            None,
            name,
            ("Reconciling", "True", "Loading"),
            T,
        )
        .await?;
    }
    let file = json!({"file": {"path": "wasmpilot_test_scripted.wasm"}});
    apply_yaml(client, &operator(QUICK, LAG, file).to_string(), None).await?;
    wait_condition(
        client,
        OPS,
        None,
        QUICK,
        ("Ready", "True", "ControllerRunning"),
        QUICKLY,
    )
    .await?;
    let lag = json!({"apiVersion": LAG.0, "kind": LAG.1, "metadata": {"name": "quick"},
        "spec": {"phases": {"Start": {"mode": "ok", "next": "Done"}}}});
    apply_yaml(client, &lag.to_string(), Some(ns)).await?;
    wait_for("the quick operator's Lag Done", T, || async {
        Ok(get(client, LAG.0, LAG.1, Some(ns), "quick")
            .await?
            .filter(|o| o["status"]["phase"] == "Done"))
    })
    .await?;
    // The silent operators still wait: none has reported its load's end yet.
    for name in silent {
        let op = must(
            get(client, OPS.0, OPS.1, None, name).await?,
            "a silent WasmOperator",
        )?;
        ensure!(
            condition(&op, "Ready").is_none(),
            "{name}'s load already ended ({}): the test proves nothing",
            op["status"]
        );
    }
    // At the load timeout, short of their fetches' own, each ends as a Condition, retried.
    for name in silent {
        let op = wait_condition(
            client,
            OPS,
            None,
            name,
            ("Ready", "False", "LoadTimedOut"),
            T,
        )
        .await?;
        let message = must(
            condition(&op, "Ready").and_then(|c| c["message"].as_str()),
            "the Ready message",
        )?;
        ensure!(
            message.contains("--load-timeout") && message.contains("50s"),
            "{name}: {message}"
        );
        ensure!(
            condition(&op, "Reconciling").is_some_and(|c| c["status"] == "True"),
            "{name} is tried again, so kstatus reads it as in progress: {}",
            op["status"]
        );
    }
    Ok(())
}
