//! The canary operator end to end, on a real kube-apiserver (KUBECONFIG; `deploy/local/test.sh`
//! starts the local one) with a real Prometheus (Debian's `prometheus`, installed by
//! `deploy/local/setup.sh`): the test serves `requests_total` counters itself on loopback, drives
//! them (healthy: only 200s; unhealthy: mostly 500s), runs Prometheus scraping them every second,
//! `wasmpilot deploy examples/canary` and a host of its own with `--prometheus-url`. Two
//! CanaryDeployments roll a new version out at the same time: the healthy canary's weight steps
//! up and it is promoted after the analysis period, the unhealthy one is rolled back at its first
//! measurement and stays rolled back.

mod common;

use anyhow::{anyhow, ensure, Context};
use axum::extract::State;
use axum::Router;
use common::cluster::*;
use kube::api::{Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// Loading the operator compiles five components (cached on disk after the first time).
const LOAD: Duration = Duration::from_secs(240);
const CD: (&str, &str) = ("canary.examples.io/v1", "CanaryDeployment");
const DEP: (&str, &str) = ("apps/v1", "Deployment");
const SVC: (&str, &str) = ("v1", "Service");
const VS: (&str, &str) = ("networking.istio.io/v1alpha3", "VirtualService");
const WOP: (&str, &str) = ("wasmpilot.io/v1alpha1", "WasmOperator");
const OPERATOR: &str = "canary";
/// Short enough for a test: a measurement every 2 s, promotion after 10 s.
const INTERVAL_SECS: u64 = 2;
const PERIOD_SECS: u64 = 10;
const STEP: i64 = 20;
const MAX_WEIGHT: i64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: deploy/local/test.sh starts one"]
async fn canary_rollouts_judged_by_a_real_prometheus() {
    let started = Instant::now();
    wasmpilot::modules::install_crypto_provider();
    let client = client().await;
    let root = common::repo_root();

    let exporter = Exporter::start().await;
    let prometheus = PrometheusServer::start(exporter.addr);
    prometheus
        .wait_ready()
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", prometheus.log_tail()));
    eprintln!(
        "[{:>5.1?}] prometheus {} scraping {}",
        started.elapsed(),
        prometheus.url,
        exporter.addr
    );

    // Ship the operator exactly as a user does (components were built by the test command).
    let status = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(["deploy", "--no-build", "examples/canary"])
        .current_dir(&root)
        .status()
        .expect("running wasmpilot deploy");
    assert!(
        status.success(),
        "wasmpilot deploy examples/canary failed (build the components first: cargo build \
         --release --target wasm32-wasip2 -p canary-initializing -p canary-waiting \
         -p canary-evaluating -p canary-promoting -p canary-rollback)"
    );
    let wasm_dir = common::wasm_dir();
    let mut host = Host::start(
        &[
            "--module-dir",
            wasm_dir.to_str().expect("utf-8 path"),
            "--prometheus-url",
            &prometheus.url,
        ],
        "wasmpilot-e2e-canary",
    );
    // From here on the WasmOperator exists: whatever fails, it and the namespace are removed.
    let mut ns = None;
    let result = async {
        operator_running(&client).await?;
        eprintln!("[{:>5.1?}] operator running", started.elapsed());
        let name = create_namespace(&client, "canary-e2e").await?;
        ns = Some(name.clone());
        scenario(&client, &host, &name, &exporter, &prometheus, started).await
    }
    .await;
    let alive = host.is_alive();
    cleanup(&client, ns.as_deref()).await;
    drop(prometheus);
    eprintln!("[{:>5.1?}] done", started.elapsed());
    assert!(alive, "the host process died");
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

async fn scenario(
    client: &Client,
    host: &Host,
    ns: &str,
    exporter: &Exporter,
    prometheus: &PrometheusServer,
    started: Instant,
) -> anyhow::Result<()> {
    let step = |what: &str| eprintln!("[{:>5.1?}] {what}", started.elapsed());

    // Two apps, each a target Deployment at version 1 and a CanaryDeployment for it.
    for app in ["good", "bad"] {
        apply_yaml(client, &target(app, 1).to_string(), Some(ns)).await?;
        let cd = json!({
            "apiVersion": CD.0, "kind": CD.1, "metadata": { "name": app },
            "spec": {
                "deployment": app, "ports": [8080], "successThreshold": 0.99,
                "measurementInterval": format!("{INTERVAL_SECS}s"),
                "analysisPeriod": format!("{PERIOD_SECS}s"),
                "stepWeight": STEP, "maxWeight": MAX_WEIGHT,
            },
        });
        apply_yaml(client, &cd.to_string(), Some(ns)).await?;
    }

    // The uid of every object Initializing created, to check none is replaced later.
    let mut uids: BTreeMap<(&str, String), Value> = BTreeMap::new();

    // Initializing → Waiting: primary (version 1) and canary (scaled to zero) Deployments, three
    // Services and a VirtualService sending everything to the primary, all owned by the
    // CanaryDeployment; the target is left alone.
    for app in ["good", "bad"] {
        let cd = wait_for(&format!("{app}: initialized, Waiting"), T, || async {
            let Some(o) = get(client, CD.0, CD.1, Some(ns), app).await? else {
                return Ok(None);
            };
            let s = &o["status"];
            let ok = s["phase"] == "Waiting"
                && s["primaryRevision"].is_string()
                && s["observedGeneration"] == o["metadata"]["generation"];
            Ok(ok.then_some(o))
        })
        .await?;
        let uid = cd["metadata"]["uid"].clone();
        let primary = must(
            get(client, DEP.0, DEP.1, Some(ns), &format!("{app}-primary")).await?,
            "primary Deployment",
        )?;
        let canary = must(
            get(client, DEP.0, DEP.1, Some(ns), &format!("{app}-canary")).await?,
            "canary Deployment",
        )?;
        ensure!(image(&primary) == version_image(app, 1), "{primary}");
        ensure!(primary["spec"]["replicas"] == 1, "{}", primary["spec"]);
        ensure!(canary["spec"]["replicas"] == 0, "{}", canary["spec"]);
        for name in [
            format!("{app}-primary"),
            format!("{app}-canary"),
            app.to_owned(),
        ] {
            let svc = must(get(client, SVC.0, SVC.1, Some(ns), &name).await?, "Service")?;
            ensure!(owned_by(&svc, &uid), "Service {name}: {}", svc["metadata"]);
            uids.insert(("Service", name), svc["metadata"]["uid"].clone());
        }
        let vs = must(
            get(client, VS.0, VS.1, Some(ns), app).await?,
            "VirtualService",
        )?;
        ensure!(owned_by(&vs, &uid) && owned_by(&primary, &uid) && owned_by(&canary, &uid));
        ensure!(weights(&vs) == (100, 0), "{}", vs["spec"]);
        for (kind, o) in [
            ("Deployment", &primary),
            ("Deployment", &canary),
            ("VirtualService", &vs),
        ] {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            uids.insert((kind, name), o["metadata"]["uid"].clone());
        }
        let target = must(get(client, DEP.0, DEP.1, Some(ns), app).await?, "target")?;
        ensure!(
            target["metadata"]["ownerReferences"].is_null()
                && target["metadata"]["labels"]["wasmpilot.io/operator"].is_null(),
            "the target is not an output: {}",
            target["metadata"]
        );
    }
    step("both initialized: primary v1, canary at 0, VirtualService 100/0");

    // Traffic: every Deployment serves requests; the new version of `good` answers only 200s,
    // the new version of `bad` mostly 500s. Wait until Prometheus answers the operator's own
    // query (rendered by the host's code) for both, so the first measurement has data.
    for app in ["good", "bad"] {
        exporter.serve(ns, &format!("{app}-primary"), 2, 0);
    }
    exporter.serve(ns, "good-canary", 2, 0);
    exporter.serve(ns, "bad-canary", 1, 3);
    let query = success_rate_query()?;
    for (app, expected) in [("good", 1.0), ("bad", 0.25)] {
        let cd = must(get(client, CD.0, CD.1, Some(ns), app).await?, app)?;
        let rate = wait_for(&format!("{app}: success rate in Prometheus"), T, || {
            let (query, cd) = (query.clone(), cd.clone());
            async move {
                Ok(prometheus
                    .success_rate(&query, &cd)
                    .await?
                    .filter(|r| (r - expected).abs() < 0.1))
            }
        })
        .await?;
        step(&format!(
            "{app}-canary success rate in Prometheus: {rate:.3}"
        ));
    }

    // Version 2 of both targets: Waiting sees a new revision, Evaluating starts the analysis.
    let rolled_out = Instant::now();
    for app in ["good", "bad"] {
        merge_patch(
            client,
            DEP,
            ns,
            app,
            json!({ "spec": { "template": { "spec": { "containers": [
                { "name": "web", "image": version_image(app, 2) }
            ] } } } }),
        )
        .await?;
    }
    step("both targets at version 2");

    // Watch both until each has a result; record what `good` went through on the way.
    let mut good_weights = BTreeSet::new();
    let mut good_vs_weights = BTreeSet::new();
    let mut phases: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut bad_done: Option<Instant> = None;
    let (good, bad) = loop {
        ensure!(
            rolled_out.elapsed() < T,
            "no results after {T:?}: phases seen {phases:?}, good weights {good_weights:?}"
        );
        let good = must(get(client, CD.0, CD.1, Some(ns), "good").await?, "good")?;
        let bad = must(get(client, CD.0, CD.1, Some(ns), "bad").await?, "bad")?;
        for (app, o) in [("good", &good), ("bad", &bad)] {
            if let Some(p) = o["status"]["phase"].as_str() {
                phases.entry(app).or_default().insert(p.to_owned());
            }
        }
        if let Some(w) = good["status"]["canaryWeight"].as_i64() {
            good_weights.insert(w);
        }
        if let Some(vs) = get(client, VS.0, VS.1, Some(ns), "good").await? {
            good_vs_weights.insert(weights(&vs).1);
        }
        if bad_done.is_none() && finished(&bad) {
            bad_done = Some(Instant::now());
            step("bad: rolled back");
        }
        if finished(&good) && finished(&bad) {
            break (good, bad);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let promoted_after = rolled_out.elapsed();
    step(&format!(
        "good: promoted after {promoted_after:.1?} (weights {good_weights:?})"
    ));

    // bad: rolled back at its first measurement; the primary still runs version 1, the canary
    // (version 2) is scaled to zero, all traffic goes to the primary.
    let s = &bad["status"];
    ensure!(
        s["lastResult"]["result"] == "RolledBack",
        "bad: {}",
        bad["status"]
    );
    ensure!(
        s["failedRevision"] == s["canaryRevision"]
            && s["lastResult"]["revision"] == s["canaryRevision"],
        "bad: {s}"
    );
    ensure!(s["primaryRevision"] != s["canaryRevision"], "bad: {s}");
    let rate = s["lastMeasurement"]["successRate"].as_f64().unwrap_or(1.0);
    ensure!(rate < 0.5, "bad: measured {rate} (about 0.25 served): {s}");
    ensure!(
        s["startedAt"].is_null() && s["canaryWeight"] == 0,
        "bad: {s}"
    );
    ensure!(
        bad_done.is_some_and(|t| t.duration_since(rolled_out) < Duration::from_secs(PERIOD_SECS)),
        "bad was not rolled back before the analysis period ended"
    );
    check_objects(client, ns, "bad", 1, 2).await?;

    // good: its weight stepped (STEP, 2×STEP, … up to MAX_WEIGHT) while Prometheus said 1.0,
    // then it was promoted: the primary runs version 2, the canary is scaled to zero.
    let s = &good["status"];
    ensure!(
        s["lastResult"]["result"] == "Promoted",
        "good: {}",
        good["status"]
    );
    ensure!(
        s["primaryRevision"] == s["canaryRevision"]
            && s["lastResult"]["revision"] == s["canaryRevision"],
        "good: {s}"
    );
    ensure!(
        s["lastMeasurement"]["successRate"].as_f64() == Some(1.0),
        "good: {s}"
    );
    ensure!(
        s["startedAt"].is_null() && s["canaryWeight"] == 0,
        "good: {s}"
    );
    ensure!(
        good_weights.contains(&STEP) && good_weights.contains(&(2 * STEP)),
        "good: the canary's weight stepped: {good_weights:?}"
    );
    ensure!(
        good_weights.iter().all(|w| *w <= MAX_WEIGHT),
        "{good_weights:?}"
    );
    ensure!(
        good_vs_weights.iter().any(|w| *w >= 2 * STEP),
        "good: the VirtualService followed: {good_vs_weights:?}"
    );
    // The host's clock has whole seconds (rounded), hence the second of slack.
    ensure!(
        promoted_after + Duration::from_secs(1) >= Duration::from_secs(PERIOD_SECS),
        "good: promoted after {promoted_after:?}, before the analysis period"
    );
    check_objects(client, ns, "good", 2, 2).await?;

    // The host's log tells the whole story (Evaluating is too brief to poll; its PhaseChanged
    // Events are aggregated into one series per resource). Every phase returned the same
    // objects on every run, so nothing was ever pruned, and the objects are the ones
    // Initializing created.
    let log = host.log_text();
    for (app, transitions) in [
        (
            "good",
            [
                ("Waiting", "Evaluating"),
                ("Evaluating", "Promoting"),
                ("Promoting", "Waiting"),
            ],
        ),
        (
            "bad",
            [
                ("Waiting", "Evaluating"),
                ("Evaluating", "Rollback"),
                ("Rollback", "Waiting"),
            ],
        ),
    ] {
        let resource = format!("resource={ns}/{app} ");
        let changes: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&resource) && l.contains("phase changed"))
            .collect();
        for (from, to) in transitions {
            ensure!(
                changes
                    .iter()
                    .any(|l| l.contains(&format!("from={from} to={to} "))),
                "{app}: no transition {from} → {to} in the host log: {changes:#?} (phases polled: {phases:?})"
            );
        }
        ensure!(
            changes.iter().all(|l| l.contains(" pruned=0")),
            "{app}: something was pruned: {changes:#?}"
        );
    }
    for (key, uid) in &uids {
        let (kind, name) = key;
        let (api_version, kind) = match *kind {
            "Deployment" => DEP,
            "Service" => SVC,
            _ => VS,
        };
        let now = must(get(client, api_version, kind, Some(ns), name).await?, name)?;
        ensure!(
            now["metadata"]["uid"] == *uid,
            "{kind} {name} was deleted and created again"
        );
    }

    // A rolled-back revision is not analysed again: bad stays idle for a few intervals.
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL_SECS + 1)).await;
    let again = must(get(client, CD.0, CD.1, Some(ns), "bad").await?, "bad")?;
    ensure!(
        again["status"]["phase"] == "Waiting"
            && again["status"]["startedAt"].is_null()
            && again["status"]["lastResult"] == bad["status"]["lastResult"],
        "bad stays rolled back: {}",
        again["status"]
    );
    step("bad stays rolled back");

    // The operator's own override (spec.prometheus.url) on loopback: the host does not connect
    // there for an operator (only its own --prometheus-url may be internal), so it refuses the
    // definition as it loads it, naming the field and the address; dropping the override
    // recovers without touching the resource.
    let operators = dynamic_api(client, WOP.0, WOP.1, None).await?;
    let set_url = |url: Value| json!({"spec": {"prometheus": {"url": url}}});
    operators
        .patch(
            OPERATOR,
            &PatchParams::default(),
            &Patch::Merge(&set_url(json!("http://127.0.0.1:9"))),
        )
        .await?;
    let o = wait_condition(
        client,
        WOP,
        None,
        OPERATOR,
        ("Ready", "False", "InvalidDefinition"),
        T,
    )
    .await
    .context("the operator's Prometheus on loopback refused as the definition loads")?;
    let msg = condition(&o, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default();
    ensure!(
        msg.contains("spec.prometheus.url: a loopback address 127.0.0.1, which the host does not fetch from for an operator"),
        "the message names the field and the address the host does not fetch from: {msg}"
    );
    step("an operator's Prometheus on loopback refused at load (InvalidDefinition)");
    operators
        .patch(
            OPERATOR,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"prometheus": null}})),
        )
        .await?;
    wait_operators_running(client, &[OPERATOR]).await?;
    merge_patch(
        client,
        DEP,
        ns,
        "good",
        json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "web", "image": version_image("good", 3) }
        ] } } } }),
    )
    .await?;
    wait_condition(
        client,
        CD,
        Some(ns),
        "good",
        ("Synced", "True", "PhaseCompleted"),
        T,
    )
    .await
    .context("recovery once the override is gone")?;
    step("recovered with the host's Prometheus");
    Ok(())
}

/// An analysis ended and the phase is Waiting again.
fn finished(cd: &Value) -> bool {
    let s = &cd["status"];
    s["phase"] == "Waiting" && s["lastResult"]["result"].is_string() && s["startedAt"].is_null()
}

/// After a result: the primary runs `primary_version`, the canary runs version `canary_version`
/// scaled to zero, and the VirtualService sends everything to the primary.
async fn check_objects(
    client: &Client,
    ns: &str,
    app: &str,
    primary_version: u32,
    canary_version: u32,
) -> anyhow::Result<()> {
    let primary = must(
        get(client, DEP.0, DEP.1, Some(ns), &format!("{app}-primary")).await?,
        "primary",
    )?;
    let canary = must(
        get(client, DEP.0, DEP.1, Some(ns), &format!("{app}-canary")).await?,
        "canary",
    )?;
    let vs = must(
        get(client, VS.0, VS.1, Some(ns), app).await?,
        "VirtualService",
    )?;
    ensure!(
        image(&primary) == version_image(app, primary_version),
        "{app}: primary {}",
        primary["spec"]
    );
    ensure!(
        primary["spec"]["replicas"] == 1,
        "{app}: {}",
        primary["spec"]
    );
    ensure!(
        primary["spec"]["selector"]["matchLabels"]["canary.examples.io/pod"]
            == format!("{app}-primary"),
        "{app}: {}",
        primary["spec"]["selector"]
    );
    ensure!(
        image(&canary) == version_image(app, canary_version) && canary["spec"]["replicas"] == 0,
        "{app}: canary {}",
        canary["spec"]
    );
    ensure!(weights(&vs) == (100, 0), "{app}: {}", vs["spec"]);
    Ok(())
}

fn target(app: &str, version: u32) -> Value {
    json!({
        "apiVersion": DEP.0, "kind": DEP.1,
        "metadata": { "name": app, "labels": { "app": app } },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": app } },
            "template": {
                "metadata": { "labels": { "app": app } },
                "spec": { "containers": [{
                    "name": "web", "image": version_image(app, version),
                    "ports": [{ "containerPort": 8080 }],
                }] },
            },
        },
    })
}

fn version_image(app: &str, version: u32) -> String {
    format!("registry.example.com/{app}:{version}")
}

fn image(deployment: &Value) -> &str {
    deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

/// The (primary, canary) weights of the VirtualService's first route.
fn weights(vs: &Value) -> (i64, i64) {
    let route = &vs["spec"]["http"][0]["route"];
    (
        route[0]["weight"].as_i64().unwrap_or(-1),
        route[1]["weight"].as_i64().unwrap_or(-1),
    )
}

fn owned_by(obj: &Value, uid: &Value) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.len() == 1 && o[0]["uid"] == *uid && o[0]["controller"] == true)
}

/// The Evaluating phase's `successRate` query, as declared in examples/canary/operator.yaml.
fn success_rate_query() -> anyhow::Result<wasmpilot::crd::QuerySpec> {
    let path = common::repo_root().join("examples/canary/operator.yaml");
    let op: wasmpilot::crd::WasmOperator =
        serde_yaml::from_str(&std::fs::read_to_string(&path)?).context("operator.yaml")?;
    op.spec
        .phases
        .iter()
        .find(|p| p.name == "Evaluating")
        .and_then(|p| p.queries.iter().find(|q| q.name == "successRate"))
        .cloned()
        .ok_or_else(|| anyhow!("no successRate query in the Evaluating phase"))
}

/// A JSON merge patch (as `kubectl patch --type merge`).
async fn merge_patch(
    client: &Client,
    (api_version, kind): (&str, &str),
    ns: &str,
    name: &str,
    patch: Value,
) -> anyhow::Result<()> {
    let api = dynamic_api(client, api_version, kind, Some(ns)).await?;
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching {kind} {ns}/{name}"))?;
    Ok(())
}

/// Waits until the host runs the operator with all five phase components loaded.
async fn operator_running(client: &Client) -> anyhow::Result<()> {
    let op = wait_condition(
        client,
        WOP,
        None,
        OPERATOR,
        ("Ready", "True", "ControllerRunning"),
        LOAD,
    )
    .await?;
    let modules: Vec<&String> = op["status"]["modules"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    ensure!(
        modules
            == [
                "Evaluating",
                "Initializing",
                "Promoting",
                "Rollback",
                "Waiting"
            ],
        "modules: {}",
        op["status"]
    );
    Ok(())
}

/// Removes the operator (so later tests' hosts do not reconcile it), then the namespace.
async fn cleanup(client: &Client, ns: Option<&str>) {
    if let Err(e) = delete(client, WOP.0, WOP.1, None, OPERATOR).await {
        eprintln!("deleting WasmOperator {OPERATOR}: {e:#}");
    }
    let Some(ns) = ns else { return };
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    if let Err(e) = namespaces.delete(ns, &Default::default()).await {
        eprintln!("deleting namespace {ns}: {e:#}");
    }
}

/// One `requests_total` series: namespace, deployment, status code.
type SeriesKey = (String, String, &'static str);

/// Request counters and how many each gains per tick (100 ms).
#[derive(Default)]
struct Traffic {
    series: BTreeMap<SeriesKey, (u64, u64)>,
}

/// The test's metrics endpoint on loopback: `GET /metrics` in the Prometheus text format,
/// counters that grow at the rates `serve` sets.
struct Exporter {
    addr: SocketAddr,
    traffic: Arc<Mutex<Traffic>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Exporter {
    async fn start() -> Exporter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the exporter");
        let addr = listener.local_addr().expect("exporter address");
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let app = Router::new()
            .route("/metrics", axum::routing::get(render_metrics))
            .with_state(traffic.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let ticking = traffic.clone();
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                if let Ok(mut t) = ticking.lock() {
                    for (count, per_tick) in t.series.values_mut() {
                        *count += *per_tick;
                    }
                }
            }
        });
        Exporter {
            addr,
            traffic,
            tasks: vec![server, ticker],
        }
    }

    /// From now on `deployment` serves `ok` 200s and `errors` 500s per tick (per 100 ms).
    fn serve(&self, ns: &str, deployment: &str, ok: u64, errors: u64) {
        let mut t = self.traffic.lock().expect("traffic lock");
        for (code, per_tick) in [("200", ok), ("500", errors)] {
            let entry = t
                .series
                .entry((ns.to_owned(), deployment.to_owned(), code))
                .or_default();
            entry.1 = per_tick;
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn render_metrics(State(traffic): State<Arc<Mutex<Traffic>>>) -> String {
    let mut out = String::from(
        "# HELP requests_total Requests served (test traffic).\n# TYPE requests_total counter\n",
    );
    if let Ok(t) = traffic.lock() {
        for ((ns, deployment, code), (count, _)) in &t.series {
            out.push_str(&format!(
                "requests_total{{namespace=\"{ns}\",deployment=\"{deployment}\",code=\"{code}\"}} {count}\n"
            ));
        }
    }
    out
}

/// A Prometheus of the test's own: a free loopback port, a temporary config and storage
/// directory, scraping the exporter every second. Killed when dropped.
struct PrometheusServer {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl PrometheusServer {
    fn start(target: SocketAddr) -> PrometheusServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n- job_name: canary-e2e\n  static_configs:\n  - targets: ['{target}']\n"
            ),
        )
        .expect("writing prometheus.yml");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = dir.path().join("prometheus.log");
        let file = std::fs::File::create(&log).expect("prometheus log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::from(file.try_clone().expect("log fd")))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting prometheus: {e} (install it: deploy/local/setup.sh)")
            });
        PrometheusServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        }
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let ready = format!("{}/-/ready", self.url);
        wait_for("prometheus ready", T, || async {
            let ok = http
                .get(&ready)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            Ok(ok.then_some(()))
        })
        .await
    }

    /// What the operator's query answers for `cd` now, run by the host's own query code.
    async fn success_rate(
        &self,
        query: &wasmpilot::crd::QuerySpec,
        cd: &Value,
    ) -> anyhow::Result<Option<f64>> {
        let now = jiff::Timestamp::now().to_string();
        let inputs = wasmpilot::promql::Prometheus::default()
            .run(
                std::slice::from_ref(query),
                cd,
                Some(wasmpilot::promql::Endpoint {
                    url: &self.url,
                    timeout: Duration::from_secs(5),
                    operator_chosen: false,
                }),
                &now,
            )
            .await?;
        let sample = inputs
            .first()
            .and_then(|i| i.objects.first())
            .map(|o| serde_json::from_str::<Value>(o))
            .transpose()?;
        Ok(sample.and_then(|s| s["value"].as_f64()))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- prometheus log tail ----\n{}", self.log_tail());
        }
    }
}
