//! Prometheus metrics (`/metrics`, text format) and health endpoints (`/healthz`, `/readyz`),
//! served by `wasmpilot run --metrics-addr`. One process-wide registry, like client-go's.

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub operator: String,
    pub phase: String,
    /// `ok`, or the failure reason (as in the Condition).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub operator: String,
    pub phase: String,
}

/// One phase of one operator, and whether a resource there counts as done (`Ready`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseStateLabels {
    pub operator: String,
    pub phase: String,
    /// `true` for a final phase or one declared `ready`.
    pub ready: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub operator: String,
    pub phase: String,
    /// `deadline` or `memory`.
    pub limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    /// `queue_full`, `too_large` or `write_error`.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    pub operator: String,
    pub phase: String,
    /// `same`, `different` or `error` (the shadow made no decision where the live module did).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperatorLabels {
    pub operator: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadLabels {
    pub operator: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `group/version Kind`.
    pub kind: String,
    /// `inputs` (objects as workers see them) or `outputs` (metadata).
    pub cache: String,
}

/// Every metric the host exports.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub worker_duration: Family<PhaseLabels, Histogram>,
    /// How long an operator's status writes take at the API server (sent to answered).
    pub status_write_duration: Family<OperatorLabels, Histogram>,
    /// Writes that waited for their tenant's write budget.
    pub writes_delayed: Family<OperatorLabels, Counter>,
    /// Objects of the shared caches each operator reads (a shared cache counts for each).
    pub cached_objects_charged: Family<OperatorLabels, Gauge>,
    /// The same per tenant, a cache shared within a tenant counted once.
    pub tenant_cached_objects: Family<TenantLabels, Gauge>,
    /// Watches of the shared caches each operator reads (a shared one counts for each).
    pub watches_charged: Family<OperatorLabels, Gauge>,
    /// Watches placed on a connection already carrying its share (another could not be
    /// opened): they may wait for a stream.
    pub watches_on_full_connections: Gauge,
    pub limit_kills: Family<LimitLabels, Counter>,
    pub load_failures: Family<LoadLabels, Counter>,
    pub reconciles_in_flight: Gauge,
    pub worker_calls_waiting: Gauge,
    /// The shared caches' watches, and the connections they are spread over.
    pub watches: Gauge,
    pub watch_connections: Gauge,
    pub operators_running: Gauge,
    /// Compiled components in memory: one per digest some worker (live, draining or shadow) uses.
    pub modules_in_memory: Gauge,
    pub records_written: Counter,
    pub records_dropped: Family<DropLabels, Counter>,
    pub shadow_decisions: Family<ShadowLabels, Counter>,
    pub shadow_skipped: Family<PhaseLabels, Counter>,
    /// Resources in each phase, from the operator's watch.
    pub resources: Family<PhaseStateLabels, Gauge>,
    /// When the resource longest in each phase entered it (Unix seconds; absent when the
    /// phase holds none): `time() - this` is how long it has been there.
    pub phase_oldest_entered: Family<PhaseStateLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// 1 while this host reconciles (the leader, or a host without `--leader-elect`), else 0.
    pub leader: Gauge,
    /// Bucket Leases this replica holds per operator (`--shard`).
    pub buckets_held: Family<OperatorLabels, Gauge>,
    /// Buckets per operator (`--shard`'s `--buckets`), for "held by no replica" alerts.
    pub buckets: Family<OperatorLabels, Gauge>,
    /// Reconciles this replica skipped because another replica holds the resource's bucket.
    pub reconciles_not_held: Family<OperatorLabels, Counter>,
    /// Objects in the shared watch caches per kind (a sharded replica's: its buckets' only).
    pub cached_objects: Family<CacheLabels, Gauge>,
    /// Worker log lines (and printed output) the host's log did not take: over the operator's
    /// share (`--worker-log-lines-per-second`).
    pub worker_log_lines_dropped: Family<OperatorLabels, Counter>,
}

fn duration_histogram() -> Histogram {
    // 50 µs … ~1.6 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn request_histogram() -> Histogram {
    // 5 ms … 10 s
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0,
    ])
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("wasmpilot");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles by operator, phase and result",
            reconciles.clone(),
        );
        let worker_duration = Family::<PhaseLabels, Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        registry.register(
            "worker_duration_seconds",
            "Wall time of phase worker calls (fresh instance + sync), including waiting for a slot",
            worker_duration.clone(),
        );
        let status_write_duration = Family::<OperatorLabels, Histogram>::new_with_constructor(
            request_histogram as fn() -> Histogram,
        );
        registry.register(
            "status_write_duration_seconds",
            "Wall time of an operator's status writes (sent to answered)",
            status_write_duration.clone(),
        );
        let writes_delayed = Family::<OperatorLabels, Counter>::default();
        registry.register(
            "writes_delayed",
            "Writes (applies, deletions, status writes) that waited for their tenant's write budget (--writes-per-second-per-tenant)",
            writes_delayed.clone(),
        );
        let cached_objects_charged = Family::<OperatorLabels, Gauge>::default();
        registry.register(
            "cached_objects_charged",
            "Objects of the shared caches an operator's inputs and outputs read (a cache shared by operators counts for each)",
            cached_objects_charged.clone(),
        );
        let tenant_cached_objects = Family::<TenantLabels, Gauge>::default();
        registry.register(
            "tenant_cached_objects",
            "Objects of the shared caches a tenant's operators read (each cache once)",
            tenant_cached_objects.clone(),
        );
        let watches_charged = Family::<OperatorLabels, Gauge>::default();
        registry.register(
            "watches_charged",
            "Watches of the shared caches an operator's inputs and outputs read (a shared one counts for each)",
            watches_charged.clone(),
        );
        let watches_on_full_connections = Gauge::default();
        registry.register(
            "watches_on_full_connections",
            "Watches placed on a connection past its 50 (another could not be opened): they may wait for an HTTP/2 stream",
            watches_on_full_connections.clone(),
        );
        let limit_kills = Family::<LimitLabels, Counter>::default();
        registry.register(
            "worker_limit_kills",
            "Worker calls ended by the deadline or the memory limit",
            limit_kills.clone(),
        );
        let load_failures = Family::<LoadLabels, Counter>::default();
        registry.register(
            "operator_load_failures",
            "Failed loads of a WasmOperator (module fetch/verify/compile, kinds, permissions)",
            load_failures.clone(),
        );
        let reconciles_in_flight = Gauge::default();
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now",
            reconciles_in_flight.clone(),
        );
        let worker_calls_waiting = Gauge::default();
        registry.register(
            "worker_calls_waiting",
            "Worker calls queued for a sandbox slot",
            worker_calls_waiting.clone(),
        );
        let watches = Gauge::default();
        registry.register(
            "watches",
            "Watches of the shared caches (one HTTP/2 stream each)",
            watches.clone(),
        );
        let watch_connections = Gauge::default();
        watch_connections.set(1);
        registry.register(
            "watch_connections",
            "Connections the shared caches' watches are spread over (at most 50 watches each)",
            watch_connections.clone(),
        );
        let operators_running = Gauge::default();
        registry.register(
            "operators_running",
            "WasmOperators with a running controller",
            operators_running.clone(),
        );
        let modules_in_memory = Gauge::default();
        registry.register(
            "modules_in_memory",
            "Compiled components held in memory, one per module digest in use",
            modules_in_memory.clone(),
        );
        let records_written = Counter::default();
        registry.register(
            "decisions_recorded",
            "Decisions written to the record directory (--record-dir)",
            records_written.clone(),
        );
        let records_dropped = Family::<DropLabels, Counter>::default();
        registry.register(
            "decisions_record_dropped",
            "Decisions not recorded: the writer's queue was full, the case was larger than a segment, or writing failed",
            records_dropped.clone(),
        );
        let shadow_decisions = Family::<ShadowLabels, Counter>::default();
        registry.register(
            "shadow_decisions",
            "Shadow module runs compared with the live decision on the same request",
            shadow_decisions.clone(),
        );
        let shadow_skipped = Family::<PhaseLabels, Counter>::default();
        registry.register(
            "shadow_skipped",
            "Live decisions not shadowed because the shadow queue was full",
            shadow_skipped.clone(),
        );
        let resources = Family::<PhaseStateLabels, Gauge>::default();
        registry.register(
            "resources",
            "Resources of each operator in each phase (ready: the phase counts as done)",
            resources.clone(),
        );
        let phase_oldest_entered =
            Family::<PhaseStateLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "phase_oldest_entered_timestamp_seconds",
            "When the resource longest in each phase entered it (time() minus this: how long it has been there)",
            phase_oldest_entered.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this host reconciles (the leader, or a host without --leader-elect), else 0",
            leader.clone(),
        );
        let buckets_held = Family::<OperatorLabels, Gauge>::default();
        registry.register(
            "buckets_held",
            "Bucket Leases this replica holds per operator (--shard): it reconciles only their resources",
            buckets_held.clone(),
        );
        let buckets = Family::<OperatorLabels, Gauge>::default();
        registry.register(
            "buckets",
            "Buckets each operator's resources fall into (--shard --buckets), on every sharded replica",
            buckets.clone(),
        );
        let cached_objects = Family::<CacheLabels, Gauge>::default();
        registry.register(
            "cached_objects",
            "Objects in the shared watch caches, per kind; on a sharded replica only the namespaces of the buckets it holds",
            cached_objects.clone(),
        );
        let reconciles_not_held = Family::<OperatorLabels, Counter>::default();
        registry.register(
            "reconciles_not_held",
            "Reconciles skipped because the resource's bucket is held by another replica (--shard)",
            reconciles_not_held.clone(),
        );
        let worker_log_lines_dropped = Family::<OperatorLabels, Counter>::default();
        registry.register(
            "worker_log_lines_dropped",
            "Worker log lines (and printed output) not written to the host's log: over the operator's share (--worker-log-lines-per-second)",
            worker_log_lines_dropped.clone(),
        );
        Metrics {
            registry,
            worker_log_lines_dropped,
            buckets_held,
            buckets,
            reconciles_not_held,
            cached_objects,
            resources,
            phase_oldest_entered,
            leader,
            records_written,
            records_dropped,
            shadow_decisions,
            shadow_skipped,
            reconciles,
            worker_duration,
            status_write_duration,
            writes_delayed,
            cached_objects_charged,
            tenant_cached_objects,
            watches_charged,
            watches_on_full_connections,
            limit_kills,
            load_failures,
            reconciles_in_flight,
            worker_calls_waiting,
            watches,
            watch_connections,
            operators_running,
            modules_in_memory,
        }
    }

    /// Counts a decision the record sink dropped, by why.
    pub fn record_drops(&self, reason: &str) {
        self.records_dropped
            .get_or_create(&DropLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The registry in Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The process-wide metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// What `/readyz` reports. A single host (or the leader) is ready once WasmOperators were listed,
/// every listed operator's modules loaded and every started controller's caches synced; a
/// sharded replica, also once it holds its share and its caches hold those buckets' namespaces. A standby
/// of `--leader-elect` is ready as a standby (it must not block a rollout) until it wins the
/// Lease; from then on it reports like a single host, from scratch.
///
/// Once ready, a host stays ready while an operator applied or changed later syncs its caches or
/// takes its buckets (the body says what is still pending): one team's new WasmOperator, or a
/// slow kind it reads, must not take every replica out of its Service and block the
/// PodDisruptionBudget. That operator's own status says when it runs. A new leader starts over.
#[derive(Default)]
pub struct Readiness {
    standby: AtomicBool,
    listed: AtomicBool,
    /// Ready once since the host started or last became the leader.
    was_ready: AtomicBool,
    syncing: Mutex<BTreeSet<String>>,
    /// With `--shard`: per operator, the buckets assigned to this replica it does not hold yet
    /// (`None`: not balanced yet).
    buckets_pending: Mutex<BTreeMap<String, Option<usize>>>,
    /// With `--shard`: the kinds whose caches are still listing a bucket gained.
    listing: Mutex<Option<ListingCaches>>,
}

/// The kinds whose caches do not yet hold every bucket this replica holds.
pub type ListingCaches = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// Why `/readyz` answers 503: what the host still waits for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotReady {
    #[error("WasmOperators not listed (and their modules not loaded) yet")]
    NotListed,
    #[error("caches not synced for: {}", .operators.join(", "))]
    CachesNotSynced { operators: Vec<String> },
    #[error("buckets assigned to this replica not held yet: {}", .pending.join(", "))]
    BucketsNotHeld { pending: Vec<String> },
    #[error("caches still listing the buckets gained: {}", .kinds.join(", "))]
    BucketsNotListed { kinds: Vec<String> },
}

/// `/readyz` body of a ready leader or single host.
pub const READY: &str = "ok";
/// `/readyz` body of a ready standby.
pub const READY_STANDBY: &str = "ok: standby, waiting for the leader-election Lease";

/// Why `/readyz` answers 200.
#[derive(Debug, PartialEq, Eq)]
pub enum Ready {
    /// Everything listed, loaded, synced and held.
    Serving,
    /// A `--leader-elect` standby.
    Standby,
    /// Ready before; an operator started since is still syncing or taking its buckets.
    ServingWhile(NotReady),
}

impl std::fmt::Display for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ready::Serving => f.write_str(READY),
            Ready::Standby => f.write_str(READY_STANDBY),
            Ready::ServingWhile(pending) => {
                write!(f, "{READY}; operators started since: {pending}")
            }
        }
    }
}

impl Readiness {
    /// This host waits for leadership: ready, as a standby.
    pub fn mark_standby(&self) {
        self.standby.store(true, Ordering::Relaxed);
    }

    /// This host just became the leader: not ready until its own listing and syncs are done.
    pub fn mark_leader(&self) {
        self.listed.store(false, Ordering::Relaxed);
        self.was_ready.store(false, Ordering::Relaxed);
        self.standby.store(false, Ordering::Relaxed);
    }

    /// Every WasmOperator was listed, and the modules of each were loaded (or failed).
    pub fn mark_listed(&self) {
        self.listed.store(true, Ordering::Relaxed);
    }

    pub fn syncing(&self, operator: &str) {
        self.lock().insert(operator.to_string());
    }

    pub fn synced(&self, operator: &str) {
        self.lock().remove(operator);
        self.note_if_ready();
    }

    /// Remembers that the host is ready when it is, whether or not a probe asked just then: an
    /// operator started before the next probe must not make a host that was ready look as if it
    /// never was.
    fn note_if_ready(&self) {
        if self.pending().is_ok() {
            self.was_ready.store(true, Ordering::Relaxed);
        }
    }

    /// With `--shard`: `pending` buckets assigned to this replica for `operator` are not held
    /// yet (0: it holds its share, or the operator is gone).
    pub fn buckets_pending(&self, operator: &str, pending: usize) {
        let mut map = self
            .buckets_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if pending == 0 {
            map.remove(operator);
        } else {
            map.insert(operator.to_string(), Some(pending));
        }
        drop(map);
        self.note_if_ready();
    }

    /// With `--shard`: `operator` has started here, and its buckets are not balanced yet (so its
    /// caches syncing first cannot make the host ready before it holds its share).
    pub fn buckets_not_balanced(&self, operator: &str) {
        self.buckets_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(operator.to_string())
            .or_insert(None);
    }

    /// Why the host is ready, else what it still waits for.
    pub fn check(&self) -> Result<Ready, NotReady> {
        if self.standby.load(Ordering::Relaxed) {
            return Ok(Ready::Standby);
        }
        match self.pending() {
            Ok(()) => {
                self.was_ready.store(true, Ordering::Relaxed);
                Ok(Ready::Serving)
            }
            Err(NotReady::NotListed) => Err(NotReady::NotListed),
            Err(pending) if self.was_ready.load(Ordering::Relaxed) => {
                Ok(Ready::ServingWhile(pending))
            }
            Err(pending) => Err(pending),
        }
    }

    /// What a (leader or single) host still waits for, if anything.
    fn pending(&self) -> Result<(), NotReady> {
        if !self.listed.load(Ordering::Relaxed) {
            return Err(NotReady::NotListed);
        }
        let syncing = self.lock();
        if !syncing.is_empty() {
            return Err(NotReady::CachesNotSynced {
                operators: syncing.iter().cloned().collect(),
            });
        }
        let pending = self
            .buckets_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !pending.is_empty() {
            return Err(NotReady::BucketsNotHeld {
                pending: pending
                    .iter()
                    .map(|(op, n)| match n {
                        Some(n) => format!("{op} ({n})"),
                        None => format!("{op} (not balanced yet)"),
                    })
                    .collect(),
            });
        }
        let kinds = self
            .listing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|listing| listing())
            .unwrap_or_default();
        if kinds.is_empty() {
            Ok(())
        } else {
            Err(NotReady::BucketsNotListed { kinds })
        }
    }

    /// With `--shard`: how to tell which caches still list buckets gained.
    pub fn watch_listing(&self, listing: ListingCaches) {
        *self.listing.lock().unwrap_or_else(|p| p.into_inner()) = Some(listing);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.syncing.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub static READINESS: LazyLock<Readiness> = LazyLock::new(Readiness::default);

/// What `/shadow-cases` serves: the kept cases of one operator (all for `None`), one JSON case
/// per line (the evidence step's `shadow::kept_cases`).
pub type ShadowCases = fn(Option<&str>) -> String;

/// Serves `/metrics`, `/healthz` and `/readyz` until the process ends.
pub async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|| async {
                (
                    [("content-type", "text/plain; version=0.0.4")],
                    METRICS.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|| async {
                match READINESS.check() {
                    Ok(ready) => (StatusCode::OK, ready.to_string()),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, app).await?;
    Ok(())
}

/// `/shadow-cases` was asked for on an address other hosts could reach.
#[derive(Debug, thiserror::Error)]
#[error("--shadow-cases-addr {0} is not a loopback address: the cases hold whole requests (input objects, Secrets included), so they are served on loopback only (reach them with `kubectl port-forward`)")]
pub struct ShadowCasesExposed(pub SocketAddr);

/// Serves `/shadow-cases` on its own listener, on loopback only, until the process ends: the
/// last decisions of shadow modules that differed from the live ones, one JSON case per line
/// (`?operator=NAME` for one operator), input for `wasmpilot replay`.
pub async fn serve_shadow_cases(addr: SocketAddr, kept_cases: ShadowCases) -> anyhow::Result<()> {
    if !addr.ip().is_loopback() {
        return Err(ShadowCasesExposed(addr).into());
    }
    let app = Router::new().route(
        "/shadow-cases",
        get(
            move |query: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
                (
                    [("content-type", "application/jsonl")],
                    kept_cases(query.get("operator").map(String::as_str)),
                )
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /shadow-cases (loopback only)");
    axum::serve(listener, app).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Every metric `deploy/monitoring/rules.yaml` names is one the host exports, with that
    /// exact name (counters end in `_total`).
    #[test]
    fn the_alert_rules_name_metrics_the_host_exports() {
        let m = &*METRICS;
        let phase = PhaseLabels {
            operator: "rules-test".into(),
            phase: "P".into(),
        };
        m.reconciles
            .get_or_create(&ReconcileLabels {
                operator: "rules-test".into(),
                phase: "P".into(),
                result: "ok".into(),
            })
            .inc();
        m.limit_kills
            .get_or_create(&LimitLabels {
                operator: "rules-test".into(),
                phase: "P".into(),
                limit: "deadline".into(),
            })
            .inc();
        m.shadow_decisions
            .get_or_create(&ShadowLabels {
                operator: "rules-test".into(),
                phase: "P".into(),
                result: "same".into(),
            })
            .inc();
        m.load_failures
            .get_or_create(&LoadLabels {
                operator: "rules-test".into(),
                reason: "R".into(),
            })
            .inc();
        let state = PhaseStateLabels {
            operator: "rules-test".into(),
            phase: "P".into(),
            ready: "false".into(),
        };
        m.resources.get_or_create(&state).set(1);
        m.phase_oldest_entered.get_or_create(&state).set(1.0);
        let operator = OperatorLabels {
            operator: "rules-test".into(),
        };
        m.buckets_held.get_or_create(&operator).set(1);
        m.buckets.get_or_create(&operator).set(16);
        m.worker_log_lines_dropped.get_or_create(&operator).inc();
        m.cached_objects_charged.get_or_create(&operator).set(1);
        m.tenant_cached_objects
            .get_or_create(&TenantLabels {
                tenant: "rules-test".into(),
            })
            .set(1);
        let _ = m.shadow_skipped.get_or_create(&phase);
        let exported = m.encode();
        let rules = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/monitoring/rules.yaml"
        ))
        .expect("deploy/monitoring/rules.yaml");
        let mut named = std::collections::BTreeSet::new();
        for (i, _) in rules.match_indices("wasmpilot_") {
            let before = rules[..i].chars().last().unwrap_or(' ');
            if before.is_ascii_alphanumeric() || before == ':' || before == '_' {
                continue;
            }
            let name: String = rules[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            named.insert(name);
        }
        assert!(named.len() >= 6, "premise: the rules are read: {named:?}");
        for name in &named {
            let sample = exported
                .lines()
                .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")));
            assert!(sample, "{name} is not exported:\n{exported}");
        }
    }

    use super::*;

    #[test]
    fn metrics_encode_with_labels() {
        let m = Metrics::new();
        m.reconciles
            .get_or_create(&ReconcileLabels {
                operator: "autoroute".into(),
                phase: "Syncing".into(),
                result: "ok".into(),
            })
            .inc();
        m.worker_duration
            .get_or_create(&PhaseLabels {
                operator: "autoroute".into(),
                phase: "Syncing".into(),
            })
            .observe(0.001);
        let text = m.encode();
        assert!(
            text.contains(
                r#"wasmpilot_reconciles_total{operator="autoroute",phase="Syncing",result="ok"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains("wasmpilot_worker_duration_seconds_bucket"),
            "{text}"
        );
    }

    #[test]
    fn readiness_waits_for_listing_and_syncs() {
        let r = Readiness::default();
        assert_eq!(r.check(), Err(NotReady::NotListed));
        r.mark_listed();
        r.syncing("a");
        assert_eq!(
            r.check().unwrap_err().to_string(),
            "caches not synced for: a"
        );
        r.synced("a");
        assert_eq!(r.check(), Ok(Ready::Serving));
    }

    #[test]
    fn once_ready_an_operator_started_later_does_not_make_the_host_unready() {
        let r = Readiness::default();
        r.mark_listed();
        r.syncing("early");
        assert!(r.check().is_err(), "the first operators gate readiness");
        r.synced("early");
        assert_eq!(r.check(), Ok(Ready::Serving));
        // Another team's operator applied later: its sync and buckets are pending.
        r.syncing("later");
        r.buckets_pending("later", 3);
        let ready = r.check().expect("still ready");
        assert_eq!(
            ready.to_string(),
            "ok; operators started since: caches not synced for: later"
        );
        r.synced("later");
        assert_eq!(
            r.check().map(|ready| ready.to_string()),
            Ok("ok; operators started since: buckets assigned to this replica not held yet: later (3)".to_string())
        );
        r.buckets_pending("later", 0);
        assert_eq!(r.check(), Ok(Ready::Serving));
        // A new leader starts over: not ready until it has listed and synced again.
        r.mark_leader();
        assert_eq!(r.check(), Err(NotReady::NotListed));
        r.mark_listed();
        r.syncing("later");
        assert!(r.check().is_err(), "a new leader waits for its caches");
    }

    #[test]
    fn a_host_ready_between_two_probes_counts_as_ready() {
        let r = Readiness::default();
        r.mark_listed();
        r.syncing("early");
        assert!(r.check().is_err());
        // Synced, and another operator started, before the next probe.
        r.synced("early");
        r.syncing("later");
        assert_eq!(
            r.check().map(|ready| ready.to_string()),
            Ok("ok; operators started since: caches not synced for: later".to_string())
        );
    }

    #[test]
    fn a_sharded_replica_waits_for_its_buckets_and_their_listing() {
        let r = Readiness::default();
        r.mark_listed();
        r.buckets_pending("autoroute", 2);
        assert_eq!(
            r.check().unwrap_err().to_string(),
            "buckets assigned to this replica not held yet: autoroute (2)"
        );
        r.buckets_not_balanced("canary");
        r.buckets_pending("autoroute", 0);
        assert_eq!(
            r.check().unwrap_err().to_string(),
            "buckets assigned to this replica not held yet: canary (not balanced yet)"
        );
        let listing = std::sync::Arc::new(Mutex::new(vec!["v1/Service".to_string()]));
        let seen = listing.clone();
        r.watch_listing(Box::new(move || {
            seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }));
        r.buckets_pending("canary", 0);
        assert_eq!(
            r.check().unwrap_err().to_string(),
            "caches still listing the buckets gained: v1/Service"
        );
        listing.lock().unwrap_or_else(|p| p.into_inner()).clear();
        assert_eq!(r.check(), Ok(Ready::Serving));
    }

    #[test]
    fn a_standby_is_ready_and_a_new_leader_is_not_until_listed_and_synced() {
        let r = Readiness::default();
        r.mark_standby();
        assert_eq!(
            r.check(),
            Ok(Ready::Standby),
            "a standby must not block a rollout"
        );
        // Whatever was marked while standing by, a new leader starts from scratch.
        r.mark_listed();
        r.mark_leader();
        let why = r.check().unwrap_err().to_string();
        assert!(why.contains("not listed"), "{why}");
        r.syncing("autoroute");
        r.mark_listed();
        assert_eq!(
            r.check().unwrap_err().to_string(),
            "caches not synced for: autoroute"
        );
        r.synced("autoroute");
        assert_eq!(r.check(), Ok(Ready::Serving));
    }
}
