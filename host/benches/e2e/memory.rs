//! Memory: host RSS with 10 WasmOperators loaded and 10,000 Deployments cached, against the
//! native kube-rs AutoRoute controller caching the same Deployments, same cluster, same run.
//!
//! The Deployments look like `kubectl apply` made them (the sandbox bench's fixtures: full pod
//! template, nine labels, kubectl's last-applied annotation); the apiserver adds managedFields
//! and the controller manager a status. Each WasmOperator is the AutoRoute operator on its own
//! kind (`MemRoute0`…`MemRoute9`, copies of the AutoRoute CRD) with the same three modules, so
//! all ten read Deployments and write Services, Gateways and VirtualServices.
//!
//! `WASMPILOT_BENCH_MEMORY_HOLD=<seconds>`: each host (variant, operator count) is kept running
//! that long after its first measurement, its PIDs printed, to be looked into (gdb, /proc).

#[path = "../fixtures/mod.rs"]
#[allow(dead_code)]
mod fixtures;

use crate::{
    cluster_api, create_all, create_namespaces, delete_namespaces, proc_stats, settle_deployments,
    Gvk, HostVariant, Killed, WASM_OPERATOR,
};
use anyhow::{bail, Context};
use kube::api::{DeleteParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Namespaces the Deployments spread over (`WASMPILOT_BENCH_MEMORY_NAMESPACES`, default 50):
/// sharded replicas each cache the namespaces of their buckets.
fn namespace_count() -> usize {
    std::env::var("WASMPILOT_BENCH_MEMORY_NAMESPACES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
}

/// Operator counts measured (`WASMPILOT_BENCH_MEMORY_OPERATORS`, comma-separated, default
/// `10`): with several (`10,20`), operators are added between them and the growth per added
/// operator reading the same kind is printed.
fn operator_counts() -> Vec<usize> {
    let mut counts: Vec<usize> = std::env::var("WASMPILOT_BENCH_MEMORY_OPERATORS")
        .unwrap_or_else(|_| "10".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.is_empty() {
        counts.push(10);
    }
    counts
}

/// Rounds of measurements on the same Deployments (`WASMPILOT_BENCH_MEMORY_ROUNDS`, default 3):
/// each figure is their median with min–max.
fn rounds() -> usize {
    std::env::var("WASMPILOT_BENCH_MEMORY_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// Operators an interrupted run may have left, removed before a run however many it makes.
const CLEANUP_AT_LEAST: usize = 40;

const GROUP: &str = "bench.wasmpilot.io";

/// The metric counting the Deployments a host's operators' input caches hold.
const DEPLOYMENTS_CACHED: &str =
    "wasmpilot_cached_objects{kind=\"apps/v1 Deployment\",cache=\"inputs\"}";
const CRD: Gvk = ("apiextensions.k8s.io", "v1", "CustomResourceDefinition");

/// One controller (or one replica of several) measured once.
struct Sample {
    label: String,
    rss_mib: f64,
    /// Anonymous memory only (`RssAnon`): the heap, stacks and workers' memories, without the
    /// binary's code and data pages (file-backed, ~22 MiB here, shared by processes of one
    /// binary: sharded replicas on one node share them).
    anon_mib: f64,
    peak_mib: f64,
    ready_seconds: f64,
    /// Deployments its operators' input caches hold once RSS is steady (a sharded replica
    /// keeps only the namespaces of the buckets it holds).
    cached: f64,
}

pub async fn run(client: &Client, hosts: &[HostVariant], objects: usize) -> anyhow::Result<()> {
    let spread = namespace_count().max(1);
    let counts = operator_counts();
    let operators = counts
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", then ");
    println!(
        "\nMemory: {operators} WasmOperators (each reading Deployments, writing Services, Gateways, VirtualServices), {objects} Deployments cached in {spread} namespaces, {} rounds\n",
        rounds()
    );
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        % 100_000;
    let namespaces: Vec<String> = (0..spread)
        .map(|i| format!("bench-memory-{stamp}-{i}"))
        .collect();
    let template = cluster_api(client, WASM_OPERATOR)
        .get("autoroute")
        .await
        .context("the autoroute WasmOperator")?;
    let result = measure_all(client, hosts, objects, &counts, &namespaces, &template).await;
    cleanup(client, counts.last().copied().unwrap_or(0)).await;
    restore_template(client, &template).await?;
    delete_namespaces(client, &namespaces).await?;
    let samples = result?;
    // Per label (in first-seen order): the median of the rounds, with min–max.
    let mut labels: Vec<&str> = Vec::new();
    for s in &samples {
        if !labels.contains(&s.label.as_str()) {
            labels.push(&s.label);
        }
    }
    let summary = |label: &str, f: fn(&Sample) -> f64| -> (f64, f64, f64) {
        let mut v: Vec<f64> = samples.iter().filter(|s| s.label == label).map(f).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let native = summary(labels[0], |s| s.rss_mib).0;
    println!(
        "{:<58} {:>24} {:>24} {:>10} {:>8} {:>14} {:>22}",
        "controller",
        "RSS (steady), min–max",
        "anonymous, min–max",
        "peak RSS",
        "ratio",
        "synced after",
        "Deployments cached"
    );
    for label in &labels {
        let (rss, lo, hi) = summary(label, |s| s.rss_mib);
        let (anon, anon_lo, anon_hi) = summary(label, |s| s.anon_mib);
        let (cached, cached_lo, cached_hi) = summary(label, |s| s.cached);
        println!(
            "{:<58} {:>6.0} MiB ({:>4.0}–{:<4.0}) {:>6.1} MiB ({:>4.1}–{:<4.1}) {:>6.0} MiB {:>7.2}× {:>12.1} s {:>7.0} ({:>5.0}–{:<5.0})",
            label,
            rss,
            lo,
            hi,
            anon,
            anon_lo,
            anon_hi,
            summary(label, |s| s.peak_mib).0,
            rss / native,
            summary(label, |s| s.ready_seconds).0,
            cached,
            cached_lo,
            cached_hi
        );
    }
    // Issue 32: each sharded replica against one host of the same build and flags.
    for host in hosts.iter().filter(|h| h.replicas > 1) {
        let Some(single) = hosts.iter().find(|h| {
            h.replicas == 1 && h.binary == host.binary && h.args == host.args && h.env == host.env
        }) else {
            continue;
        };
        for &n in &counts {
            let what = format!("{n} operators");
            let (sharded, one) = (sample_label(host, &what), sample_label(single, &what));
            if !(labels.contains(&sharded.as_str()) && labels.contains(&one.as_str())) {
                continue;
            }
            println!(
                "{sharded}: each replica / one host = {:.2}× RSS, {:.2}× anonymous",
                summary(&sharded, |s| s.rss_mib).0 / summary(&one, |s| s.rss_mib).0,
                summary(&sharded, |s| s.anon_mib).0 / summary(&one, |s| s.anon_mib).0,
            );
        }
    }
    // Goal 31.3's second half: what each operator added to the same kind costs.
    for host in hosts {
        for pair in counts.windows(2) {
            let at = |n: usize| {
                let label = sample_label(host, &format!("{n} operators"));
                labels
                    .contains(&label.as_str())
                    .then(|| summary(&label, |s| s.rss_mib))
            };
            if let (Some(from), Some(to)) = (at(pair[0]), at(pair[1])) {
                let added = (pair[1] - pair[0]) as f64;
                println!(
                    "{}: {} → {} operators: {:+.2} MiB per added operator (medians {:.1} → {:.1} MiB; from the extremes {:+.2} to {:+.2})",
                    host.label,
                    pair[0],
                    pair[1],
                    (to.0 - from.0) / added,
                    from.0,
                    to.0,
                    (to.1 - from.2) / added,
                    (to.2 - from.1) / added,
                );
            }
        }
    }
    Ok(())
}

async fn measure_all(
    client: &Client,
    hosts: &[HostVariant],
    objects: usize,
    counts: &[usize],
    namespaces: &[String],
    template: &kube::api::DynamicObject,
) -> anyhow::Result<Vec<Sample>> {
    create_namespaces(client, namespaces).await?;
    // The hosts with their operators and no Deployments yet: what the objects add.
    let operators = counts.first().copied().unwrap_or(10);
    create_operators(client, template, 0, operators).await?;
    let mut idle = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let what = format!("{operators} operators, no Deployments");
        idle.extend(measure_host(host, i, &what, operators, 0).await?);
    }

    let created = Instant::now();
    let per_namespace = objects.div_ceil(namespaces.len());
    let deployments = (0..objects).map(|i| {
        let ns = &namespaces[i / per_namespace];
        (ns.clone(), as_applied(fixtures::deployment(i), ns))
    });
    create_all(client, ("apps", "v1", "Deployment"), deployments, 32).await?;
    settle_deployments(client, namespaces).await?;
    println!(
        "({objects} Deployments created and settled in {:.0} s)",
        created.elapsed().as_secs_f64()
    );

    let mut samples = Vec::new();
    for round in 0..rounds() {
        // Native: one controller, its Deployment reflector and AutoRoute/Service watches.
        let child = Command::new(std::env::current_exe()?)
            .arg("--native-controller")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id();
        let _child = Killed(child);
        let started = Instant::now();
        let ready = steady_rss(pid).await;
        let (peak, _) = proc_stats(pid);
        samples.push(Sample {
            label: "native (1 controller)".into(),
            rss_mib: rss_mib(pid),
            anon_mib: anon_mib(pid),
            peak_mib: peak,
            ready_seconds: ready.unwrap_or(started.elapsed()).as_secs_f64(),
            // (Its reflector holds every Deployment; it has no metric for it.)
            cached: objects as f64,
        });
        drop(_child);
        if round == 0 {
            samples.append(&mut idle);
        }
        for (i, host) in hosts.iter().enumerate() {
            let what = format!("{operators} operators");
            samples.extend(measure_host(host, i, &what, operators, objects).await?);
        }
    }
    // More operators on the same Deployments: the growth per operator.
    let mut loaded = operators;
    for &more in &counts[1..] {
        create_operators(client, template, loaded, more).await?;
        loaded = more;
        for _ in 0..rounds() {
            for (i, host) in hosts.iter().enumerate() {
                let what = format!("{more} operators");
                samples.extend(measure_host(host, i, &what, more, objects).await?);
            }
        }
    }
    Ok(samples)
}

/// The label of a host's samples: its variant, what was measured, and its replicas.
fn sample_label(host: &HostVariant, what: &str) -> String {
    if host.replicas > 1 {
        format!("{} ({what}), each of {}", host.label, host.replicas)
    } else {
        format!("{} ({what})", host.label)
    }
}

/// Starts a host (or its `+replicas=N` sharded replicas together), waits for each `/readyz`
/// 200 (operators' modules loaded, watches synced; sharded: its share of buckets held and
/// listed) and steady RSS; the hosts are stopped when this returns. Sharded: one sample per
/// replica, all under one label. The premise is checked from the hosts' metrics: each runs
/// all `operators`, and together they cache all `objects` Deployments (else what is measured
/// is a host whose operators failed to load).
async fn measure_host(
    host: &HostVariant,
    i: usize,
    what: &str,
    operators: usize,
    objects: usize,
) -> anyhow::Result<Vec<Sample>> {
    let label = sample_label(host, what);
    let mut running = Vec::new();
    for (k, mut command) in host.replica_commands().into_iter().enumerate() {
        let addr = format!("127.0.0.1:{}", 18490 + i * 10 + k);
        let log = std::env::temp_dir().join(format!("wasmpilot-bench-memory-{i}-{k}.log"));
        let child = command
            .args(["--metrics-addr", &addr])
            .env("WASMPILOT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        running.push((addr, log, Killed(child)));
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    for (addr, log, child) in &mut running {
        let pid = child.0.id();
        // (Builds before 2026-11-22 could stay at 503 with several operators: then steady RSS only.)
        let mut ready = None;
        while started.elapsed() < Duration::from_secs(120) {
            if http_status(addr, "/readyz") == Some(200) {
                ready = Some(started.elapsed());
                break;
            }
            if let Ok(Some(status)) = child.0.try_wait() {
                bail!(
                    "{} exited with {status} (log: {})",
                    host.label,
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        samples.push((pid, ready, log.clone(), addr.clone()));
    }
    let mut cached = 0.0;
    for (addr, log, _) in &running {
        let deadline = Instant::now() + Duration::from_secs(60);
        let running_here = loop {
            let n = metric_sum(addr, "wasmpilot_operators_running").unwrap_or(0.0);
            if n >= operators as f64 || Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if running_here < operators as f64 {
            bail!(
                "{}: {running_here} of {operators} operators running (log: {})",
                host.label,
                log.display()
            );
        }
        cached += metric_sum(addr, DEPLOYMENTS_CACHED).unwrap_or(0.0);
    }
    if cached < objects as f64 {
        bail!(
            "{}: {cached} of {objects} Deployments cached by its operators' inputs",
            host.label
        );
    }
    let mut measured = Vec::new();
    for (pid, ready, log, addr) in samples {
        let steady = steady_rss(pid).await;
        let cached = metric_sum(&addr, DEPLOYMENTS_CACHED).unwrap_or(0.0);
        let ready = match ready {
            Some(r) => r,
            None => {
                eprintln!(
                    "{}: /readyz never answered 200 (log: {}); measured at steady RSS",
                    host.label,
                    log.display()
                );
                started.elapsed() - steady.map_or(Duration::ZERO, |_| Duration::from_secs(3))
            }
        };
        let (peak, _) = proc_stats(pid);
        measured.push(Sample {
            label: label.clone(),
            rss_mib: rss_mib(pid),
            anon_mib: anon_mib(pid),
            peak_mib: peak,
            ready_seconds: ready.as_secs_f64(),
            cached,
        });
    }
    // To look inside the hosts while they run (gdb, heaptrack's attach, /proc/PID/smaps): the
    // first time each is measured.
    static HELD: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let first_time = {
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        let first = !held.contains(&label);
        held.push(label.clone());
        first
    };
    if let Some(hold) = std::env::var("WASMPILOT_BENCH_MEMORY_HOLD")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|_| first_time)
    {
        let pids: Vec<u32> = running.iter().map(|(_, _, c)| c.0.id()).collect();
        eprintln!("{label}: holding PIDs {pids:?} for {hold} s (WASMPILOT_BENCH_MEMORY_HOLD)");
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }
    Ok(measured)
}

/// A fixture Deployment as a client would create it: no server-set fields.
fn as_applied(mut d: Value, ns: &str) -> Value {
    if let Some(meta) = d["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        ] {
            meta.remove(k);
        }
        meta.insert("namespace".into(), json!(ns));
    }
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    d["spec"]["replicas"] = json!(0);
    d
}

/// Waits until RSS has not moved by more than 1 % for 3 s (at most 60 s); returns when it
/// first held steady.
async fn steady_rss(pid: u32) -> Option<Duration> {
    let started = Instant::now();
    let mut history: Vec<f64> = Vec::new();
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        history.push(rss_mib(pid));
        if history.len() >= 4 {
            let last = &history[history.len() - 4..];
            let (lo, hi) = last
                .iter()
                .fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            if hi > 0.0 && (hi - lo) / hi < 0.01 {
                return Some(started.elapsed());
            }
        }
    }
    None
}

/// `RssAnon` of `pid` in MiB (0 if unreadable).
fn anon_mib(pid: u32) -> f64 {
    status_kib(pid, "RssAnon:") / 1024.0
}

fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:") / 1024.0
}

/// A `/proc/PID/status` field in KiB (0 if unreadable).
fn status_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// The sum of the samples of a metric (`name` or `name{labels}` as the exposition prints it)
/// a host serves at `/metrics`.
fn metric_sum(addr: &str, name: &str) -> Option<f64> {
    let response = http_get(addr, "/metrics")?;
    Some(
        response
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

fn http_status(addr: &str, path: &str) -> Option<u16> {
    http_get(addr, path)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The whole response (status line, headers, body) to `GET path` at `addr`.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

/// Operators `from..to`: copies of the AutoRoute CRD (kinds MemRoute0…) and of `op`, the deployed `autoroute`
/// WasmOperator, each on its own kind, sharing its modules.
async fn create_operators(
    client: &Client,
    op: &kube::api::DynamicObject,
    from: usize,
    to: usize,
) -> anyhow::Result<()> {
    let crds = cluster_api(client, CRD);
    let wasm_ops = cluster_api(client, WASM_OPERATOR);
    let crd = crds
        .get("autoroutes.examples.io")
        .await
        .context("the AutoRoute CRD (wasmpilot deploy examples/autoroute)")?;
    if from == 0 {
        // Exactly the operators counted loaded: the template itself goes, orphaning its module
        // ConfigMaps (owned by it) rather than letting them be collected: the copies read them.
        wasm_ops
            .delete(
                "autoroute",
                &DeleteParams {
                    propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
                    ..DeleteParams::default()
                },
            )
            .await?;
        // Leftovers of an interrupted run go first.
        cleanup(client, to.max(CLEANUP_AT_LEAST)).await;
    }
    let started = Instant::now();
    for i in from..to {
        while crds
            .get_opt(&format!("memroute{i}s.{GROUP}"))
            .await?
            .is_some()
            && started.elapsed() < Duration::from_secs(60)
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    for i in from..to {
        let kind = format!("MemRoute{i}");
        let plural = format!("memroute{i}s");
        let mut spec = crd.data["spec"].clone();
        spec["group"] = json!(GROUP);
        spec["names"] = json!({"kind": kind, "listKind": format!("{kind}List"), "plural": plural, "singular": format!("memroute{i}")});
        let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                          "metadata": {"name": format!("{plural}.{GROUP}")}, "spec": spec});
        crds.create(&PostParams::default(), &serde_json::from_value(body)?)
            .await?;
    }
    // Established before the operators load (else they wait for their retry).
    for i in from..to {
        let name = format!("memroute{i}s.{GROUP}");
        let started = Instant::now();
        loop {
            let c = crds.get(&name).await?;
            let established = c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
            if established || started.elapsed() > Duration::from_secs(30) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for i in from..to {
        let mut spec = op.data["spec"].clone();
        spec["resource"] =
            json!({"apiVersion": format!("{GROUP}/v1"), "kind": format!("MemRoute{i}")});
        let name = format!("membench-{i}");
        // Each acts as its own account (as `wasmpilot deploy` grants one); the bench's host runs
        // as the admin, so nothing is granted to the shipped host account.
        let typed: wasmpilot::crd::WasmOperatorSpec = serde_json::from_value(spec.clone())?;
        let target = wasmpilot::rbac::GrantTarget {
            identity_namespace: wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE.into(),
            host_account: None,
            namespaces: Vec::new(),
        };
        wasmpilot::deploy::apply_grants(client, &name, &typed, &target).await?;
        let body = json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
                          "metadata": {"name": name}, "spec": spec});
        wasm_ops
            .create(&PostParams::default(), &serde_json::from_value(body)?)
            .await?;
    }
    Ok(())
}

/// The `autoroute` WasmOperator again, as it was before the bench (the parts after this one
/// use it).
async fn restore_template(
    client: &Client,
    template: &kube::api::DynamicObject,
) -> anyhow::Result<()> {
    let body = json!({"apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
                      "metadata": {"name": "autoroute"}, "spec": template.data["spec"]});
    let wasm_ops = cluster_api(client, WASM_OPERATOR);
    if wasm_ops.get_opt("autoroute").await?.is_none() {
        wasm_ops
            .create(&PostParams::default(), &serde_json::from_value(body)?)
            .await?;
    }
    Ok(())
}

async fn cleanup(client: &Client, operators: usize) {
    let crds = cluster_api(client, CRD);
    let wasm_ops = cluster_api(client, WASM_OPERATOR);
    for i in 0..operators {
        let _ = wasm_ops
            .delete(&format!("membench-{i}"), &DeleteParams::default())
            .await;
        let _ = crds
            .delete(&format!("memroute{i}s.{GROUP}"), &DeleteParams::default())
            .await;
    }
}
