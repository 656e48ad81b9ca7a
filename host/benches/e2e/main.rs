//! End to end on the local real cluster: N AutoRoutes (2 Deployments each, 20 per namespace
//! unless `WASMPILOT_BENCH_E2E_ROUTES_PER_NAMESPACE` says otherwise)
//! from creation to all Ready — wasmpilot (`wasmpilot run`, the example's Wasm workers) vs a
//! native kube-rs controller with the same logic (`native_autoroute.rs`), in the same run on the
//! same cluster. Prints time ratio, API requests per AutoRoute, controller peak RSS and CPU.
//!
//! Run: `deploy/local/bench.sh` (or, with a cluster up and components built,
//! `cargo bench -p wasmpilot --bench e2e --profile e2e-bench`). Sizes: `WASMPILOT_BENCH_E2E_SIZES=200,1000`;
//! host flag sets to compare: `WASMPILOT_BENCH_E2E_HOST_ARGS="--no-instance-pool;"` (`+shadow` in a
//! set gives Syncing a shadow: its own module; `+replicas=3` runs that many hosts with `--shard`,
//! sharing the routes; `+binary=PATH` runs another build of the host, say with another
//! allocator). Parts (`WASMPILOT_BENCH_E2E_PARTS`): throughput,
//! startup, memory, requeue (`requeue.rs`; `WASMPILOT_BENCH_REQUEUE_ROUTES`, default 1000).
//! `WASMPILOT_BENCH_E2E_EXAMPLE=examples/autoroute-python` (or `-js`) runs the same operator's
//! workers in another language (`deploy/local/bench.sh e2e` builds their components).

mod memory;
mod native_autoroute;
mod requeue;
mod startup;

use anyhow::bail;
use futures::{stream, StreamExt, TryStreamExt};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The AutoRoute operator the hosts run (`WASMPILOT_BENCH_E2E_EXAMPLE`, default the Rust one;
/// `examples/autoroute-python` and `examples/autoroute-js` decide alike, in their languages).
fn example() -> String {
    std::env::var("WASMPILOT_BENCH_E2E_EXAMPLE").unwrap_or_else(|_| "examples/autoroute".into())
}

/// AutoRoutes per namespace in the throughput part (`WASMPILOT_BENCH_E2E_ROUTES_PER_NAMESPACE`,
/// default 20; 100 puts 10,000 routes in 100 namespaces, 10000 in one).
fn routes_per_namespace() -> usize {
    std::env::var("WASMPILOT_BENCH_E2E_ROUTES_PER_NAMESPACE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(20)
}

struct Run {
    label: String,
    seconds: f64,
    requests_per_route: f64,
    /// The largest request kinds per route, e.g. "APPLY services 2.0".
    top_requests: Vec<(String, f64)>,
    /// The largest peak RSS of the controller's processes (per replica).
    peak_rss_mib: f64,
    /// CPU of all its processes.
    cpu_seconds: f64,
    /// When the bench had created every route (their creation is part of the time measured).
    created_seconds: f64,
    /// How many routes were Ready at the first count after that.
    ready_when_created: usize,
    /// When half of the routes were Ready.
    half_ready_seconds: f64,
    /// Every local cluster process's CPU over the same interval, and the bench's own.
    cluster_cpu_seconds: BTreeMap<&'static str, f64>,
}

impl Run {
    /// The API server's CPU over the same interval (on 2 cores, often the bound).
    fn apiserver_cpu_seconds(&self) -> f64 {
        self.cluster_cpu_seconds
            .get("kube-apiserver")
            .copied()
            .unwrap_or(0.0)
    }
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    if std::env::args().any(|a| a == "--native-controller") {
        let nodelay = std::env::args().any(|a| a == "--nodelay");
        return rt.block_on(native_autoroute::run(nodelay));
    }
    if std::env::var_os("KUBECONFIG").is_none() {
        bail!("KUBECONFIG is not set: start the local cluster (deploy/local/cluster.sh up) or run deploy/local/bench.sh");
    }
    let sizes: Vec<usize> = std::env::var("WASMPILOT_BENCH_E2E_SIZES")
        .unwrap_or_else(|_| "200,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let parts = std::env::var("WASMPILOT_BENCH_E2E_PARTS")
        .unwrap_or_else(|_| "throughput,startup,memory,requeue".into());
    rt.block_on(async {
        let client = wasmpilot::api_client::connect().await?;
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let hosts = host_variants()?;
        remove_other_operators(&client).await?;
        let status = Command::new(&hosts[0].binary).args(["deploy", "--no-build", &example()]).current_dir(&root).status()?;
        if !status.success() {
            bail!("wasmpilot deploy --no-build examples/autoroute failed (build the components: deploy/local/bench.sh)");
        }
        if parts.contains("throughput") {
            throughput(&client, &root, &hosts, &sizes).await?;
        }
        if parts.contains("startup") {
            startup::run(&client, &hosts).await?;
        }
        if parts.contains("memory") {
            let objects = std::env::var("WASMPILOT_BENCH_MEMORY_OBJECTS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
            memory::run(&client, &hosts, objects).await?;
        }
        if parts.contains("requeue") {
            let routes = std::env::var("WASMPILOT_BENCH_REQUEUE_ROUTES").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
            requeue::run(&client, &hosts, routes).await?;
        }
        anyhow::Ok(())
    })
}

/// Deletes every WasmOperator the bench did not make (the test suite's `myownshell`, say):
/// a host loads every WasmOperator of the cluster, so one left over would be measured with
/// the bench's — its watches, caches (MyOwnShell caches every Deployment whole) and work.
/// The local cluster is the bench's; what is removed is printed.
async fn remove_other_operators(client: &Client) -> anyhow::Result<()> {
    let operators = cluster_api(client, WASM_OPERATOR);
    let listed = match operators.list(&ListParams::default()).await {
        Ok(list) => list.items,
        // A new cluster serves no WasmOperators yet: the deploy below installs their CRD.
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mut removed = Vec::new();
    for op in listed {
        let name = op.metadata.name.unwrap_or_default();
        if name == "autoroute" || name.starts_with("membench-") {
            continue;
        }
        operators.delete(&name, &DeleteParams::default()).await?;
        removed.push(name);
    }
    if !removed.is_empty() {
        println!(
            "removed WasmOperators left in the cluster (so the hosts load only the bench's): {}",
            removed.join(", ")
        );
    }
    Ok(())
}

/// A wasmpilot host to measure: this tree's binary with some flags, or another build.
pub struct HostVariant {
    pub label: String,
    pub binary: PathBuf,
    pub args: Vec<String>,
    /// Environment for the host process (`NAME=value` words of the flag set).
    pub env: Vec<(String, String)>,
    /// `+shadow` in the flag set: the operator's Syncing phase gets a shadow, its own module
    /// (identical decisions, so every comparison is made in full).
    pub shadow: bool,
    /// `+replicas=N` in the flag set: N hosts run with `--shard` (1: one host, unsharded).
    pub replicas: usize,
}

impl HostVariant {
    /// `wasmpilot run` with this variant's flags and environment.
    pub fn run_command(&self) -> Command {
        let mut run = Command::new(&self.binary);
        run.arg("run")
            .args(&self.args)
            .envs(self.env.iter().cloned());
        run
    }

    /// The commands of every replica: one `run_command`, or with `+replicas=N` N of them
    /// sharing the work (`--shard`, Leases in `default`).
    pub fn replica_commands(&self) -> Vec<Command> {
        if self.replicas <= 1 {
            return vec![self.run_command()];
        }
        (0..self.replicas)
            .map(|k| {
                let mut run = self.run_command();
                run.args([
                    "--shard",
                    "--identity",
                    &format!("bench-replica-{k}"),
                    "--leader-election-namespace",
                    "default",
                ]);
                run
            })
            .collect()
    }
}

/// This tree's host once per flag set in `WASMPILOT_BENCH_E2E_HOST_ARGS` (`;`-separated, e.g.
/// `"--no-instance-pool;"`; `NAME=value` words set the environment), plus `WASMPILOT_BENCH_E2E_BASE_HOST` (a binary built from another
/// commit: before/after figures in one run).
fn host_variants() -> anyhow::Result<Vec<HostVariant>> {
    let binary = host_binary()?;
    let mut hosts: Vec<HostVariant> = std::env::var("WASMPILOT_BENCH_E2E_HOST_ARGS")
        .unwrap_or_default()
        .split(';')
        .map(|s| s.trim().to_string())
        .map(|args| {
            let shadow = args.split_whitespace().any(|w| w == "+shadow");
            let replicas = args
                .split_whitespace()
                .find_map(|w| w.strip_prefix("+replicas="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            // Another build of the host (say, with another allocator) in the same run.
            let binary = args
                .split_whitespace()
                .find_map(|w| w.strip_prefix("+binary="))
                .map_or_else(|| binary.clone(), PathBuf::from);
            let (env, flags): (Vec<&str>, Vec<&str>) = args
                .split_whitespace()
                .filter(|w| !w.starts_with('+'))
                .partition(|w| !w.starts_with('-') && w.contains('='));
            HostVariant {
                label: if args.is_empty() {
                    "wasmpilot".into()
                } else {
                    format!("wasmpilot {args}")
                },
                binary,
                args: flags.into_iter().map(str::to_string).collect(),
                env: env
                    .into_iter()
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                shadow,
                replicas,
            }
        })
        .collect();
    if let Some(base) = std::env::var_os("WASMPILOT_BENCH_E2E_BASE_HOST") {
        hosts.push(HostVariant {
            label: "wasmpilot (base build)".into(),
            binary: base.into(),
            args: Vec::new(),
            env: Vec::new(),
            shadow: false,
            replicas: 1,
        });
    }
    Ok(hosts)
}

async fn throughput(
    client: &Client,
    root: &std::path::Path,
    hosts: &[HostVariant],
    sizes: &[usize],
) -> anyhow::Result<()> {
    println!("\nEnd to end: AutoRoutes (2 Deployments each) from creation to all Ready, same cluster, same run\n");
    println!(
        "{:>6}  {:<30} {:>9} {:>12} {:>14} {:>10} {:>8} {:>14}",
        "routes",
        "controller",
        "seconds",
        "ratio",
        "API req/route",
        "peak RSS",
        "CPU s",
        "apiserver CPU s"
    );
    let operators = cluster_api(client, WASM_OPERATOR);
    for &n in sizes {
        let inputs = SharedInputs::create(client, n).await?;
        // Native first, with the autoroute WasmOperator removed: no wasmpilot host anywhere
        // (another test's, say) may touch AutoRoutes meanwhile.
        let _ = operators
            .delete("autoroute", &DeleteParams::default())
            .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut native_command = Command::new(std::env::current_exe()?);
        native_command.arg("--native-controller");
        let native = measure(client, &inputs, "native".into(), vec![native_command]).await;
        let native = inputs.removed_on_error(client, native).await?;
        print_run_as_done(n, &native);
        let mut runs = vec![native];
        for host in hosts {
            // The previous controller's routes and outputs go before the next one starts (their
            // garbage collection would load the API server during its measurement); after the
            // last controller the namespaces' deletion takes them.
            inputs.remove_routes(client).await?;
            let status = Command::new(&hosts[0].binary)
                .args(["deploy", "--no-build", &example()])
                .current_dir(root)
                .status()?;
            if !status.success() {
                bail!("wasmpilot deploy failed");
            }
            if host.shadow {
                shadow_syncing_with_itself(&operators).await?;
            }
            let run = measure(client, &inputs, host.label.clone(), host.replica_commands()).await;
            let run = inputs.removed_on_error(client, run).await?;
            print_run_as_done(n, &run);
            runs.push(run);
        }
        for r in &runs {
            println!(
                "{n:>6}  {:<30} {:>9.2} {:>11.2}× {:>14.1} {:>7.0} MiB {:>8.2} {:>14.2}",
                r.label,
                r.seconds,
                r.seconds / runs[0].seconds,
                r.requests_per_route,
                r.peak_rss_mib,
                r.cpu_seconds,
                r.apiserver_cpu_seconds()
            );
        }
        for r in &runs {
            let top: Vec<String> = r
                .top_requests
                .iter()
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect();
            println!("        {:<30} per route: {}", r.label, top.join(", "));
        }
        delete_namespaces(client, &inputs.namespaces).await?;
    }
    Ok(())
}

/// How many of the bench's AutoRoutes are Ready (phase Ready, both Deployments synced), kept
/// from one watch. Counting by listing every route loaded the API server it measures: at 2,000
/// routes in one namespace the lists (from etcd, every 500 ms) took a quarter of its CPU, more
/// for the host's larger status (2026-11-28, fifth section). A watch costs one event per write.
struct ReadyCount {
    ready: std::sync::Arc<std::sync::Mutex<BTreeMap<(String, String), bool>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ReadyCount {
    /// Starts the watch and returns once its first listing is in.
    async fn watch(client: &Client, namespaces: &[String]) -> anyhow::Result<ReadyCount> {
        use kube::runtime::watcher::{self, Event};
        let wanted: std::collections::BTreeSet<String> = namespaces.iter().cloned().collect();
        let ready = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let (listed, listed_rx) = tokio::sync::oneshot::channel::<()>();
        let mut listed = Some(listed);
        let routes = cluster_api(client, AUTOROUTE);
        let seen = ready.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(routes, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(event) = event else {
                    // The watcher lists again after an error; the count is kept meanwhile.
                    continue;
                };
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                match event {
                    Event::Init => seen.clear(),
                    Event::InitDone => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                    }
                    Event::Apply(o) | Event::InitApply(o) => {
                        let ns = o.metadata.namespace.clone().unwrap_or_default();
                        if wanted.contains(&ns) {
                            let name = o.metadata.name.clone().unwrap_or_default();
                            seen.insert((ns, name), route_ready(&o));
                        }
                    }
                    Event::Delete(o) => {
                        let ns = o.metadata.namespace.clone().unwrap_or_default();
                        let name = o.metadata.name.clone().unwrap_or_default();
                        seen.remove(&(ns, name));
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), listed_rx)
            .await
            .map_err(|_| anyhow::anyhow!("the AutoRoute watch did not list within 60 s"))?
            .map_err(|_| anyhow::anyhow!("the AutoRoute watch ended before it listed"))?;
        Ok(ReadyCount { ready, task })
    }

    fn ready(&self) -> usize {
        let seen = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        seen.values().filter(|r| **r).count()
    }
}

impl Drop for ReadyCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Ready as both controllers write it: phase Ready with the route's two Deployments synced.
fn route_ready(o: &DynamicObject) -> bool {
    o.data["status"]["phase"] == "Ready"
        && o.data["status"]["syncedDeployments"]
            .as_array()
            .is_some_and(|a| a.len() == 2)
}

/// One controller's figures as soon as it is measured (a long run stopped early keeps them).
fn print_run_as_done(n: usize, r: &Run) {
    println!(
        "        done: {n} routes, {}: {:.2} s, {:.1} requests per route, CPU {:.2} s, apiserver CPU {:.2} s",
        r.label, r.seconds, r.requests_per_route, r.cpu_seconds, r.apiserver_cpu_seconds()
    );
    print_where_the_time_goes(r);
}

/// When the routes were created and half Ready, and every process's CPU against the machine's
/// (on 2 cores the whole cluster shares them: a controller cannot be faster than what is left).
fn print_where_the_time_goes(r: &Run) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let others: f64 = r.cluster_cpu_seconds.values().sum();
    let used = others + r.cpu_seconds;
    let parts: Vec<String> = r
        .cluster_cpu_seconds
        .iter()
        .filter(|(_, s)| **s >= 0.05)
        .map(|(name, s)| format!("{name} {s:.1}"))
        .collect();
    println!(
        "        {}: all created at {:.1} s ({} Ready then), half Ready at {:.1} s; CPU s: controller {:.1}, {}; {:.0} % of {cores} cores",
        r.label,
        r.created_seconds,
        r.ready_when_created,
        r.half_ready_seconds,
        r.cpu_seconds,
        parts.join(", "),
        100.0 * used / (cores * r.seconds.max(f64::EPSILON)),
    );
}

/// Gives the deployed autoroute operator's Syncing phase a shadow: its own module.
async fn shadow_syncing_with_itself(operators: &Api<DynamicObject>) -> anyhow::Result<()> {
    let op = operators.get("autoroute").await?;
    let mut phases = op.data["spec"]["phases"].clone();
    for p in phases.as_array_mut().into_iter().flatten() {
        if p["name"] == "Syncing" {
            p["shadow"] = p["module"].clone();
        }
    }
    operators
        .patch(
            "autoroute",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"phases": phases}})),
        )
        .await?;
    Ok(())
}

/// The `wasmpilot` binary Cargo built for this bench (same profile, same sources).
fn host_binary() -> anyhow::Result<PathBuf> {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_wasmpilot"));
    if !p.exists() {
        bail!(
            "no wasmpilot binary at {}: cargo build -p wasmpilot",
            p.display()
        );
    }
    Ok(p)
}

pub(crate) fn deployment(name: &str, group: &str, port: i32) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"route": group}},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": port}]}]}}}})
}

/// `apiserver_request_total` by verb and resource (with subresource), watches excluded: the
/// API server's own count of what it served.
async fn api_requests(client: &Client) -> anyhow::Result<BTreeMap<String, f64>> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut by_kind = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            let key = format!("{name}=\"");
            line.find(&key).map(|i| {
                let rest = &line[i + key.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_string()
            })
        };
        let verb = label("verb").unwrap_or_default();
        if verb == "WATCH" {
            continue;
        }
        let mut resource = label("resource").unwrap_or_default();
        if let Some(sub) = label("subresource").filter(|s| !s.is_empty()) {
            resource = format!("{resource}/{sub}");
        }
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *by_kind.entry(format!("{verb} {resource}")).or_insert(0.0) += value;
    }
    Ok(by_kind)
}

pub(crate) fn proc_stats(pid: u32) -> (f64, f64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0;
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let fields: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
            Some(
                (fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?)
                    / 100.0,
            )
        })
        .unwrap_or(0.0);
    (rss, cpu)
}

pub(crate) struct Killed(pub Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The local cluster's processes whose CPU a run reports (none is there on a remote cluster).
const CLUSTER_PROCESSES: [&str; 6] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
];

/// The CPU seconds each local cluster process has used so far (by its name; several processes
/// of one name add up), and the bench's own under "bench".
fn cluster_cpu() -> BTreeMap<&'static str, f64> {
    let mut used: BTreeMap<&'static str, f64> = BTreeMap::new();
    used.insert("bench", proc_stats(std::process::id()).1);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return used;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        // The kernel keeps 15 bytes of a process's name.
        let comm = comm.trim_end();
        if let Some(name) = CLUSTER_PROCESSES
            .iter()
            .find(|n| !comm.is_empty() && n.as_bytes()[..n.len().min(15)] == *comm.as_bytes())
        {
            *used.entry(name).or_default() += proc_stats(pid).1;
        }
    }
    used
}

/// The inputs of one throughput size, made once and shared by every controller measured at it:
/// the namespaces and 2 Deployments per route (at 10,000 routes, creating the 20,000 took ~12
/// min, and deleting them in the background loaded the next controller's measurement).
struct SharedInputs {
    namespaces: Vec<String>,
    /// Each route's namespace and the value of its Deployments' `route` label.
    routes: Vec<(String, String)>,
}

impl SharedInputs {
    async fn create(client: &Client, n: usize) -> anyhow::Result<SharedInputs> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
            % 100_000;
        let per_namespace = routes_per_namespace();
        let namespaces: Vec<String> = (0..n.div_ceil(per_namespace))
            .map(|i| format!("bench-{n}-{stamp}-{i}"))
            .collect();
        create_namespaces(client, &namespaces).await?;
        let routes: Vec<(String, String)> = (0..n)
            .map(|i| (namespaces[i / per_namespace].clone(), format!("r{i}")))
            .collect();
        // Inputs exist before the controller starts: their creation is not measured.
        let deployments = routes.iter().flat_map(|(ns, r)| {
            (0..2).map(move |j| (ns.clone(), deployment(&format!("{r}-d{j}"), r, 8000 + j)))
        });
        create_all(client, ("apps", "v1", "Deployment"), deployments, 16).await?;
        settle_deployments(client, &namespaces).await?;
        Ok(SharedInputs { namespaces, routes })
    }

    /// A failed measurement (routes not Ready in time, say) still deletes the size's namespaces:
    /// 20,000 Deployments left behind would load the next run's cluster.
    async fn removed_on_error<T>(
        &self,
        client: &Client,
        result: anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        if result.is_err() {
            let _ = delete_namespaces(client, &self.namespaces).await;
        }
        result
    }

    /// Deletes the AutoRoutes a controller made Ready and waits until they and their outputs
    /// (Services, VirtualServices, Gateways, named after the Deployments and routes) are gone,
    /// and with them what the control plane made for those Services (Endpoints, EndpointSlices):
    /// the next controller starts from the same inputs, on a quiet cluster. Without the last two,
    /// the garbage collector was still deleting the previous controller's EndpointSlices (a GET
    /// of each owner Service, then a DELETE) in the next one's measurement.
    ///
    /// The outputs are deleted here rather than left to the garbage collector: its GET of the
    /// owner and DELETE per object, at the controller manager's 200 requests/s, took ~15 min for
    /// 10,000 routes' outputs. The bench's namespaces hold nothing else of these kinds.
    async fn remove_routes(&self, client: &Client) -> anyhow::Result<()> {
        let removing = Instant::now();
        let routes = gvk_resource(AUTOROUTE);
        for ns in &self.namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &routes);
            delete_collection_until_empty(&api, ns, "AutoRoute").await?;
        }
        // Services have no `deletecollection` (Kubernetes 1.20): one DELETE each, 16 at a time.
        let services = gvk_resource(("", "v1", "Service"));
        for ns in &self.namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &services);
            let names: Vec<String> = api
                .list_metadata(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect();
            stream::iter(names)
                .map(|name| {
                    let api = api.clone();
                    async move {
                        match api.delete(&name, &DeleteParams::background()).await {
                            Ok(_) => Ok(()),
                            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                            Err(e) => Err(anyhow::Error::from(e)),
                        }
                    }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await?;
        }
        // Then what was left of their outputs, and the control plane's Endpoints for them.
        let mut outputs: Vec<ApiResource> = [
            ("networking.istio.io", "v1alpha3", "VirtualService"),
            ("networking.istio.io", "v1alpha3", "Gateway"),
            ("", "v1", "Endpoints"),
        ]
        .into_iter()
        .map(gvk_resource)
        .collect();
        outputs.extend(endpoint_slices(client).await?);
        for resource in &outputs {
            for ns in &self.namespaces {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
                delete_collection_until_empty(&api, ns, &resource.kind).await?;
            }
        }
        let kinds: Vec<ApiResource> = [routes, services].into_iter().chain(outputs).collect();
        'wait: loop {
            for resource in &kinds {
                for ns in &self.namespaces {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), ns, resource);
                    if !api
                        .list(&ListParams::default().limit(1))
                        .await?
                        .items
                        .is_empty()
                    {
                        if removing.elapsed() > Duration::from_secs(1800) {
                            bail!(
                                "{} left in {ns} after 30 min of garbage collection",
                                resource.kind
                            );
                        }
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        continue 'wait;
                    }
                }
            }
            break;
        }
        let removed = removing.elapsed();
        let quiet = wait_until_quiet(client).await?;
        println!(
            "        (routes and their outputs removed in {:.0} s, then the API server quiet after {:.0} s more)",
            removed.as_secs_f64(),
            quiet.as_secs_f64()
        );
        Ok(())
    }
}

/// Waits until the API server serves fewer than [`QUIET_REQUESTS_PER_S`] requests a second
/// (watches excluded) over 5 s, at most 20 min; returns how long it took. What the bench
/// deleted leaves work to the control plane: the garbage collector checks each deleted route's
/// dependents and each deleted Service's EndpointSlices (a GET of the object or its owner each,
/// at the controller manager's 200 requests/s). Once, 11,000 such GETs ran on into the next
/// controller's window and were counted as its requests.
async fn wait_until_quiet(client: &Client) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let total = |counts: BTreeMap<String, f64>| counts.values().sum::<f64>();
    let mut before = total(api_requests(client).await?);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = total(api_requests(client).await?);
        if (now - before) / 5.0 < QUIET_REQUESTS_PER_S {
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(1200) {
            bail!(
                "the API server still served {:.0} requests/s 20 min after the routes were removed",
                (now - before) / 5.0
            );
        }
        before = now;
    }
}

/// Requests a second (watches excluded) under which the cluster counts as quiet between two
/// controllers: the control plane's own background (Leases, status) is a few a second.
const QUIET_REQUESTS_PER_S: f64 = 20.0;

async fn measure(
    client: &Client,
    inputs: &SharedInputs,
    label: String,
    controllers: Vec<Command>,
) -> anyhow::Result<Run> {
    let (namespaces, routes, n) = (&inputs.namespaces, &inputs.routes, inputs.routes.len());
    let sharded = controllers.len() > 1;
    let mut children = Vec::new();
    for mut controller in controllers {
        let child = controller
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env("WASMPILOT_LOG", "warn")
            .spawn()?;
        children.push(Killed(child));
    }
    let pids: Vec<u32> = children.iter().map(|c| c.0.id()).collect();
    // Watches listed, modules loaded from the warm cache: the startup part measures this at well
    // under a second for both controllers. Sharded replicas first share the buckets (a round is
    // 5 s).
    tokio::time::sleep(Duration::from_secs(if sharded { 15 } else { 3 })).await;
    let ready_count = ReadyCount::watch(client, namespaces).await?;

    let before = api_requests(client).await?;
    let cluster_before = cluster_cpu();
    let cpu_before: f64 = pids.iter().map(|p| proc_stats(*p).1).sum();
    let start = Instant::now();
    let autoroutes = routes.iter().map(|(ns, r)| {
        let obj = json!({"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": r},
                         "spec": {"deploymentSelector": {"matchLabels": {"route": r}}}});
        (ns.clone(), obj)
    });
    create_all(client, AUTOROUTE, autoroutes, 16).await?;
    let created_seconds = start.elapsed().as_secs_f64();
    let (mut ready_when_created, mut half_ready_seconds) = (None, None);
    let give_up = Duration::from_secs(900).max(Duration::from_secs(n as u64 / 5));
    loop {
        let ready = ready_count.ready();
        ready_when_created.get_or_insert(ready);
        if ready * 2 >= n {
            half_ready_seconds.get_or_insert(start.elapsed().as_secs_f64());
        }
        if ready == n {
            break;
        }
        if start.elapsed() > give_up {
            bail!(
                "{label}: only {ready}/{n} AutoRoutes Ready after {} min",
                give_up.as_secs() / 60
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let stats: Vec<(f64, f64)> = pids.iter().map(|p| proc_stats(*p)).collect();
    let peak_rss_mib = stats.iter().map(|s| s.0).fold(0.0, f64::max);
    // Sharded replicas' CPU over the measured interval only (their start waited 15 s); one
    // controller's since its start, as before.
    let cpu_seconds =
        stats.iter().map(|s| s.1).sum::<f64>() - if sharded { cpu_before } else { 0.0 };
    let cluster_cpu_seconds: BTreeMap<&'static str, f64> = cluster_cpu()
        .into_iter()
        .map(|(name, s)| (name, s - cluster_before.get(name).copied().unwrap_or(0.0)))
        .collect();
    let after = api_requests(client).await?;
    drop(children);
    let mut delta: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).copied().unwrap_or(0.0)) / n as f64,
            )
        })
        // The bench's own requests (creating the routes, polling them) are not the controller's.
        // Nor are the controller manager's (Endpoints and EndpointSlices for new Services).
        .filter(|(k, v)| {
            *v > 0.0
                && k != "LIST autoroutes"
                && k != "POST autoroutes"
                && !k.ends_with(" endpoints")
                && !k.ends_with(" endpointslices")
                && !k.ends_with(" replicasets")
        })
        .collect();
    delta.sort_by(|a, b| b.1.total_cmp(&a.1));
    let requests_per_route = delta.iter().map(|(_, v)| v).sum();
    delta.truncate(6);
    Ok(Run {
        label,
        seconds,
        requests_per_route,
        top_requests: delta,
        peak_rss_mib,
        cpu_seconds,
        created_seconds,
        ready_when_created: ready_when_created.unwrap_or(0),
        half_ready_seconds: half_ready_seconds.unwrap_or(seconds),
        cluster_cpu_seconds,
    })
}

/// Waits until the controller manager has finished with the Deployments: every one observed
/// (its status' observedGeneration) and none changed for 6 s. A measurement started earlier
/// would charge the Deployments' own churn (ReplicaSets, status writes, and every controller's
/// Deployment events) to the first controller measured. Lists come from the API server's watch
/// cache (`resourceVersion=0`), not etcd, so the polling does not slow what it waits for.
pub(crate) async fn settle_deployments(
    client: &Client,
    namespaces: &[String],
) -> anyhow::Result<()> {
    let deployments = gvk_resource(("apps", "v1", "Deployment"));
    let settle = Instant::now();
    let (mut last_change, mut quiet_polls) = (None, 0);
    loop {
        let (mut pending, mut latest) = (0, 0u64);
        for ns in namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &deployments);
            for d in api.list(&ListParams::default().match_any()).await?.items {
                if d.data["status"]["observedGeneration"] != json!(d.metadata.generation) {
                    pending += 1;
                }
                let version = d.metadata.resource_version.as_deref().unwrap_or("0");
                latest = latest.max(version.parse().unwrap_or(0));
            }
        }
        quiet_polls = if pending == 0 && last_change == Some(latest) {
            quiet_polls + 1
        } else {
            0
        };
        last_change = Some(latest);
        if quiet_polls >= 3 {
            println!(
                "        (Deployments settled in {:.0} s)",
                settle.elapsed().as_secs_f64()
            );
            break;
        }
        if settle.elapsed() > Duration::from_secs(1800) {
            println!("        (Deployments NOT settled after 30 min: {pending} not observed; measuring anyway)");
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// Deletes every object of `api` (one namespace, one kind), again while some are left: a
/// collection of 10,000 outlasts one request's timeout (the API server's, or etcd's under load),
/// and the deletion goes on where it stopped. Gives up after 10 attempts.
async fn delete_collection_until_empty(
    api: &Api<DynamicObject>,
    ns: &str,
    kind: &str,
) -> anyhow::Result<()> {
    for attempt in 1..=10 {
        match api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) => {
                println!("        (deleting {kind}s in {ns}, attempt {attempt}: {e}; again)");
                if api
                    .list_metadata(&ListParams::default().limit(1))
                    .await?
                    .items
                    .is_empty()
                {
                    return Ok(());
                }
            }
        }
    }
    bail!("{kind}s in {ns} still there after 10 attempts to delete them")
}

/// Deletes the namespaces and waits until they are gone: the next run starts on a quiet cluster.
pub(crate) async fn delete_namespaces(
    client: &Client,
    namespaces: &[String],
) -> anyhow::Result<()> {
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for ns in namespaces {
        let _ = ns_api.delete(ns, &DeleteParams::background()).await;
    }
    let deleting = Instant::now();
    while deleting.elapsed() < Duration::from_secs(300) {
        let mut left = 0;
        for ns in namespaces {
            left += usize::from(ns_api.get_opt(ns).await?.is_some());
        }
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Group, version, kind.
pub(crate) type Gvk = (&'static str, &'static str, &'static str);
pub(crate) const AUTOROUTE: Gvk = ("examples.io", "v1", "AutoRoute");
pub(crate) const WASM_OPERATOR: Gvk = ("wasmpilot.io", "v1alpha1", "WasmOperator");

/// EndpointSlices as this cluster serves them (`discovery.k8s.io/v1` from Kubernetes 1.21,
/// `v1beta1` before), or none on a cluster without them.
async fn endpoint_slices(client: &Client) -> anyhow::Result<Option<ApiResource>> {
    let group = match kube::discovery::group(client, "discovery.k8s.io").await {
        Ok(group) => group,
        Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    Ok(group
        .recommended_kind("EndpointSlice")
        .map(|(resource, _)| resource))
}

pub(crate) fn gvk_resource((group, version, kind): Gvk) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// A cluster-wide Api of a kind.
pub(crate) fn cluster_api(client: &Client, kind: Gvk) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &gvk_resource(kind))
}

/// Creates objects of a kind, each in its namespace, with `parallel` requests in flight.
pub(crate) async fn create_all(
    client: &Client,
    kind: Gvk,
    objects: impl Iterator<Item = (String, serde_json::Value)>,
    parallel: usize,
) -> anyhow::Result<()> {
    let resource = gvk_resource(kind);
    stream::iter(objects)
        .map(|(ns, body)| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            async move {
                api.create(&PostParams::default(), &serde_json::from_value(body)?)
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(parallel)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

pub(crate) async fn create_namespaces(
    client: &Client,
    namespaces: &[String],
) -> anyhow::Result<()> {
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for ns in namespaces {
        ns_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    Ok(())
}
