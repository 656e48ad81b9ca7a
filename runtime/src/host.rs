//! The host process: its flags (`RunArgs`), then the controller run until SIGTERM — the sandbox
//! and module cache built, metrics served, and the manager run alone or under leader election.

use crate::controller::leader::{LeaderElection, LeaseTiming};
use crate::controller::manager::Manager;
use crate::modules::ModuleCache;
use crate::sandbox::log_rate::LogRateLimit;
use crate::sandbox::{InstanceMemory, Sandbox, SandboxLimits, DEFAULT_WARM_MODULES};
use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
/// `run`'s flags: the host's limits, its identity, where it serves metrics, its caches.
pub struct RunArgs {
    /// Namespace of the operators' ServiceAccounts: each WasmOperator acts as `op-<name>` there
    /// (impersonated; grant it with `wasmpilot rbac`).
    #[arg(long, env = "WASMPILOT_IDENTITY_NAMESPACE", default_value = crate::rbac::DEFAULT_IDENTITY_NAMESPACE)]
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
    /// Modules whose worker memory slots the instance pool keeps besides the running calls: a
    /// module's next call finds its memory image mapped and its heap resident. Past this many
    /// modules called in turn, the least recently called one's slot is taken (its next call
    /// maps its image and faults its heap in again). Each kept slot holds what its last call
    /// wrote, up to --keep-resident-mib.
    #[arg(long, default_value_t = DEFAULT_WARM_MODULES)]
    warm_modules: usize,
    /// Worker log lines per second the host's log takes from one operator's workers together,
    /// on average (a call's printed output counts as one line); bursts of up to one call's whole
    /// log budget (1,000 lines) pass. Lines over it are not written: they are counted in
    /// wasmpilot_worker_log_lines_dropped_total and reported in one line per operator at most
    /// every 10 s. The workers' calls do not change. 0: no limit.
    #[arg(long, default_value_t = 100)]
    worker_log_lines_per_second: u32,
    /// Each tenant's writes per second on average (a WasmOperatorGrant's spec.tenant, else each
    /// operator), bursts of twice that: the objects its operators apply and delete and the
    /// statuses they write. Past it, a reconcile's writes wait (counted in
    /// wasmpilot_writes_delayed_total); another tenant's do not. 0: no bound.
    #[arg(long, default_value_t = crate::controller::write_budget::DEFAULT_WRITES_PER_SECOND)]
    writes_per_second_per_tenant: u32,
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
    /// times --max-concurrent-workers exceeds it is refused. Default: the tightest memory limit
    /// of the host's cgroup and its parents (v1 or v2, nested), else the machine's memory, less
    /// 512 MiB for the host itself (its caches and compiles).
    #[arg(long, env = "WASMPILOT_WORKER_MEMORY_BUDGET_MIB")]
    worker_memory_budget_mib: Option<usize>,
    /// Run a WasmOperator only under an admin's WasmOperatorGrant of its name made for its uid
    /// (`wasmpilot grant <name>`), using only the sensitive kinds the grant lists; without one it
    /// is `Ready=False` (`GrantMissing`, `GrantForAnotherOperator`, `SensitiveKindNotGranted`),
    /// and a grant revoked stops it at once. The shipped Deployment sets it.
    #[arg(long, env = "WASMPILOT_REQUIRE_OPERATOR_GRANTS")]
    require_operator_grants: bool,
    /// Run controllers only while holding a Lease, so several replicas can run (one active).
    #[arg(long, conflicts_with = "shard")]
    leader_elect: bool,
    /// Share the work with the other replicas run with --shard: each operator's resources fall
    /// into --buckets buckets by namespace, each a Lease (in --leader-election-namespace) that
    /// replicas acquire and renew, balanced by the resources in them; a replica reconciles only
    /// in the buckets it holds.
    #[arg(long)]
    shard: bool,
    /// Buckets per operator with --shard (every replica must use the same number).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    buckets: u32,
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
    /// Compile modules in a thread of the host instead of a child process of its binary. A
    /// child is killed at the compile timeout, limited to --compile-memory-mib, and takes its
    /// heap (300–400 MiB for a Python component) with it when it ends.
    #[arg(long)]
    compile_in_host: bool,
    /// The data segment limit of a compile process, in MiB.
    #[arg(long, default_value_t = crate::modules::compile_process::DEFAULT_MEMORY_LIMIT_MIB)]
    compile_memory_mib: u64,
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
    /// How long one attempt at loading a WasmOperator (its kinds, grants, and modules fetched
    /// and compiled one at a time) may take; past it the WasmOperator gets `Ready=False`
    /// (`LoadTimedOut`) and is tried again with backoff, going on from the modules done.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    load_timeout: Duration,
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

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Plain text, one line per event (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log pipelines: `timestamp`, `level`, the event's fields
    /// (`message` among them) as keys, and the enclosing span's fields (a reconcile's
    /// `operator`, `resource`, `phase`) under `span`.
    Json,
}

/// Logs to stderr with `filter` (tracing's EnvFilter syntax; `info` if it does not parse), in
/// `format`; with `otlp_endpoint`, also exports the reconciles' spans there
/// ([`crate::trace_export`]): the returned handle sends the last ones at exit.
pub fn init_tracing(
    filter: &str,
    format: LogFormat,
    otlp_endpoint: Option<&str>,
) -> Result<Option<crate::trace_export::TraceExport>, crate::trace_export::TraceExportError> {
    // Colours only on a terminal: log files and pod logs stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut layers = vec![log_layer(filter, format, ansi, std::io::stderr)];
    let export = match otlp_endpoint.filter(|e| !e.is_empty()) {
        Some(endpoint) => {
            let (layer, export) = crate::trace_export::otlp_layer(endpoint)?;
            layers.push(layer);
            Some(export)
        }
        None => None,
    };
    use tracing_subscriber::layer::SubscriberExt;
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layers));
    Ok(export)
}

/// A subscriber logging as [`init_tracing`] does, to `writer` (for tests).
pub fn log_subscriber<W>(
    filter: &str,
    format: LogFormat,
    ansi: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    Box::new(tracing_subscriber::registry().with(log_layer(filter, format, ansi, writer)))
}

type BoxedLayer = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The log's layer: `filter`'s events and spans (never the spans made only for traces), in
/// `format`, to `writer`.
fn log_layer<W>(filter: &str, format: LogFormat, ansi: bool, writer: W) -> BoxedLayer
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let filter = match format!("{}=off", crate::trace_export::TRACE_TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_writer(writer);
    match format {
        LogFormat::Text => layer
            .fmt_fields(one_line_fields())
            .with_ansi(ansi)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
    }
}

/// Text logs' fields as tracing writes them (the message bare, others `name=value`, strings
/// quoted), each value kept on one line: line breaks and other control characters are escaped
/// (`\n`, `\u{1b}`). A worker controls much logged text (its log lines, stdout and stderr, its
/// error messages), and a line break in it would start a line of its own that reads as the host's,
/// naming any operator. (JSON logs escape them as JSON does.)
fn one_line_fields(
) -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    use std::fmt::Write;
    use tracing_subscriber::field::MakeExt;
    RecordedOnce(
        tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
            if field.name() != "message" {
                write!(writer, "{}=", field.name())?;
            }
            write!(OneLine(writer), "{value:?}")
        })
        .delimited(" "),
    )
}

/// Text fields where a span's field recorded again replaces its value rather than being added
/// beside it: a reconcile records the phase of each phase it chains, and its lines would
/// otherwise read `phase="Initializing" phase="Syncing" phase="Ready"`. (JSON logs keep the
/// last value already.)
struct RecordedOnce<F>(F);

impl<'w, F> tracing_subscriber::fmt::FormatFields<'w> for RecordedOnce<F>
where
    F: for<'a> tracing_subscriber::fmt::FormatFields<'a>,
{
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        self.0.format_fields(writer, fields)
    }

    fn add_fields(
        &self,
        current: &'w mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        let mut added = String::new();
        self.0.format_fields(
            tracing_subscriber::fmt::format::Writer::new(&mut added),
            fields,
        )?;
        replace_fields(&mut current.fields, &added);
        Ok(())
    }
}

/// `current` with the fields of `added` (both `name=value …` as the text format writes them)
/// in place of its own of the same names; when either does not read as such fields (a value
/// written bare with a space in it), `added` is appended, as tracing does.
fn replace_fields(current: &mut String, added: &str) {
    if added.is_empty() {
        return;
    }
    let (Some(old), Some(new)) = (text_fields(current), text_fields(added)) else {
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(added);
        return;
    };
    let kept: Vec<&str> = old
        .iter()
        .filter(|(name, _)| new.iter().all(|(n, _)| n != name))
        .map(|(_, field)| *field)
        .collect();
    let mut fields = kept.join(" ");
    if !fields.is_empty() {
        fields.push(' ');
    }
    fields.push_str(added);
    *current = fields;
}

/// The `name=value` fields of a span's text, each with its name; a quoted value ends at its
/// closing quote (escapes skipped), any other at the next space. `None` when the text does not
/// read as such fields.
fn text_fields(text: &str) -> Option<Vec<(&str, &str)>> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < text.len() {
        if text[at..].starts_with(' ') {
            at += 1;
            continue;
        }
        let eq = at + text[at..].find('=')?;
        let name = &text[at..eq];
        if name.is_empty() || name.contains([' ', '"']) {
            return None;
        }
        let value = eq + 1;
        let end = if text[value..].starts_with('"') {
            let mut escaped = false;
            let close = text[value + 1..].char_indices().find_map(|(i, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes.then_some(value + 1 + i + 1)
            })?;
            if !(close == text.len() || text[close..].starts_with(' ')) {
                return None;
            }
            close
        } else {
            text[value..].find(' ').map_or(text.len(), |i| value + i)
        };
        fields.push((name, &text[at..end]));
        at = end;
    }
    Some(fields)
}

/// Writes through to `W` with control characters (tab aside) escaped, so the text stays one
/// line; text without any is written as it is, with no copy.
struct OneLine<W>(W);

impl<W: std::fmt::Write> std::fmt::Write for OneLine<W> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let escaped = |c: char| c.is_control() && c != '\t';
        if !text.chars().any(escaped) {
            return self.0.write_str(text);
        }
        for c in text.chars() {
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                c if escaped(c) => write!(self.0, "{}", c.escape_unicode())?,
                c => self.0.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Runs the host until SIGTERM or SIGINT (or, under leader election, until leadership is lost).
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let connection = crate::api_client::Connection::infer()
        .await
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?
        .with_user_agent(&format!(
            "wasmpilot-host/{} ({identity})",
            env!("CARGO_PKG_VERSION")
        ));
    let client = connection
        .client()
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    // The shared caches' watches on a connection of their own: writes, reviews and Lease
    // renewals never wait for a stream behind them.
    let watch_client = connection
        .separate_pool()
        .and_then(|c| c.client())
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    // ...spread over more connections as they fill (a watch holds its stream while it runs).
    let more_watches = connection
        .separate_pool()
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    let watch_connections = Arc::new(
        crate::controller::watch_connections::WatchConnections::opening(
            watch_client,
            Box::new(move || more_watches.separate_pool().and_then(|c| c.client())),
        ),
    );
    let identities =
        crate::controller::grants::Identities::impersonating(connection, &args.identity_namespace);
    let limits = SandboxLimits {
        deadline: args.deadline,
        memory_bytes: args.memory_limit_mib << 20,
        concurrency: args.max_concurrent_workers,
        max_deadline: args.max_deadline.max(args.deadline),
        max_memory_bytes: args.max_memory_limit_mib.max(args.memory_limit_mib) << 20,
        worker_memory_budget: crate::memory_limit::worker_memory_budget(
            args.worker_memory_budget_mib,
        ),
        instance_memory: if args.no_instance_pool {
            InstanceMemory::OnDemand
        } else {
            InstanceMemory::Pooling {
                keep_resident: args.keep_resident_mib << 20,
                warm_modules: args.warm_modules,
            }
        },
        ..SandboxLimits::default()
    };
    let limits = SandboxLimits {
        log_rate: Some(LogRateLimit {
            lines_per_second: args.worker_log_lines_per_second,
            burst: u32::try_from(limits.log_lines).unwrap_or(u32::MAX),
        }),
        ..limits
    };
    if let Some(budget) = limits.worker_memory_budget {
        let defaults = limits
            .memory_bytes
            .saturating_mul(limits.concurrency.max(1));
        anyhow::ensure!(
            defaults <= budget,
            "--memory-limit-mib {} × --max-concurrent-workers {} = {} MiB does not fit the worker memory budget of {} MiB (--worker-memory-budget-mib, or the cgroup's or machine's memory less 512 MiB): every operator with default limits would be refused",
            limits.memory_bytes >> 20,
            limits.concurrency,
            defaults >> 20,
            budget >> 20
        );
    }
    if let Some(addr) = args.shadow_cases_addr {
        if !addr.ip().is_loopback() {
            return Err(crate::metrics::ShadowCasesExposed(addr).into());
        }
        tokio::spawn(async move {
            let kept = crate::controller::shadow::kept_cases as crate::metrics::ShadowCases;
            if let Err(e) = crate::metrics::serve_shadow_cases(addr, kept).await {
                tracing::error!(%addr, error = %e, "shadow cases server stopped");
            }
        });
    }
    if let Some(addr) = args.metrics_addr {
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve(addr).await {
                tracing::error!(%addr, error = %e, "metrics server stopped");
            }
        });
    }
    let record_sink = match &args.record_dir {
        Some(dir) => Some(
            crate::evidence::record::RecordSink::start(dir, args.record_max_mib << 20)
                .context("--record-dir")?,
        ),
        None => None,
    };
    let input_requeue = if args.requeue_whole_namespace {
        crate::controller::context::InputRequeue::WholeNamespace
    } else {
        crate::controller::context::InputRequeue::Selected
    };
    let egress = crate::egress::EgressPolicy::allowing(&args.allow_fetch_from)?;
    let sandbox = Sandbox::new(limits)?;
    let compile_process = if args.compile_in_host {
        None
    } else {
        Some(
            crate::modules::compile_process::CompileProcess::of_current_exe(
                args.compile_memory_mib,
            )
            .context("finding the host's executable for compile processes (--compile-in-host compiles in the host instead)")?,
        )
    };
    let modules = Arc::new(
        ModuleCache::new(sandbox, Some(client.clone()), args.module_dir)
            .forgetting_unused()
            .confining_files()
            .compiling_in(compile_process)
            .with_egress(egress.clone())
            .with_compile_cache_limited(
                crate::modules::compile_cache_dir(args.cache_dir, args.no_cache),
                args.cache_max_mib.saturating_mul(1 << 20),
            ),
    );
    let shutdown = async {
        let signal = termination().await;
        tracing::info!(signal, "shutting down");
    };
    // The host's own namespaces: its operators' accounts', its Leases' (with replicas) and its
    // pod's. No operator's output goes there.
    let reserved = crate::controller::context::ReservedNamespaces::new(
        [
            Some(args.identity_namespace.clone()),
            (args.shard || args.leader_elect).then(|| args.leader_election_namespace.clone()),
            std::env::var("POD_NAMESPACE").ok(),
        ]
        .into_iter()
        .flatten(),
    );
    tracing::info!(namespaces = ?reserved.iter().collect::<Vec<_>>(), "no operator's output goes into these namespaces (the host's own)");
    if args.shard {
        let timing = LeaseTiming {
            lease_duration: args.lease_duration,
            renew_every: args.lease_duration / 3,
            retry_every: (args.lease_duration / 5).max(Duration::from_millis(500)),
        };
        let sharding = Arc::new(crate::controller::buckets::Sharding::new(
            client.clone(),
            &args.leader_election_namespace,
            &identity,
            args.buckets,
            timing,
        ));
        tracing::info!(%identity, buckets = args.buckets, namespace = %args.leader_election_namespace, "sharded: reconciling the buckets this replica holds");
        crate::metrics::METRICS.leader.set(1);
        let leases = tokio::spawn(sharding.clone().run());
        let result = Manager::new(client, identities, modules)
            .with_load_timeout(args.load_timeout)
            .with_egress(egress)
            .with_prometheus(args.prometheus_url.clone())
            .with_record_sink(record_sink)
            .with_input_requeue(input_requeue)
            .with_reserved_namespaces(reserved.clone())
            .with_required_grants(args.require_operator_grants)
            .with_watch_connections(watch_connections.clone())
            .with_writes_per_second(args.writes_per_second_per_tenant)
            .with_sharding(Some(sharding.clone()))
            .run(shutdown)
            .await;
        // The controllers have stopped (in-flight reconciles finished): hand every bucket over.
        leases.abort();
        sharding.release_all().await;
        return result;
    }
    if !args.leader_elect {
        crate::metrics::METRICS.leader.set(1);
        return Manager::new(client, identities, modules)
            .with_load_timeout(args.load_timeout)
            .with_egress(egress)
            .with_prometheus(args.prometheus_url.clone())
            .with_record_sink(record_sink)
            .with_input_requeue(input_requeue)
            .with_reserved_namespaces(reserved.clone())
            .with_required_grants(args.require_operator_grants)
            .with_watch_connections(watch_connections.clone())
            .with_writes_per_second(args.writes_per_second_per_tenant)
            .run(shutdown)
            .await;
    }
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
    crate::metrics::READINESS.mark_standby();
    tokio::select! {
        () = election.acquire() => {}
        () = &mut shutdown => return Ok(()),
    }
    // The leader is ready only once its own WasmOperators are listed and loaded, caches synced.
    crate::metrics::READINESS.mark_leader();
    crate::metrics::METRICS.leader.set(1);
    let manager = Manager::new(client, identities, modules)
        .with_load_timeout(args.load_timeout)
        .with_egress(egress)
        .with_prometheus(args.prometheus_url.clone())
        .with_record_sink(record_sink)
        .with_input_requeue(input_requeue)
        .with_reserved_namespaces(reserved)
        .with_required_grants(args.require_operator_grants)
        .with_watch_connections(watch_connections)
        .with_writes_per_second(args.writes_per_second_per_tenant);
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

/// Runs a binary's `main` body on a new tokio runtime, with the process's malloc set up first
/// ([`crate::heap::use_one_arena`]: before the runtime's threads, which take their arena at
/// their first allocation).
pub fn run_main<F: std::future::Future<Output = std::process::ExitCode>>(
    body: impl FnOnce() -> F,
) -> std::process::ExitCode {
    if let Some(exit) = crate::modules::compile_process::serve_if_asked() {
        return exit;
    }
    crate::heap::use_one_arena();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(body()),
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("the buffer").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the host's log subscriber in `format` writes while `body` runs.
    fn logged(format: LogFormat, body: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = log_subscriber("info", format, false, move || writer.clone());
        tracing::subscriber::with_default(subscriber, body);
        let bytes = captured.0.lock().expect("the buffer").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    /// `--log-format json`: one object per line; the event's fields and the reconcile span's
    /// fields are keys a log pipeline can filter on.
    #[test]
    fn json_logs_carry_the_reconciles_span_fields_as_keys() {
        let text = logged(LogFormat::Json, || {
            let span = tracing::info_span!(
                "reconcile",
                operator = "autoroute",
                resource = "team-a/r1",
                phase = tracing::field::Empty
            );
            let _entered = span.enter();
            // A chained phase records its own: the key holds the phase running now.
            span.record("phase", "Initializing");
            span.record("phase", "Syncing");
            tracing::warn!(error = "boom", fatal = true, "reconcile failed");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON object");
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["message"], "reconcile failed", "{line}");
        assert_eq!(line["error"], "boom", "{line}");
        assert_eq!(line["fatal"], true, "{line}");
        assert_eq!(line["span"]["name"], "reconcile", "{line}");
        assert_eq!(line["span"]["operator"], "autoroute", "{line}");
        assert_eq!(line["span"]["resource"], "team-a/r1", "{line}");
        assert_eq!(line["span"]["phase"], "Syncing", "{line}");
        assert!(line["timestamp"].is_string(), "{line}");
    }

    /// The spans made for traces (worker call, apply, status write) never reach the log: a
    /// worker's log line inside its call still names the reconcile, in both formats, even when
    /// the filter asks for everything.
    #[test]
    fn the_trace_spans_stay_out_of_the_log() {
        for format in [LogFormat::Json, LogFormat::Text] {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = log_subscriber("trace", format, false, move || writer.clone());
            tracing::subscriber::with_default(subscriber, || {
                let span = tracing::info_span!("reconcile", operator = "autoroute");
                let _entered = span.enter();
                let call = tracing::info_span!(
                    target: crate::trace_export::TRACE_TARGET,
                    "worker call",
                    module = "sha256:abc"
                );
                let _in_call = call.enter();
                tracing::info!("worker says hi");
            });
            let text =
                String::from_utf8(captured.0.lock().expect("the buffer").clone()).expect("utf-8");
            assert!(!text.contains("worker call"), "{format:?}: {text}");
            assert!(!text.contains("sha256:abc"), "{format:?}: {text}");
            assert!(text.contains("autoroute"), "{format:?}: {text}");
            if format == LogFormat::Json {
                let line: serde_json::Value =
                    serde_json::from_str(text.lines().last().unwrap_or_default())
                        .expect("a JSON object");
                assert_eq!(line["span"]["name"], "reconcile", "{line}");
            }
        }
    }

    /// Text logs: a reconcile that chains phases records each, and its lines name the one
    /// running now, once.
    #[test]
    fn text_logs_name_the_phase_running_now_once() {
        let text = logged(LogFormat::Text, || {
            let span = tracing::info_span!(
                "reconcile",
                operator = "autoroute",
                resource = "team-a/r1",
                phase = tracing::field::Empty
            );
            let _entered = span.enter();
            span.record("phase", "Initializing");
            tracing::info!("first");
            span.record("phase", "Syncing \"quoted\" phase=Ready");
            span.record("phase", "Ready");
            tracing::info!("last");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].contains(
                r#"reconcile{operator="autoroute" resource="team-a/r1" phase="Initializing"}: first"#
            ),
            "{text}"
        );
        assert!(
            lines[1].contains(
                r#"reconcile{operator="autoroute" resource="team-a/r1" phase="Ready"}: last"#
            ),
            "{text}"
        );
    }

    #[test]
    fn fields_recorded_again_replace_their_values() {
        let mut fields = String::from(r#"operator="a" n=1 phase="P \" q=1""#);
        replace_fields(&mut fields, r#"phase="Q""#);
        assert_eq!(fields, r#"operator="a" n=1 phase="Q""#);
        replace_fields(&mut fields, "n=2 extra=x");
        assert_eq!(fields, r#"operator="a" phase="Q" n=2 extra=x"#);
        // A bare value with a space in it is not read as fields: appended, as tracing does.
        let mut bare = String::from("key=a b");
        replace_fields(&mut bare, "key=c");
        assert_eq!(bare, "key=a b key=c");
        let mut empty = String::new();
        replace_fields(&mut empty, r#"phase="P""#);
        assert_eq!(empty, r#"phase="P""#);
    }

    /// Text logs: what a worker wrote with line breaks (here, a forged host line naming another
    /// operator) stays inside the one line of the reconcile that logged it.
    #[test]
    fn text_logs_keep_worker_text_on_one_line() {
        let forged = "2026-11-29T15:10:38Z ERROR reconcile{operator=victim}: forged";
        let text = logged(LogFormat::Text, || {
            let span = tracing::info_span!("reconcile", operator = "attacker");
            let _entered = span.enter();
            tracing::info!(fields = %format!("k=v\n{forged}"), "fine\r\n{forged}\u{1b}[31m");
            tracing::info!(stream = "stderr", "Traceback:\n  File \"app.py\"\tline 1");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains("reconcile{operator=\"attacker\"}")
                    || l.contains("reconcile{operator=attacker}")),
            "each line is the attacker's reconcile's: {text}"
        );
        assert!(
            lines[0].contains("fine\\r\\n2026-11-29T15:10:38Z ERROR reconcile{operator=victim}: forged\\u{1b}[31m fields=k=v\\n2026"),
            "{text}"
        );
        assert!(
            lines[1].contains("Traceback:\\n  File \"app.py\"\tline 1 stream=\"stderr\""),
            "{text}"
        );
    }
}
