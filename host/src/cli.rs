//! Command line: `run` (the controller), `deploy` (ship an operator), `push` (publish a component
//! to an OCI registry), `run-phase` (one phase offline from files), `crd` (print the
//! WasmOperator CRD), the authoring loop (`init`, `build`, `simulate`, `graph`, `plan`) and the
//! upgrade evidence (`capture`, `replay`).

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wasmpilot::controller::leader::{LeaderElection, LeaseTiming};
use wasmpilot::controller::manager::Manager;
use wasmpilot::crd::WasmOperator;
use wasmpilot::modules::ModuleCache;
use wasmpilot::sandbox::{InstanceMemory, Sandbox, SandboxLimits};

#[derive(Parser)]
#[command(
    name = "wasmpilot",
    version,
    about = "Kubernetes operators whose logic runs as sandboxed Wasm components"
)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info,wasmpilot=debug`.
    #[arg(long, env = "WASMPILOT_LOG", default_value = "info", global = true)]
    pub log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller: load every WasmOperator and reconcile its resources.
    Run(RunArgs),
    /// Build an operator directory's components and apply its modules, CRDs and WasmOperator.
    Deploy {
        /// The operator directory (holds operator.yaml, crds/ and the worker crates).
        dir: PathBuf,
        /// Use the components already built in the target directory.
        #[arg(long)]
        no_build: bool,
        /// Namespace for the module ConfigMaps.
        #[arg(long, default_value = wasmpilot::modules::DEFAULT_MODULE_NAMESPACE)]
        module_namespace: String,
        /// Do not apply the operator's account and grants (an admin applies `wasmpilot rbac`'s).
        #[arg(long)]
        no_grants: bool,
        /// Namespace of the operator's ServiceAccount (the host's --identity-namespace).
        #[arg(long, default_value = wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE)]
        identity_namespace: String,
        /// The host's ServiceAccount as namespace/name (granted reading for the operator and
        /// acting as it).
        #[arg(long, default_value = "wasmpilot-system/wasmpilot")]
        host_service_account: String,
    },
    /// Run one phase of an operator offline, from files, and print the decision as YAML (or,
    /// with --finalizer, its finalizer as on the resource's deletion).
    RunPhase {
        /// The WasmOperator manifest.
        #[arg(long)]
        operator: PathBuf,
        /// Directory where `file` module paths resolve.
        #[arg(long)]
        module_dir: PathBuf,
        /// The top-level resource (YAML).
        #[arg(long)]
        resource: PathBuf,
        /// Objects standing in for the cluster (multi-document YAML).
        #[arg(long)]
        objects: Option<PathBuf>,
        /// Phase to run (default: the resource's .status.phase, else the initial phase).
        #[arg(long, conflicts_with = "finalizer")]
        phase: Option<String>,
        /// Run the operator's finalizer (spec.finalizer), as on the resource's deletion, with
        /// its declared inputs selected from --objects; prints done or when it would run again.
        #[arg(long)]
        finalizer: bool,
        /// Clock handed to the worker, RFC 3339 (default: now).
        #[arg(long)]
        now: Option<String>,
        /// Directories of CustomResourceDefinitions saying which output kinds are
        /// cluster-scoped (default: crds/ beside the operator manifest).
        #[arg(long)]
        crds: Vec<PathBuf>,
    },
    /// Scaffold an operator project: types crate, one worker crate per phase, operator.yaml.
    Init(wasmpilot::authoring::init::InitArgs),
    /// Write the typed API of an operator's phases into its types crate (types/src/phases.rs)
    /// from operator.yaml, and regenerate its CRD from the types crate.
    Generate(wasmpilot::authoring::generate::GenerateArgs),
    /// Build an operator directory's phase components (release, wasm32-wasip2); print sizes and digests.
    Build {
        /// The operator directory.
        dir: PathBuf,
    },
    /// Run an operator's built components offline, reconcile after reconcile, printing each step.
    Simulate(wasmpilot::authoring::simulate::SimulateArgs),
    /// Print an operator's phase graph as a Mermaid state diagram.
    Graph {
        /// The WasmOperator manifest, or the operator directory holding operator.yaml.
        operator: PathBuf,
    },
    /// Show what an operator would do to a live resource now (server-side dry run; writes nothing).
    Plan(wasmpilot::authoring::plan::PlanArgs),
    /// Write the request a live resource would get now, decided by its current module, as a
    /// replay case (writes nothing to the cluster).
    Capture(wasmpilot::evidence::capture::CaptureArgs),
    /// Run recorded or captured cases against a candidate operator; report same / different /
    /// error per case with the changed fields; fail on any difference not declared expected.
    Replay(wasmpilot::evidence::replay::ReplayArgs),
    /// Print the WasmOperator CustomResourceDefinition (YAML).
    Crd,
    /// Publish a built component to an OCI registry as a Wasm artifact; print its digests.
    Push(wasmpilot::modules::oci::PushArgs),
    /// Print an operator's own ServiceAccount, its least-privilege role and binding, and the
    /// host's right to read for it and act as it, for `kubectl apply -f -`.
    Rbac {
        /// The WasmOperator manifest, e.g. examples/autoroute/operator.yaml.
        operator: PathBuf,
        /// Grant the operator only in these namespaces (comma-separated; default: cluster-wide).
        #[arg(long, value_delimiter = ',')]
        namespace: Vec<String>,
        /// Namespace of the operator's ServiceAccount (the host's --identity-namespace).
        #[arg(long, default_value = wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE)]
        identity_namespace: String,
        /// The host's ServiceAccount as namespace/name: it reads for the operator and may act as
        /// its account.
        #[arg(
            long,
            alias = "service-account",
            default_value = "wasmpilot-system/wasmpilot"
        )]
        host_service_account: String,
        /// Grant nothing to the host (only the operator's account and its roles).
        #[arg(long)]
        no_host_grants: bool,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Namespace of the operators' ServiceAccounts: each WasmOperator acts as `op-<name>` there
    /// (impersonated; grant it with `wasmpilot rbac`).
    #[arg(long, env = "WASMPILOT_IDENTITY_NAMESPACE", default_value = wasmpilot::rbac::DEFAULT_IDENTITY_NAMESPACE)]
    identity_namespace: String,
    /// Addresses beyond public ones that operators' module URLs and Prometheus URLs may reach
    /// (comma-separated IPs or CIDR blocks, e.g. 10.0.0.0/8); loopback, link-local and private
    /// addresses are refused otherwise. The host's own --prometheus-url is not restricted.
    #[arg(long, env = "WASMPILOT_ALLOW_FETCH_FROM", value_delimiter = ',')]
    allow_fetch_from: Vec<String>,
    /// Prometheus HTTP API for phases' metric queries (a WasmOperator may name its own).
    #[arg(long, env = "WASMPILOT_PROMETHEUS_URL")]
    prometheus_url: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address, e.g. 0.0.0.0:8080.
    #[arg(long, env = "WASMPILOT_METRICS_ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Allow `file` modules, resolved relative to this directory (development only).
    #[arg(long, env = "WASMPILOT_MODULE_DIR")]
    module_dir: Option<PathBuf>,
    /// Wall-clock deadline for one worker call.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// Linear memory limit for one worker call, in MiB.
    #[arg(long, default_value_t = 64)]
    memory_limit_mib: usize,
    /// Worker calls that may run at the same time (each on a fiber of its reconcile, yielding
    /// its thread every 10 ms); further calls wait.
    #[arg(long, default_value_t = 4)]
    max_concurrent_workers: usize,
    /// Bytes of each pooled worker memory kept mapped between calls, in MiB (fewer page faults
    /// per call; costs up to this much RSS per concurrent worker).
    #[arg(long, default_value_t = 8)]
    keep_resident_mib: usize,
    /// Give each worker call freshly mmapped memory instead of a slot of the instance pool.
    #[arg(long)]
    no_instance_pool: bool,
    /// Ceiling for per-phase deadline overrides in WasmOperators.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    max_deadline: Duration,
    /// Ceiling for per-phase memory overrides in WasmOperators, in MiB.
    #[arg(long, default_value_t = 512)]
    max_memory_limit_mib: usize,
    /// Memory all worker calls may hold together, in MiB: a WasmOperator whose per-call limit
    /// times --max-concurrent-workers exceeds it is refused. Default: the container's memory
    /// limit less 512 MiB for the host itself (its caches and compiles); none outside a
    /// container with a limit.
    #[arg(long, env = "WASMPILOT_WORKER_MEMORY_BUDGET_MIB")]
    worker_memory_budget_mib: Option<usize>,
    /// Run controllers only while holding a Lease, so several replicas can run (one active).
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "wasmpilot-leader")]
    leader_election_id: String,
    /// This host's identity in the Lease (default: $POD_NAME, else hostname-pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long a Lease stays valid without renewal; a standby takes over after this.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// Directory for compiled components, so a restart does not recompile (default:
    /// $XDG_CACHE_HOME/wasmpilot/compiled, else ~/.cache/wasmpilot/compiled).
    #[arg(long, env = "WASMPILOT_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Keep compiled components in memory only.
    #[arg(long)]
    no_cache: bool,
    /// The most compiled code the cache directory keeps, in MiB; the least recently used
    /// components go first.
    #[arg(long, default_value_t = 2048)]
    cache_max_mib: u64,
    /// Record every decision (request, result, module, duration) as replay cases in rotating
    /// files in this directory (e.g. a volume); recording never delays a reconcile.
    #[arg(long, env = "WASMPILOT_RECORD_DIR")]
    record_dir: Option<PathBuf>,
    /// The most the record directory holds, in MiB; the oldest files go first.
    #[arg(long, default_value_t = 256)]
    record_max_mib: u64,
    /// Serve `/shadow-cases` on this loopback address (e.g. 127.0.0.1:8090; off by default): the
    /// last cases where a shadow module differed, with the whole requests (input objects
    /// included), so never on an address other hosts reach (`kubectl port-forward` does).
    #[arg(long, env = "WASMPILOT_SHADOW_CASES_ADDR")]
    shadow_cases_addr: Option<std::net::SocketAddr>,
    /// Requeue every resource of an input object's namespace on any change of it, as hosts did
    /// before inputs had selectors (a benchmark baseline: one reconcile per resource per change).
    #[arg(long)]
    requeue_whole_namespace: bool,
}

/// Waits for SIGTERM (what the kubelet sends a pod, and `kill` by default) or SIGINT (Ctrl-C).
/// In a container the host is PID 1, for which a signal without a handler does nothing: without
/// this, a deleted pod would run until it is killed, holding its Lease to the end.
async fn termination() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the host gracefully");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}

pub fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: log files and pod logs stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Run(args) => run(args).await,
            Command::Deploy {
                dir,
                no_build,
                module_namespace,
                no_grants,
                identity_namespace,
                host_service_account,
            } => {
                let grants = if no_grants {
                    None
                } else {
                    Some(wasmpilot::rbac::GrantTarget {
                        identity_namespace,
                        host_account: Some(host_account(&host_service_account)?),
                        namespaces: Vec::new(),
                    })
                };
                let opts = wasmpilot::deploy::DeployOptions {
                    dir,
                    no_build,
                    module_namespace,
                    grants,
                };
                // Everything that can be checked without the cluster is, first.
                let prepared = wasmpilot::deploy::prepare(&opts)?;
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
                wasmpilot::deploy::deploy(client, &opts, prepared)
                    .await
                    .map(|_| ())
            }
            Command::RunPhase {
                operator,
                module_dir,
                resource,
                objects,
                phase,
                finalizer,
                now,
                crds,
            } => {
                let run = wasmpilot::offline::OfflineRun {
                    operator,
                    module_dir,
                    resource,
                    objects,
                    phase,
                    now,
                    crds,
                };
                let limits = SandboxLimits::default();
                let printed = if finalizer {
                    serde_yaml::to_string(&wasmpilot::offline::run_finalizer(&run, limits).await?)?
                } else {
                    serde_yaml::to_string(&wasmpilot::offline::run_phase(&run, limits).await?)?
                };
                print!("{printed}");
                Ok(())
            }
            Command::Rbac {
                operator,
                namespace,
                identity_namespace,
                host_service_account,
                no_host_grants,
            } => {
                let host_account = if no_host_grants {
                    None
                } else {
                    Some(host_account(&host_service_account)?)
                };
                let target = wasmpilot::rbac::GrantTarget {
                    identity_namespace,
                    host_account,
                    namespaces: namespace,
                };
                print!("{}", rbac_yaml(&operator, &target)?);
                Ok(())
            }
            Command::Init(args) => wasmpilot::authoring::init::init(&args).map(|_| ()),
            Command::Generate(args) => wasmpilot::authoring::generate::run(&args),
            Command::Build { dir } => {
                print!("{}", wasmpilot::authoring::build::build_command(&dir)?);
                Ok(())
            }
            Command::Simulate(args) => {
                let mut out = std::io::stdout().lock();
                wasmpilot::authoring::simulate::simulate(&args, SandboxLimits::default(), &mut out)
                    .await
                    .map(|_| ())
            }
            Command::Graph { operator } => {
                print!("{}", wasmpilot::authoring::graph::graph_command(&operator)?);
                Ok(())
            }
            Command::Plan(args) => {
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (set KUBECONFIG)")?;
                let mut out = std::io::stdout().lock();
                wasmpilot::authoring::plan::plan(client, &args, SandboxLimits::default(), &mut out)
                    .await
                    .map(|_| ())
            }
            Command::Capture(args) => {
                let client = wasmpilot::api_client::connect()
                    .await
                    .context("connecting to the cluster (KUBECONFIG)")?;
                let case =
                    wasmpilot::evidence::capture::capture(client, &args, SandboxLimits::default())
                        .await?;
                let text = serde_json::to_string_pretty(&case)? + "\n";
                match &args.output {
                    Some(path) => std::fs::write(path, text)
                        .with_context(|| format!("writing {}", path.display()))?,
                    None => print!("{text}"),
                }
                Ok(())
            }
            Command::Replay(args) => {
                let mut out = std::io::stdout();
                let summary =
                    wasmpilot::evidence::replay::replay(&args, SandboxLimits::default(), &mut out)
                        .await?;
                if !summary.passed() {
                    anyhow::bail!(
                        "{} of {} cases decided differently than recorded, {} made no decision",
                        summary.unexpected,
                        summary.cases,
                        summary.errors
                    );
                }
                Ok(())
            }
            Command::Crd => {
                print!("{}", serde_yaml::to_string(&WasmOperator::crd())?);
                Ok(())
            }
            Command::Push(args) => wasmpilot::modules::oci::push_command(args).await,
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let connection = wasmpilot::api_client::Connection::infer()
        .await
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    let client = connection
        .client()
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    let identities = wasmpilot::controller::grants::Identities::impersonating(
        connection,
        &args.identity_namespace,
    );
    let limits = SandboxLimits {
        deadline: args.deadline,
        memory_bytes: args.memory_limit_mib << 20,
        concurrency: args.max_concurrent_workers,
        max_deadline: args.max_deadline.max(args.deadline),
        max_memory_bytes: args.max_memory_limit_mib.max(args.memory_limit_mib) << 20,
        worker_memory_budget: worker_memory_budget(args.worker_memory_budget_mib),
        instance_memory: if args.no_instance_pool {
            InstanceMemory::OnDemand
        } else {
            InstanceMemory::Pooling {
                keep_resident: args.keep_resident_mib << 20,
            }
        },
        ..SandboxLimits::default()
    };
    if let Some(budget) = limits.worker_memory_budget {
        let defaults = limits
            .memory_bytes
            .saturating_mul(limits.concurrency.max(1));
        anyhow::ensure!(
            defaults <= budget,
            "--memory-limit-mib {} × --max-concurrent-workers {} = {} MiB does not fit the worker memory budget of {} MiB (--worker-memory-budget-mib, or the container's memory limit less 512 MiB): every operator with default limits would be refused",
            limits.memory_bytes >> 20,
            limits.concurrency,
            defaults >> 20,
            budget >> 20
        );
    }
    if let Some(addr) = args.shadow_cases_addr {
        if !addr.ip().is_loopback() {
            return Err(wasmpilot::metrics::ShadowCasesExposed(addr).into());
        }
        tokio::spawn(async move {
            let kept = wasmpilot::controller::shadow::kept_cases as wasmpilot::metrics::ShadowCases;
            if let Err(e) = wasmpilot::metrics::serve_shadow_cases(addr, kept).await {
                tracing::error!(%addr, error = %e, "shadow cases server stopped");
            }
        });
    }
    if let Some(addr) = args.metrics_addr {
        tokio::spawn(async move {
            if let Err(e) = wasmpilot::metrics::serve(addr).await {
                tracing::error!(%addr, error = %e, "metrics server stopped");
            }
        });
    }
    let record_sink = match &args.record_dir {
        Some(dir) => Some(
            wasmpilot::evidence::record::RecordSink::start(dir, args.record_max_mib << 20)
                .context("--record-dir")?,
        ),
        None => None,
    };
    let input_requeue = if args.requeue_whole_namespace {
        wasmpilot::controller::context::InputRequeue::WholeNamespace
    } else {
        wasmpilot::controller::context::InputRequeue::Selected
    };
    let egress = wasmpilot::egress::EgressPolicy::allowing(&args.allow_fetch_from)?;
    let sandbox = Sandbox::new(limits)?;
    let modules = Arc::new(
        ModuleCache::new(sandbox, Some(client.clone()), args.module_dir)
            .with_egress(egress.clone())
            .with_compile_cache_limited(
                wasmpilot::modules::compile_cache_dir(args.cache_dir, args.no_cache),
                args.cache_max_mib.saturating_mul(1 << 20),
            ),
    );
    let shutdown = async {
        let signal = termination().await;
        tracing::info!(signal, "shutting down");
    };
    if !args.leader_elect {
        return Manager::new(client, identities, modules)
            .with_egress(egress)
            .with_prometheus(args.prometheus_url.clone())
            .with_record_sink(record_sink)
            .with_input_requeue(input_requeue)
            .run(shutdown)
            .await;
    }
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let timing = LeaseTiming {
        lease_duration: args.lease_duration,
        renew_every: args.lease_duration / 3,
        retry_every: (args.lease_duration / 5).max(Duration::from_millis(500)),
    };
    let election = LeaderElection::new(
        client.clone(),
        &args.leader_election_namespace,
        &args.leader_election_id,
        &identity,
        timing,
    );
    tokio::pin!(shutdown);
    // A standby is healthy and ready (as a standby, says /readyz); it must not block rollouts.
    wasmpilot::metrics::READINESS.mark_standby();
    tokio::select! {
        () = election.acquire() => {}
        () = &mut shutdown => return Ok(()),
    }
    // The leader is ready only once its own WasmOperators are listed and loaded, caches synced.
    wasmpilot::metrics::READINESS.mark_leader();
    let manager = Manager::new(client, identities, modules)
        .with_egress(egress)
        .with_prometheus(args.prometheus_url.clone())
        .with_record_sink(record_sink)
        .with_input_requeue(input_requeue);
    tokio::select! {
        result = manager.run(&mut shutdown) => {
            election.release().await;
            result
        }
        lost = election.hold() => {
            // Controllers of a former leader must not keep writing: exit, and let the
            // supervisor (Deployment) start a fresh candidate.
            Err(anyhow::anyhow!("leadership lost: {lost}; exiting"))
        }
    }
}

/// `hostname-pid`: unique per process, readable in `kubectl get lease -o yaml`.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "wasmpilot".into());
    format!("{host}-{}", std::process::id())
}

/// `wasmpilot rbac`: the operator's ClusterRole (+ binding) as multi-document YAML.
/// What the host keeps of its container's memory limit for itself (watch caches, compiles: one
/// compile alone peaks at 290–410 MiB) when it sizes the worker memory budget.
const HOST_MEMORY_RESERVE: usize = 512 << 20;

/// The worker memory budget: `flag` MiB, else the cgroup's memory limit (v2, then v1) less
/// [`HOST_MEMORY_RESERVE`] (half of a limit smaller than twice that), else none.
fn worker_memory_budget(flag: Option<usize>) -> Option<usize> {
    if let Some(mib) = flag {
        return Some(mib << 20);
    }
    let limit = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|text| text.trim().parse::<u64>().ok())
    // cgroup v1 writes "no limit" as a page-rounded i64::MAX.
    .filter(|bytes| *bytes < 1 << 60)
    .and_then(|bytes| usize::try_from(bytes).ok())?;
    let budget = if limit >= 2 * HOST_MEMORY_RESERVE {
        limit - HOST_MEMORY_RESERVE
    } else {
        limit / 2
    };
    tracing::info!(
        container_limit_mib = limit >> 20,
        worker_budget_mib = budget >> 20,
        "worker memory budget"
    );
    Some(budget)
}

/// `namespace/name` of the host's ServiceAccount.
fn host_account(text: &str) -> anyhow::Result<(String, String)> {
    let (ns, name) = text
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!("--host-service-account must be namespace/name, got {text:?}")
        })?;
    Ok((ns.to_string(), name.to_string()))
}

fn rbac_yaml(
    operator: &std::path::Path,
    target: &wasmpilot::rbac::GrantTarget,
) -> anyhow::Result<String> {
    let op = wasmpilot::offline::read_operator(operator)?;
    let name = op
        .metadata
        .name
        .clone()
        .ok_or_else(|| anyhow::anyhow!("{}: metadata.name is required", operator.display()))?;
    let mut out = String::new();
    // Sensitive kinds get the admin's attention: on stderr, and atop what is applied.
    let mut sensitive: Vec<String> = wasmpilot::definition::declared_kinds(&op.spec)
        .into_iter()
        .filter(|(k, _)| wasmpilot::definition::is_sensitive(k))
        .map(|(k, field)| format!("{} {} ({field})", k.api_version, k.kind))
        .collect();
    sensitive.dedup();
    if !sensitive.is_empty() {
        let warning = format!(
            "WARNING: operator {name} is granted sensitive kinds{}: {}",
            if target.namespaces.is_empty() {
                " cluster-wide"
            } else {
                ""
            },
            sensitive.join(", ")
        );
        eprintln!("{warning}");
        out.push_str(&format!("# {warning}\n"));
    }
    for doc in wasmpilot::rbac::grant_manifests(&name, &op.spec, &Default::default(), target) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc)?);
    }
    Ok(out)
}
