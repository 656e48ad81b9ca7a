//! `wasmpilot dashboard` in a real browser (Debian's headless Chromium, driven by
//! host/tests/browser/dashboard.mjs) against the local cluster: the phase counts and the graph's
//! match kubectl, stalled, failing and stuck resources are listed with their Conditions and the
//! healthy ones are not, a click shows a timeline with the deciding module's digest, the page
//! follows a change without a reload, shadow agreement matches the WasmOperator's status.
//! Screenshots go to `$CARGO_TARGET_DIR/test-artifacts/dashboard/`.

mod common;

use anyhow::{bail, ensure, Context};
use common::autoroute::T;
use common::cluster::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const OPS: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const BOARD: (&str, &str) = ("test.wasmpilot.io/v1", "Board");
const OPERATOR: &str = "dash-boards";
const MODULE: &str = "wasmpilot_test_scripted.wasm";

fn operator() -> String {
    let module = json!({"file": {"path": MODULE}});
    json!({"apiVersion": OPS.0, "kind": OPS.1, "metadata": {"name": OPERATOR}, "spec": {
    "resource": {"apiVersion": BOARD.0, "kind": BOARD.1},
    "phases": [
        {"name": "Start", "initial": true, "module": module, "shadow": module,
         "outputs": [{"apiVersion": "v1", "kind": "ConfigMap"}], "next": ["Checking", "Done"]},
        {"name": "Checking", "module": module, "next": ["Done"]},
        {"name": "Done", "final": true}
    ]}})
    .to_string()
}

/// The HTTP status of `GET /api/overview` from the dashboard at `address`, naming `host`.
fn status_for_host(address: &str, host: &str) -> anyhow::Result<u16> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET /api/overview HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("no HTTP status in {answer:.200}"))
}

fn board(name: &str, phases: Value) -> String {
    json!({"apiVersion": BOARD.0, "kind": BOARD.1, "metadata": {"name": name}, "spec": {"phases": phases}})
        .to_string()
}

/// Start applies a ConfigMap and moves to Done.
fn finishing(name: &str) -> Value {
    json!({"Start": {"next": "Done", "outputs": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-out")}}]}})
}

/// Boards per `.status.phase` and in all, as `kubectl get` lists them; a board with no phase
/// yet is in the initial phase (Start), whose worker the host runs on it.
fn kubectl_counts() -> anyhow::Result<(BTreeMap<String, usize>, usize)> {
    let out = Command::new("kubectl")
        .args(["get", "boards.test.wasmpilot.io", "-A", "-o", "json"])
        .output()
        .context("running kubectl")?;
    ensure!(
        out.status.success(),
        "kubectl get boards: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout)?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let mut counts = BTreeMap::new();
    for item in &items {
        let phase = item["status"]["phase"].as_str().unwrap_or("Start");
        *counts.entry(phase.to_string()).or_insert(0) += 1;
    }
    Ok((counts, items.len()))
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The browser driver: one JSON command a line in, one `OK`/`FAIL` line out.
struct Browser {
    child: Killed,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    fn send(&mut self, command: Value) -> anyhow::Result<String> {
        let stdin = self.stdin.as_mut().context("browser input closed")?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        eprintln!("browser: {command} -> {}", line.trim_end());
        match line.strip_prefix("OK") {
            Some(_) => Ok(line),
            None => bail!("the page does not show what kubectl shows: {command}: {line}"),
        }
    }

    fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = self.child.0.wait()?;
        ensure!(status.success(), "the browser driver exited with {status}");
        Ok(())
    }
}

fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo_root().join("target"));
    target.join("test-artifacts/dashboard")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster and Chromium: deploy/local/test.sh installs Chromium (setup.sh --tests) and starts the cluster"]
async fn the_dashboard_shows_what_kubectl_shows_in_a_real_browser() {
    with_scripted_host(
        BOARD.1,
        "wasmpilot-e2e-dashboard",
        "e2e-dashboard",
        &[OPERATOR],
        |client, ns, _log| async move { scenario(&client, &ns).await },
    )
    .await;
}

async fn scenario(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let driver_dir = common::repo_root().join("host/tests/browser");
    ensure!(
        driver_dir.join("node_modules/playwright-core").is_dir()
            && std::path::Path::new("/usr/bin/chromium").exists(),
        "Chromium or playwright-core is missing: deploy/local/setup.sh --tests installs both"
    );
    apply_yaml(client, &operator(), None).await?;
    wait_condition(
        client,
        OPS,
        None,
        OPERATOR,
        ("Ready", "True", "ControllerRunning"),
        T,
    )
    .await?;

    // Three boards finish; one waits in Checking (neither final nor ready); one fails fatally
    // (its message is markup the page must show as text); one keeps failing and retrying.
    for name in ["ok-1", "ok-2", "ok-3"] {
        apply_yaml(client, &board(name, finishing(name)), Some(ns)).await?;
    }
    apply_yaml(
        client,
        &board(
            "waiting",
            json!({"Start": {"next": "Checking"}, "Checking": {"mode": "ok"}}),
        ),
        Some(ns),
    )
    .await?;
    apply_yaml(
        client,
        &board(
            "broken",
            json!({"Start": {"mode": "fatal", "message": "<b>refused</b> & gone"}}),
        ),
        Some(ns),
    )
    .await?;
    apply_yaml(
        client,
        &board("retrying", json!({"Start": {"mode": "retryable"}})),
        Some(ns),
    )
    .await?;

    // The premise, from the API server: each board is where the page should show it.
    for name in ["ok-1", "ok-2", "ok-3"] {
        wait_for(&format!("{name} Done"), T, || async {
            let o = get(client, BOARD.0, BOARD.1, Some(ns), name).await?;
            Ok(o.filter(|o| o["status"]["phase"] == "Done"))
        })
        .await?;
    }
    wait_for("waiting in Checking", T, || async {
        let o = get(client, BOARD.0, BOARD.1, Some(ns), "waiting").await?;
        Ok(o.filter(|o| o["status"]["phase"] == "Checking"))
    })
    .await?;
    let broken = wait_for("broken Stalled", T, || async {
        let o = get(client, BOARD.0, BOARD.1, Some(ns), "broken").await?;
        Ok(o.filter(|o| condition(o, "Stalled").is_some_and(|c| c["status"] == "True")))
    })
    .await?;
    eprintln!(
        "broken: {}",
        condition(&broken, "Stalled").unwrap_or(&Value::Null)
    );
    wait_for("retrying Synced=False", T, || async {
        let o = get(client, BOARD.0, BOARD.1, Some(ns), "retrying").await?;
        Ok(o.filter(|o| condition(o, "Synced").is_some_and(|c| c["status"] == "False")))
    })
    .await?;

    // The dashboard, as a user starts it (their kubeconfig), on any free port.
    let mut dashboard = Killed(
        Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
            .args([
                "dashboard",
                "--address",
                "127.0.0.1:0",
                "--stuck-after",
                "3s",
                "--refresh",
                "1s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting wasmpilot dashboard")?,
    );
    let mut first = String::new();
    BufReader::new(dashboard.0.stdout.take().context("dashboard stdout")?).read_line(&mut first)?;
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .with_context(|| format!("no URL in the dashboard's first line: {first:?}"))?
        .to_string();
    // A page whose name was made to resolve to this machine (DNS rebinding) sends its own name
    // as the Host: refused, where the same request naming the machine is answered.
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let local = status_for_host(&address, &address)?;
    let rebound = status_for_host(&address, "rebound.example:80")?;
    ensure!(
        local == 200 && rebound == 403,
        "GET /api/overview answered {local} naming {address}, {rebound} naming rebound.example"
    );
    // Waiting has to be in Checking longer than --stuck-after before it counts as stuck.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let mut child = Command::new("node")
        .arg(driver_dir.join("dashboard.mjs"))
        .arg(&url)
        .current_dir(&driver_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting node (deploy/local/setup.sh --tests installs it)")?;
    let stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().context("driver stdout")?);
    let mut browser = Browser {
        child: Killed(child),
        stdin,
        stdout,
    };
    let shots = artifacts();
    std::fs::create_dir_all(&shots)?;
    let q = |name: &str| format!("{ns}/{name}");

    let (counts, total) = kubectl_counts()?;
    ensure!(
        counts.get("Done") == Some(&3) && counts.get("Start") == Some(&2) && total == 6,
        "kubectl: {counts:?}"
    );
    browser.send(json!({"expect": {
        "operator": OPERATOR,
        "counts": counts,
        "total": total,
        "attention": {q("broken"): "stalled", q("retrying"): "failing", q("waiting"): "stuck"},
        "notListed": [q("ok-1"), q("ok-2"), q("ok-3")],
    }}))?;

    // The stuck board's timeline names the module that moved it out of Start.
    let op = get(client, OPS.0, OPS.1, None, OPERATOR)
        .await?
        .context("the WasmOperator")?;
    let start_module = op["status"]["modules"]["Start"]
        .as_str()
        .context("status.modules.Start")?
        .to_string();
    browser.send(json!({"timeline": {
        "operator": OPERATOR, "resource": q("waiting"), "to": "Checking", "module": start_module,
        "screenshot": shots.join("resource.png"),
    }}))?;

    // A change while the page is open: a new board finishes, the retrying one is fixed.
    apply_yaml(client, &board("ok-4", finishing("ok-4")), Some(ns)).await?;
    apply_yaml(client, &board("retrying", finishing("retrying")), Some(ns)).await?;
    for name in ["ok-4", "retrying"] {
        wait_for(&format!("{name} Done"), T, || async {
            let o = get(client, BOARD.0, BOARD.1, Some(ns), name).await?;
            Ok(o.filter(|o| o["status"]["phase"] == "Done"))
        })
        .await?;
    }
    // Shadow counts are written every few seconds: wait until two reads 6 s apart agree.
    let shadow_same = settled_shadow_same(client).await?;
    let (counts, total) = kubectl_counts()?;
    ensure!(counts.get("Done") == Some(&5), "kubectl: {counts:?}");
    browser.send(json!({"expect": {
        "operator": OPERATOR,
        "counts": counts,
        "total": total,
        "attention": {q("broken"): "stalled", q("waiting"): "stuck"},
        "notListed": [q("retrying"), q("ok-4")],
        "shadow": {"phase": "Start", "same": shadow_same},
        "minRefreshes": 1,
    }}))?;
    let overview = shots.join("overview.png");
    browser.send(json!({"screenshot": overview}))?;
    browser.finish()?;
    let size = std::fs::metadata(&overview)?.len();
    ensure!(
        size > 10_000,
        "screenshot {} is {size} bytes",
        overview.display()
    );
    eprintln!("screenshots: {}", shots.display());

    // The markup in the broken board's message reached the page as text, not as markup.
    let html = http_get(
        url.trim_start_matches("http://").trim_end_matches('/'),
        "/?fragment=1",
    )?;
    ensure!(
        html.contains("&lt;b&gt;refused&lt;/b&gt; &amp; gone") && !html.contains("<b>refused"),
        "the worker's message is escaped"
    );
    Ok(())
}

/// The WasmOperator's `status.shadows[Start].same` once two reads 6 s apart agree (the host
/// writes the counts every few seconds).
async fn settled_shadow_same(client: &kube::Client) -> anyhow::Result<u64> {
    let mut last = None;
    for _ in 0..20 {
        let op = get(client, OPS.0, OPS.1, None, OPERATOR).await?;
        let now = op
            .as_ref()
            .and_then(|o| o["status"]["shadows"].as_array())
            .and_then(|s| s.iter().find(|s| s["phase"] == "Start"))
            .and_then(|s| s["same"].as_u64());
        if let (Some(n), true) = (now, now == last) {
            if n > 0 {
                return Ok(n);
            }
        }
        last = now;
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    bail!("status.shadows of {OPERATOR} did not settle with a same count above 0: {last:?}")
}
