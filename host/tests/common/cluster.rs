//! End-to-end helpers: a client for the real cluster (KUBECONFIG), the host as a child process,
//! applying YAML, and polling until a condition holds.
#![allow(dead_code)]

use anyhow::{anyhow, bail, Context};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::Value;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!("KUBECONFIG is not set: end-to-end tests need a cluster. Run deploy/local/test.sh (it starts deploy/local/cluster.sh), or export KUBECONFIG for any conformant cluster.");
    }
    let client = wasmpilot::api_client::connect()
        .await
        .expect("a client from KUBECONFIG");
    static NO_OTHER_HOST: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    NO_OTHER_HOST
        .get_or_init(|| async {
            if let Err(e) = no_other_host(&client).await {
                panic!("{e:#}");
            }
        })
        .await;
    client
}

/// The namespace of the in-cluster install (`kubectl apply -k deploy/`).
const INSTALL_NAMESPACE: &str = "wasmpilot-system";

/// Fails when a host this test did not start works on the cluster: its pods from `kubectl apply
/// -k deploy/`, or a process renewing a Lease in `wasmpilot-system` (the leader or a sharded
/// member). It would reconcile the tests' operators beside the tests' own hosts. A Lease a
/// stopped host left is waited out (once), not taken for a live host.
async fn no_other_host(client: &Client) -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Pod;
    let stop =
        "stop it first (kubectl -n wasmpilot-system scale deployment/wasmpilot --replicas=0; a \
                `wasmpilot run` left by `KEEP=1 deploy/local/demo.sh`: kill it); \
                deploy/local/test.sh does this itself on the local cluster";
    let pods: Api<Pod> = Api::namespaced(client.clone(), INSTALL_NAMESPACE);
    let running: Vec<String> = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=wasmpilot"))
        .await
        .context("listing the in-cluster host's pods")?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .collect();
    if !running.is_empty() {
        bail!(
            "an in-cluster wasmpilot host is running ({}): it would reconcile the tests' operators beside the tests' hosts; {stop}",
            running.join(", ")
        );
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), INSTALL_NAMESPACE);
    let live = |list: Vec<Lease>| -> Vec<(String, String, String, Duration)> {
        let now = jiff::Timestamp::now();
        list.into_iter()
            .filter_map(|l| {
                let spec = l.spec?;
                let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
                let renewed = spec.renew_time?.0;
                let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
                let expires = renewed
                    .checked_add(jiff::SignedDuration::from_secs(duration))
                    .ok()?;
                let left = Duration::try_from(expires.duration_since(now)).ok()?;
                Some((l.metadata.name?, holder, renewed.to_string(), left))
            })
            .collect()
    };
    let first = live(leases.list(&ListParams::default()).await?.items);
    let Some(wait) = first.iter().map(|l| l.3).max() else {
        return Ok(());
    };
    tokio::time::sleep(wait.min(Duration::from_secs(60)) + Duration::from_secs(1)).await;
    let renewed: Vec<String> = live(leases.list(&ListParams::default()).await?.items)
        .into_iter()
        .filter(|(name, _, renew, _)| first.iter().all(|f| &f.0 != name || &f.2 != renew))
        .map(|(name, holder, _, _)| format!("{name} (held by {holder})"))
        .collect();
    if !renewed.is_empty() {
        bail!(
            "a wasmpilot host outside this test renews Leases in {INSTALL_NAMESPACE}: {}; it would reconcile the tests' operators beside the tests' hosts; {stop}",
            renewed.join(", ")
        );
    }
    Ok(())
}

/// The `wasmpilot run` process, killed when dropped; its log goes to a file.
pub struct Host {
    child: Child,
    pub log: PathBuf,
}

impl Host {
    pub fn start(args: &[&str], log_name: &str) -> Host {
        Host::start_with_env(args, &[], log_name)
    }

    /// Like `start`, with extra environment (e.g. another KUBECONFIG).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], log_name: &str) -> Host {
        let log = std::env::temp_dir().join(format!("{log_name}-{}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("host log file");
        let child = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
            .arg("run")
            .args(args)
            .env("WASMPILOT_LOG", "info,wasmpilot=debug")
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().expect("log fd")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("starting wasmpilot run");
        eprintln!("host started, log: {}", log.display());
        Host { child, log }
    }

    /// SIGKILL: no graceful shutdown, no Lease release.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (what the kubelet sends a deleted pod), then waits up to `grace` for the exit.
    pub fn terminate(&mut self, grace: Duration) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = std::time::Instant::now();
        while start.elapsed() < grace {
            if !self.is_alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
    }

    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = self.log_text();
            let tail: Vec<&str> = text.lines().rev().take(80).collect();
            eprintln!("---- host log tail ({}) ----", self.log.display());
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// Applies every document of a YAML text (server-side apply), defaulting to `namespace`.
/// Applies every document of `yaml`; a WasmOperator with its own account and grants first, as
/// `wasmpilot deploy` applies them (and an admin with `wasmpilot rbac | kubectl apply -f -`).
pub async fn apply_yaml(
    client: &Client,
    yaml: &str,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    for doc in wasmpilot::offline::parse_documents(yaml)? {
        if doc["kind"] == "WasmOperator" {
            grant_operator(client, &doc, &[]).await?;
        }
        wasmpilot::deploy::apply_document(client, doc, namespace).await?;
    }
    Ok(())
}

/// Applies every document of `yaml` as it is: a WasmOperator's account gets no grant.
pub async fn apply_yaml_ungranted(
    client: &Client,
    yaml: &str,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    for doc in wasmpilot::offline::parse_documents(yaml)? {
        wasmpilot::deploy::apply_document(client, doc, namespace).await?;
    }
    Ok(())
}

/// The WasmOperator `doc`'s own account and grants (cluster-wide, or only in `namespaces`), as
/// `wasmpilot rbac --no-host-grants` prints them; nothing for a document that is not a valid WasmOperator (a
/// test's malformed definition).
pub async fn grant_operator(
    client: &Client,
    doc: &Value,
    namespaces: &[&str],
) -> anyhow::Result<()> {
    grant(client, doc, namespaces, None).await
}

/// [`grant_operator`], and the shipped host account's part (read the operator's kinds, act as
/// its account), as `wasmpilot rbac` prints them: for a host running as that account.
pub async fn grant_operator_to_host(client: &Client, doc: &Value) -> anyhow::Result<()> {
    let host = ("wasmpilot-system".to_string(), "wasmpilot".to_string());
    grant(client, doc, &[], Some(host)).await
}

async fn grant(
    client: &Client,
    doc: &Value,
    namespaces: &[&str],
    host_account: Option<(String, String)>,
) -> anyhow::Result<()> {
    let Ok(op) = serde_json::from_value::<wasmpilot::crd::WasmOperator>(doc.clone()) else {
        return Ok(());
    };
    let Some(name) = op.metadata.name.as_deref() else {
        return Ok(());
    };
    // The test hosts run as the admin, which may read and impersonate anything: unless asked,
    // nothing is granted to the shipped host account (so no test widens it for another).
    let target = wasmpilot::rbac::GrantTarget {
        identity_namespace: wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE.into(),
        host_account,
        namespaces: namespaces.iter().map(ToString::to_string).collect(),
    };
    wasmpilot::deploy::apply_grants(client, name, &op.spec, &target).await
}

/// Deletes the grants `wasmpilot rbac` made for `operator` (its roles and bindings; its
/// ServiceAccount stays).
pub async fn revoke_operator(client: &Client, operator: &str) -> anyhow::Result<()> {
    let selector = format!("{}={operator}", wasmpilot::OPERATOR_LABEL);
    let params = kube::api::ListParams::default().labels(&selector);
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let dp = DeleteParams::default();
    Api::<ClusterRoleBinding>::all(client.clone())
        .delete_collection(&dp, &params)
        .await?;
    Api::<ClusterRole>::all(client.clone())
        .delete_collection(&dp, &params)
        .await?;
    for rb in Api::<RoleBinding>::all(client.clone())
        .list(&params)
        .await?
        .items
    {
        let ns = rb.metadata.namespace.clone().unwrap_or_default();
        let name = rb.metadata.name.clone().unwrap_or_default();
        let _ = Api::<RoleBinding>::namespaced(client.clone(), &ns)
            .delete(&name, &dp)
            .await;
    }
    for r in Api::<Role>::all(client.clone()).list(&params).await?.items {
        let ns = r.metadata.namespace.clone().unwrap_or_default();
        let name = r.metadata.name.clone().unwrap_or_default();
        let _ = Api::<Role>::namespaced(client.clone(), &ns)
            .delete(&name, &dp)
            .await;
    }
    Ok(())
}

pub async fn apply_file(
    client: &Client,
    path: &Path,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    apply_yaml(client, &text, namespace).await
}

/// An Api for any kind.
pub async fn dynamic_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Api<DynamicObject>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (ar, _) =
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await?;
    Ok(match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    })
}

/// The object as JSON, or None when absent.
pub async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<Option<Value>> {
    let api = dynamic_api(client, api_version, kind, namespace).await?;
    Ok(api
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
}

pub async fn delete(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<()> {
    let api = dynamic_api(client, api_version, kind, namespace).await?;
    api.delete(name, &DeleteParams::background()).await?;
    Ok(())
}

/// Polls `check` every 250 ms until it returns Some, or fails after `timeout` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() > timeout {
            bail!(
                "timed out after {timeout:?} waiting for {what}{}",
                last_err
                    .map(|e| format!(" (last error: {e:#})"))
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The condition of a type in `.status.conditions`.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until a resource's condition has the given status and reason; returns the object.
pub async fn wait_condition(
    client: &Client,
    (api_version, kind): (&str, &str),
    namespace: Option<&str>,
    name: &str,
    (type_, status, reason): (&str, &str, &str),
    timeout: Duration,
) -> anyhow::Result<Value> {
    let what = format!("{kind} {name}: condition {type_}={status} reason {reason}");
    wait_for(&what, timeout, || async {
        let Some(o) = get(client, api_version, kind, namespace, name).await? else {
            return Ok(None);
        };
        let ok =
            condition(&o, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason);
        Ok(ok.then_some(o))
    })
    .await
}

/// A WasmOperator of the test components' scripted worker for `kind`: phase `Start` (the
/// worker does what each resource's `spec.phases.Start` says, within `limits`) moving to the
/// final `Done`.
pub fn scripted_start_done(name: &str, (api_version, kind): (&str, &str), limits: Value) -> Value {
    let mut start = serde_json::json!({"name": "Start", "initial": true, "next": ["Done"],
        "module": {"file": {"path": "wasmpilot_test_scripted.wasm"}}});
    if !limits.is_null() {
        start["limits"] = limits;
    }
    serde_json::json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
        "metadata": {"name": name}, "spec": {
        "resource": {"apiVersion": api_version, "kind": kind},
        "phases": [start, {"name": "Done", "final": true}]}})
}

/// Waits until each WasmOperator of `names` runs its controller (`Ready=True`,
/// `ControllerRunning`).
pub async fn wait_operators_running(client: &Client, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        wait_condition(
            client,
            ("wasmpilot.io/v1alpha1", "WasmOperator"),
            None,
            name,
            ("Ready", "True", "ControllerRunning"),
            super::autoroute::T,
        )
        .await?;
    }
    Ok(())
}

/// Events (core/v1 view) about an object.
pub async fn events_for(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<CoreEvent>> {
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await?;
    Ok(list.items)
}

pub async fn wait_event(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
    timeout: Duration,
) -> anyhow::Result<CoreEvent> {
    wait_for(&format!("an Event {reason} on {name}"), timeout, || async {
        Ok(events_for(client, namespace, name)
            .await?
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason)))
    })
    .await
}

pub async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        % 1_000_000;
    let name = format!("{prefix}-{suffix}");
    apply_yaml(
        client,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
        None,
    )
    .await?;
    Ok(name)
}

pub fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn must<T>(v: Option<T>, what: &str) -> anyhow::Result<T> {
    v.ok_or_else(|| anyhow!("missing: {what}"))
}

/// A loopback port nobody listens on now (for a host's `--metrics-addr`).
/// Runs the CLI built with these tests (`wasmpilot <args>`) in the repository's root: its
/// standard output and error, or an error naming the command when it fails.
pub fn wasmpilot_cli(args: &[&str]) -> anyhow::Result<(String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .current_dir(crate::common::repo_root())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "wasmpilot {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `GET http://{addr}{path}` over plain HTTP/1.0: the body, or an error if nothing answers.
pub fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    http_response(addr, path).map(|(_, body)| body)
}

/// `GET http://{addr}{path}` over plain HTTP/1.0: the status code and the body, or an error if
/// nothing answers.
pub fn http_response(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("no HTTP response from {addr}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("no status line from {addr}: {head}"))?;
    Ok((code, body.to_string()))
}

/// The value of an unlabelled metric in a Prometheus text exposition.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `wasmpilot deploy --no-build <example>` from the repository root, as a user ships an operator
/// (the test command built the components already).
pub fn deploy_example(example: &str) {
    deploy_example_with(example, &[]);
}

/// `wasmpilot deploy --no-build <example>` with `extra` arguments.
pub fn deploy_example_with(example: &str, extra: &[&str]) {
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build", example])
        .args(extra)
        .current_dir(super::repo_root())
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy --no-build {example} {extra:?} failed"
    );
}

/// Until ServiceAccount `name` in `namespace` has its token Secret (a new namespace's pods wait
/// for it).
pub async fn wait_for_token(client: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!("the token of ServiceAccount {namespace}/{name}"),
        Duration::from_secs(120),
        || async {
            Ok(accounts
                .get_opt(name)
                .await?
                .and_then(|sa| sa.secrets)
                .filter(|s| !s.is_empty())
                .map(|_| ()))
        },
    )
    .await
}

/// The nodes the kubelet reports under disk, memory or PID pressure (it then evicts pods and
/// the scheduler places none), as one line to add to a failure; `None` when there are none.
/// The local node evicts below 1 % free disk (deploy/local/node.sh).
pub async fn node_pressure(client: &Client) -> Option<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.ok()?;
    let pressed: Vec<String> = list
        .items
        .iter()
        .flat_map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            n.status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .filter(|c| c.type_.ends_with("Pressure") && c.status == "True")
                .map(move |c| format!("{name}: {}", c.type_))
                .collect::<Vec<_>>()
        })
        .collect();
    (!pressed.is_empty()).then(|| {
        format!(
            "node under pressure ({}): pods are evicted and not scheduled; free disk space (the local node evicts below 1 % free)",
            pressed.join(", ")
        )
    })
}

/// WasmOperators left terminating by an earlier run (deleted while no host ran to release its
/// finalizer, over a minute ago) released and waited for: applying one again would only update
/// the dying object.
pub async fn purge_terminating_operators(client: &Client) -> anyhow::Result<()> {
    let ops = ("wasmpilot.io/v1alpha1", "WasmOperator");
    let api = dynamic_api(client, ops.0, ops.1, None).await?;
    for op in api.list(&Default::default()).await? {
        // Only those dying for over a minute: a running host releases its own within seconds,
        // and a test running beside this one may be watching that happen.
        let Some(since) = op.metadata.deletion_timestamp.as_ref() else {
            continue;
        };
        if jiff::Timestamp::now().duration_since(since.0) < jiff::SignedDuration::from_secs(60) {
            continue;
        }
        let name = op.metadata.name.clone().unwrap_or_default();
        eprintln!("releasing WasmOperator {name}, left terminating by an earlier run");
        let _ = api
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
            )
            .await;
        wait_for(
            &format!("WasmOperator {name} gone"),
            Duration::from_secs(30),
            || async { Ok(api.get_opt(&name).await?.is_none().then_some(())) },
        )
        .await?;
    }
    Ok(())
}

/// The WasmOperator CRD and the test kinds (the CRDs of `host/tests/manifests/scripted.yaml`)
/// applied, and no WasmOperator left on `kind` (one an interrupted earlier test left would hold
/// the kind). The manifest's own `scripted` WasmOperator is not applied: a test that wants it
/// applies it, and one left behind would run beside every later host (and the demo's).
pub async fn test_kind_free(client: &Client, kind: &str) -> anyhow::Result<()> {
    let ops = ("wasmpilot.io/v1alpha1", "WasmOperator");
    // This build's WasmOperator CRD (the cluster may hold an older one).
    let crd = <wasmpilot::crd::WasmOperator as kube::CustomResourceExt>::crd();
    wasmpilot::deploy::apply_crd(client, serde_json::to_value(crd)?).await?;
    let grants = <wasmpilot::crd::WasmOperatorGrant as kube::CustomResourceExt>::crd();
    wasmpilot::deploy::apply_crd(client, serde_json::to_value(grants)?).await?;
    purge_terminating_operators(client).await?;
    let manifest = super::repo_root().join("host/tests/manifests/scripted.yaml");
    let text =
        std::fs::read_to_string(&manifest).with_context(|| manifest.display().to_string())?;
    for doc in wasmpilot::offline::parse_documents(&text)? {
        if doc["kind"] == "CustomResourceDefinition" {
            wasmpilot::deploy::apply_crd(client, doc).await?;
        }
    }
    let api = dynamic_api(client, ops.0, ops.1, None).await?;
    for op in api.list(&Default::default()).await? {
        let op = serde_json::to_value(op)?;
        if op["spec"]["resource"]["kind"] == kind {
            let name = op["metadata"]["name"].as_str().unwrap_or_default();
            delete(client, ops.0, ops.1, None, name).await?;
        }
    }
    Ok(())
}

/// Runs `scenario` in a fresh namespace (prefix `ns_prefix`) against a host started with the
/// test components (`--module-dir`), `kind` free of WasmOperators first; then deletes the
/// WasmOperators `operators` and the namespace. Panics with the host's log when it failed, or
/// when the host died.
pub async fn with_scripted_host<F, Fut>(
    kind: &str,
    host_name: &str,
    ns_prefix: &str,
    operators: &[&str],
    scenario: F,
) where
    F: FnOnce(Client, String, PathBuf) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    with_scripted_host_args(kind, &[], host_name, ns_prefix, operators, scenario).await
}

/// [`with_scripted_host`] with `extra` arguments for the host.
pub async fn with_scripted_host_args<F, Fut>(
    kind: &str,
    extra: &[&str],
    host_name: &str,
    ns_prefix: &str,
    operators: &[&str],
    scenario: F,
) where
    F: FnOnce(Client, String, PathBuf) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let client = client().await;
    test_kind_free(&client, kind)
        .await
        .expect("the test kinds, this one free of operators");
    let wasm_dir = super::wasm_dir();
    let mut args = vec!["--module-dir", wasm_dir.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    let mut host = Host::start(&args, host_name);
    let ns = create_namespace(&client, ns_prefix)
        .await
        .expect("namespace");
    let result = scenario(client.clone(), ns.clone(), host.log.clone()).await;
    let alive = host.is_alive();
    for op in operators {
        let _ = delete(&client, "wasmpilot.io/v1alpha1", "WasmOperator", None, op).await;
    }
    let _ = delete(&client, "v1", "Namespace", None, &ns).await;
    assert!(alive, "the host process died");
    if let Err(e) = result {
        panic!("{e:#}\nhost log:\n{}", host.log_text());
    }
}

/// The whole audit log (`WASMPILOT_AUDIT_LOG`): the API server rotates it at 64 MB into one
/// backup beside it (`audit-<time>.log`), and a long test run crosses that, so the backup is read
/// first, then the current file. `None` when the cluster writes no audit log this test can read.
fn audit_log_text() -> anyhow::Result<Option<String>> {
    let Some(path) = std::env::var_os("WASMPILOT_AUDIT_LOG") else {
        return Ok(None);
    };
    let path = std::path::PathBuf::from(path);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut backups: Vec<(std::time::SystemTime, std::path::PathBuf)> = Vec::new();
    if let Some(dir) = path.parent() {
        for entry in std::fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("{stem}-")) && name.ends_with(".log") {
                let modified = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                backups.push((modified, entry.path()));
            }
        }
    }
    backups.sort();
    let mut text = String::new();
    for file in backups.into_iter().map(|(_, p)| p).chain([path]) {
        match std::fs::read_to_string(&file) {
            Ok(t) => text.push_str(&t),
            // A backup removed by the next rotation between listing and reading.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
        }
    }
    Ok(Some(text))
}

/// The API server's audit entries (writes, `deploy/local/cluster.sh`'s policy) for objects in
/// namespace `ns`; `None` when the cluster writes no audit log this test can read
/// (`WASMPILOT_AUDIT_LOG`, set by `cluster.sh env`).
pub fn audit_entries(ns: &str) -> anyhow::Result<Option<Vec<Value>>> {
    let Some(text) = audit_log_text()? else {
        return Ok(None);
    };
    Ok(Some(
        text.lines()
            .filter(|l| l.contains(ns))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["objectRef"]["namespace"] == ns)
            .collect(),
    ))
}

/// The hosts that wrote each object in namespaces starting with `prefix`, from the audit log:
/// (namespace, resource[/subresource], name) → the identities in the writers' User-Agent
/// (`wasmpilot-host/<version> (<identity>)`); `None` without an audit log.
pub fn audit_writers(prefix: &str) -> anyhow::Result<Option<AuditWriters>> {
    let Some(text) = audit_log_text()? else {
        return Ok(None);
    };
    let mut out = AuditWriters::new();
    for line in text.lines().filter(|l| l.contains(prefix)) {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let r = &e["objectRef"];
        let ns = r["namespace"].as_str().unwrap_or_default();
        let agent = e["userAgent"].as_str().unwrap_or_default();
        if !ns.starts_with(prefix) || !agent.starts_with("wasmpilot-host/") {
            continue;
        }
        if e["responseStatus"]["code"]
            .as_i64()
            .is_some_and(|c| c >= 300)
        {
            continue; // refused (a conflict): nothing was written
        }
        let mut resource = r["resource"].as_str().unwrap_or_default().to_string();
        if let Some(sub) = r["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let replica = agent
            .split_once('(')
            .map(|(_, id)| id.trim_end_matches(')').to_string())
            .unwrap_or_else(|| agent.to_string());
        out.entry((
            ns.to_string(),
            resource,
            r["name"].as_str().unwrap_or_default().to_string(),
        ))
        .or_default()
        .insert(replica);
    }
    Ok(Some(out))
}

/// What [`audit_writers`] returns.
pub type AuditWriters =
    std::collections::BTreeMap<(String, String, String), std::collections::BTreeSet<String>>;

/// A condition's status (`"True"`, `"False"`) by type, if the object has it.
fn condition_status<'a>(o: &'a Value, type_: &str) -> Option<&'a str> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

/// The reconcile status kstatus computes for a custom resource, written from its documented
/// rules (sigs.k8s.io/cli-utils, pkg/kstatus/README.md): Terminating while deleted;
/// InProgress while `.status.observedGeneration` lags `.metadata.generation`; then the
/// "abnormal-true" conditions — Reconciling=True is InProgress, Stalled=True is Failed; then
/// the Ready condition — False is InProgress, True is Current; with none of them, Current.
pub fn kstatus(o: &Value) -> &'static str {
    if !o["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating";
    }
    let observed = o["status"]["observedGeneration"].as_i64();
    if observed.is_some() && observed != o["metadata"]["generation"].as_i64() {
        return "InProgress";
    }
    if condition_status(o, "Reconciling") == Some("True") {
        return "InProgress";
    }
    if condition_status(o, "Stalled") == Some("True") {
        return "Failed";
    }
    match condition_status(o, "Ready") {
        Some("False") => "InProgress",
        _ => "Current",
    }
}

/// The health Argo CD assesses for a custom resource with kstatus conditions, as its documented
/// custom health checks (`resource.customizations.health`, a Lua `hs.status`) are written for
/// them: Degraded when Stalled=True, Healthy when Ready=True, Progressing otherwise.
pub fn argo_health(o: &Value) -> &'static str {
    if condition_status(o, "Stalled") == Some("True") {
        "Degraded"
    } else if condition_status(o, "Ready") == Some("True") {
        "Healthy"
    } else {
        "Progressing"
    }
}

/// `kubectl wait --for=condition=<condition> <kind>/<name>` as a user runs it: whether it
/// returned within `timeout`, and what it printed.
pub fn kubectl_wait(
    kind: &str,
    name: &str,
    namespace: &str,
    condition: &str,
    timeout: Duration,
) -> anyhow::Result<(bool, String)> {
    let out = Command::new("kubectl")
        .args([
            "wait",
            &format!("--for=condition={condition}"),
            &format!("{kind}/{name}"),
            "-n",
            namespace,
            &format!("--timeout={}s", timeout.as_secs()),
        ])
        .output()
        .context("running kubectl (deploy/local/setup.sh installs it)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}
