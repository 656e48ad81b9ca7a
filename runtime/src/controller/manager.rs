//! A kube `Controller` of `WasmOperator` objects that keeps one controller running per valid
//! operator: validate → resolve kinds → load modules → start (or swap) its controller → report
//! status; its error policy retries with a backoff. A swap drains the previous controller first
//! (its in-flight reconciles finish on the old modules), so two never reconcile at the same time.

use crate::controller::context::{InputCaches, OperatorContext, OutputCaches};
use crate::controller::grants::{Identities, LoadRefusal, OperatorGrants, Reach, GRANTS_RECHECK};
use crate::controller::operator_removal;
use crate::controller::output_cycles;
use crate::controller::schedule::Backoff;
use crate::controller::shadow::{LaneHandles, Shadows};
use crate::controller::watch;
use crate::controller::watch_health;
use crate::crd::{KindRef, WasmOperator, WasmOperatorSpec};
use crate::definition::{OperatorDefinition, FINALIZER_ROLE};
use crate::evidence::record::RecordSink;
use crate::kinds::{self, ResolvedKind};
use crate::modules::{ModuleCache, ModuleError};
use crate::pipeline::status;
use crate::rbac::GrantCheckError;
use crate::sandbox::LoadError;
use futures::{future, StreamExt, TryStreamExt};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{predicates, Controller, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The first retry delay for an operator whose kinds, modules or permissions are not available
/// yet; it doubles with every failure up to [`LOAD_RETRY`], and resets once the operator runs.
const FIRST_LOAD_RETRY: Duration = Duration::from_secs(1);

/// The longest retry delay for an operator that could not be loaded.
const LOAD_RETRY: Duration = Duration::from_secs(10);

/// WasmOperators reconciled (loaded, reported, released) at once. What costs in a load is
/// shared out between operators in turn by `ModuleCache` (one compile at a time: one alone peaks
/// at 290–410 MiB; a fetch budget taken once a server answers; one module at a time per
/// operator), so this bounds only bursts of discovery and access reviews, as when a host starts
/// with many operators. An operator whose modules come slowly (a slow, silent or hostile
/// server: up to `FETCH_TIMEOUT` per module, one after another) holds one of these for that long;
/// with 4, four such operators held every load of the host, so another operator's new
/// definition waited for theirs.
const LOAD_CONCURRENCY: u16 = 64;

/// How long one attempt at loading an operator may take by default (`--load-timeout`): longer
/// than one fetch and one compile at their own timeouts, so a load that makes progress gets
/// through in a few attempts (the modules done are kept in the compile cache and not fetched
/// again), while one whose modules never come ends as a Condition, tried again with backoff.
pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// The `Reconciling` reason while a generation of a WasmOperator loads.
const LOADING: &str = "Loading";

/// How long one attempt at releasing a deleted operator's resources may take (then it is tried
/// again with backoff).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(60);

/// How much longer than the host's `--max-deadline` a stopped controller may take to finish its
/// in-flight reconciles (a worker call, then the writes) before it is aborted.
const DRAIN_MARGIN: Duration = Duration::from_secs(30);

/// Why an operator could not be (re)started; becomes the `Ready=False` message.
#[derive(Debug, thiserror::Error)]
pub(super) enum LoadFailure {
    #[error("invalid definition: {0}")]
    Invalid(#[from] crate::definition::DefinitionError),
    #[error("{0}")]
    KindNotServed(#[from] kinds::KindNotServed),
    #[error("module for {role}: {source}")]
    Module {
        role: String,
        #[source]
        source: ModuleError,
    },
    #[error("the host may not read what this operator needs: {}; grant it with `wasmpilot rbac <operator.yaml> | kubectl apply -f -`", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    MissingPermissions(Vec<crate::rbac::Missing>),
    #[error("{0}")]
    NotGranted(crate::rbac::NotGranted),
    #[error("{0}")]
    MemoryBudget(#[from] crate::sandbox::MemoryBudgetExceeded),
    #[error("{0}")]
    GrantCheck(#[from] crate::rbac::GrantCheckError),
    #[error("could not check the host's permissions: {}", crate::error_report::api_text(.0))]
    PermissionCheck(#[source] kube::Error),
    #[error("{kind} is managed by WasmOperator {by}, created before this one; one WasmOperator manages a resource kind: delete one of them, or give this one another kind")]
    KindClaimed { kind: String, by: String },
    #[error("its outputs and other operators' close a cycle: {cycle}. Each resource on it would create the next without end, so the youngest WasmOperator on the cycle is refused: change an output, or, if a worker ends the recursion, list that kind in the spec.allowSensitiveKinds of the operator outputting it")]
    OutputCycle { cycle: String },
    #[error("{0}")]
    Consent(#[from] crate::controller::admin_consent::ConsentError),
    #[error("loading took longer than {}s (the host's --load-timeout): its modules are fetched and compiled one after another, each download within {}s and each compile within {}s; those done are kept in the compile cache, so the next attempt goes on from there", .0.as_secs(), crate::modules::FETCH_TIMEOUT.as_secs(), crate::modules::COMPILE_TIMEOUT.as_secs())]
    TimedOut(Duration),
}

impl LoadFailure {
    /// The `Ready` / `ModulesLoaded` condition reason, also the `reason` label of
    /// `wasmpilot_operator_load_failures`.
    fn reason(&self) -> &'static str {
        match self {
            LoadFailure::Invalid(_) => "InvalidDefinition",
            LoadFailure::KindNotServed(_) => "KindNotServed",
            LoadFailure::Module { source, .. } => module_reason(source),
            LoadFailure::MissingPermissions(_) => "MissingPermissions",
            LoadFailure::NotGranted(_) => "NotGranted",
            LoadFailure::MemoryBudget(_) => "MemoryBudgetExceeded",
            LoadFailure::GrantCheck(GrantCheckError::CannotImpersonate { .. }) => {
                "CannotImpersonate"
            }
            LoadFailure::GrantCheck(GrantCheckError::Review { .. }) => "PermissionCheckFailed",
            LoadFailure::PermissionCheck(_) => "PermissionCheckFailed",
            LoadFailure::KindClaimed { .. } => "ResourceKindClaimed",
            LoadFailure::OutputCycle { .. } => "OutputCycle",
            LoadFailure::TimedOut(_) => "LoadTimedOut",
            LoadFailure::Consent(e) => e.reason(),
        }
    }

    /// Invalid definitions wait for an edit, a claimed kind for its holder to stop, a cycle for
    /// an operator on it to change or stop (the manager then loads it again); the rest may fix
    /// themselves (CRD installed, ConfigMap created).
    fn retry(&self) -> bool {
        if let LoadFailure::Consent(e) = self {
            return e.retry();
        }
        !matches!(
            self,
            LoadFailure::Invalid(_)
                | LoadFailure::KindClaimed { .. }
                | LoadFailure::OutputCycle { .. }
                | LoadFailure::MemoryBudget(_)
        )
    }
}

/// Why a module could not be made ready, by what failed: its reference, reading or downloading
/// its bytes (pull Secret included), their digest, or compiling them for the operator's world.
fn module_reason(e: &ModuleError) -> &'static str {
    match e {
        ModuleError::NoSource | ModuleError::MultipleSources(_) => "InvalidDefinition",
        ModuleError::FilesDisabled { .. } | ModuleError::FileOutsideModuleDir { .. } => {
            "ModuleSourceDisabled"
        }
        ModuleError::PullSecret { .. } => "ModulePullSecretFailed",
        ModuleError::Offline { .. }
        | ModuleError::ConfigMapUnreadable { .. }
        | ModuleError::KeyMissing { .. }
        | ModuleError::FileUnreadable { .. }
        | ModuleError::NotAFile { .. }
        | ModuleError::FileTooLarge { .. }
        | ModuleError::Decompress { .. }
        | ModuleError::Fetch { .. } => "ModuleFetchFailed",
        ModuleError::DigestMismatch { .. } => "ModuleDigestMismatch",
        ModuleError::Load {
            error: LoadError::Compile(_) | LoadError::CompileStopped(_),
            ..
        } => "ModuleCompileFailed",
        ModuleError::Load {
            error: LoadError::WrongWorld { .. } | LoadError::MissingImports { .. },
            ..
        } => "ModuleWrongWorld",
    }
}

struct Running {
    spec: WasmOperatorSpec,
    /// Which of two operators on one resource kind keeps it: the older (see [`Claim`]).
    claim: Claim,
    /// The module digests by role and the Ready message, reported for every generation whose
    /// spec is this one.
    digests: BTreeMap<String, String>,
    /// Shared with the watches' report, which restores it when they work again.
    message: Arc<Mutex<String>>,
    /// The Ready message without what it says of the grants, and where the operator is granted:
    /// while only in some namespaces, asked again every [`GRANTS_RECHECK`] so the message
    /// follows an admin's change of the grants.
    base_message: String,
    reach: Reach,
    /// Its context, for the grants.
    operator: Arc<OperatorContext>,
    /// Its watches: while one fails, `Ready` says so (see
    /// [`crate::controller::watch_health`]).
    watches: watch_health::OperatorWatches,
    shutdown: Option<oneshot::Sender<()>>,
    /// The controller task; it ends once the graceful shutdown has finished.
    task: Option<JoinHandle<()>>,
}

impl Running {
    /// Signals the graceful shutdown; returns the task to wait for.
    fn stop(mut self) -> Option<JoinHandle<()>> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.take()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Why reconciling a WasmOperator did not finish; the error policy decides when to try again.
#[derive(Debug, thiserror::Error)]
pub(super) enum OperatorLoadError {
    /// The definition could not be started (reported as its `Ready=False` condition).
    #[error("{0}")]
    Load(#[from] LoadFailure),
    /// The operator runs, but its status could not be written.
    #[error("could not update the WasmOperator's status: {}", crate::error_report::api_text(.0))]
    Status(#[source] kube::Error),
    /// The WasmOperator is being deleted and its resources are not all released yet.
    #[error("{0}")]
    Release(#[from] operator_removal::ReleaseError),
    #[error("releasing the deleted operator's resources took longer than {0:?}")]
    ReleaseTimedOut(Duration),
}

/// An older WasmOperator manages the resource kind `kind`: `by`.
#[derive(Debug)]
struct KindClaimed {
    kind: String,
    by: String,
}

/// Why a loaded operator does not start: what another running operator does.
#[derive(Debug)]
enum StartRefusal {
    /// An older operator manages its resource kind.
    Kind(KindClaimed),
    /// It is the youngest on this cycle of outputs (its message).
    Cycle(String),
}

impl From<StartRefusal> for LoadFailure {
    fn from(refusal: StartRefusal) -> Self {
        match refusal {
            StartRefusal::Kind(KindClaimed { kind, by }) => LoadFailure::KindClaimed { kind, by },
            StartRefusal::Cycle(cycle) => LoadFailure::OutputCycle { cycle },
        }
    }
}

/// A WasmOperator's standing among those naming the same resource kind: the one created
/// first (then the first by name) manages the kind; a later one is refused while it runs. The
/// same on every host and after every restart, whichever loads first.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Claim {
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    name: String,
}

impl Claim {
    fn of(op: &WasmOperator) -> Self {
        Claim {
            created: op.metadata.creation_timestamp.clone(),
            name: op.name_any(),
        }
    }
}

/// The resource kind an operator manages, as the API server tells kinds apart: its group and
/// kind (two versions of a kind are one set of objects).
fn managed_kind(spec: &WasmOperatorSpec) -> (String, String) {
    let group = spec
        .resource
        .api_version
        .rsplit_once('/')
        .map_or("", |(group, _)| group);
    (group.to_string(), spec.resource.kind.clone())
}

/// `group Kind` (or `Kind` for the core group), as messages name a resource kind.
fn kind_text((group, kind): &(String, String)) -> String {
    if group.is_empty() {
        kind.clone()
    } else {
        format!("{group} {kind}")
    }
}

/// Why a valid operator is not running: what another one does. It is loaded again when that
/// other stops or changes.
#[derive(Debug)]
enum Refusal {
    /// An older operator manages its resource kind (group, kind).
    KindClaimed((String, String)),
    /// It is the youngest on an output cycle with these operators.
    OutputCycle(Vec<String>),
}

/// The per-operator controllers of this host, by WasmOperator name.
#[derive(Default)]
struct Controllers {
    running: HashMap<String, Running>,
    /// Operators being deleted: the definition and finalizer module they last ran with, which
    /// their removal runs (not the spec as the deletion found it), kept until it is done.
    removing: HashMap<String, (OperatorDefinition, Option<crate::sandbox::FinalizerModule>)>,
    /// Operators refused for what another running one does.
    refused: HashMap<String, Refusal>,
    /// Stopped controllers that may still be finishing in-flight reconciles; a controller of the
    /// same name starts only after its predecessor's task ended.
    draining: HashMap<String, JoinHandle<()>>,
}

impl Controllers {
    /// Stops the operator's controller (if any) and keeps its task to drain. Returns the
    /// operators refused for what it did: for the kind it managed, now free, or for a cycle it
    /// was on.
    fn stop(&mut self, name: &str) -> Vec<String> {
        self.draining.retain(|_, task| !task.is_finished());
        self.refused.remove(name);
        let mut freed = Vec::new();
        if let Some(running) = self.running.remove(name) {
            tracing::info!(operator = %name, "stopping controller");
            let kind = managed_kind(&running.spec);
            freed = self
                .refused
                .iter()
                .filter(|(_, refusal)| match refusal {
                    Refusal::KindClaimed(k) => *k == kind,
                    Refusal::OutputCycle(others) => others.iter().any(|o| o == name),
                })
                .map(|(n, _)| n.clone())
                .collect();
            if let Some(task) = running.stop() {
                self.draining.insert(name.to_string(), task);
            }
        }
        crate::metrics::READINESS.synced(name);
        crate::metrics::METRICS
            .operators_running
            .set(self.running.len() as i64);
        freed
    }

    /// The running operator that manages `op`'s resource kind, if another does.
    fn holder_of_kind(&self, op: &WasmOperator) -> Option<(&String, &Running)> {
        let kind = managed_kind(&op.spec);
        let name = op.name_any();
        self.running
            .iter()
            .find(|(n, r)| **n != name && managed_kind(&r.spec) == kind)
    }
}

/// Owns the per-operator controllers of this host: a kube `Controller` of `WasmOperator`
/// objects whose reconcile loads and (re)starts an operator and whose error policy retries.
pub struct Manager {
    client: Client,
    identities: Identities,
    modules: Arc<ModuleCache>,
    metrics_source: crate::controller::context::MetricsSource,
    /// Where every operator's decisions are recorded, if anywhere.
    record_sink: Option<RecordSink>,
    /// Which resources an input object's change requeues (the same for every operator).
    input_requeue: crate::controller::context::InputRequeue,
    /// With `--shard`: the buckets this replica holds.
    sharding: Option<Arc<crate::controller::buckets::Sharding>>,
    load_timeout: Duration,
    reserved_namespaces: crate::controller::context::ReservedNamespaces,
    /// `--require-operator-grants`: no WasmOperator runs without its admin's grant.
    require_grants: bool,
    /// The client of the shared caches' watches, on a connection of their own (default: the
    /// host's client).
    watch_connections: Option<Arc<crate::controller::watch_connections::WatchConnections>>,
    writes_per_second: u32,
}

/// What the WasmOperator reconciles share.
pub(super) struct ManagerContext {
    /// The host's own identity: watches, WasmOperator status, Events on WasmOperators.
    client: Client,
    /// Each operator's own identity: every write for it.
    identities: Identities,
    modules: Arc<ModuleCache>,
    recorder: Recorder,
    reporter: Reporter,
    /// WasmOperators to reconcile again now: those refused for what another operator did (held
    /// their kind, closed a cycle) once it stopped or changed, and those just displaced.
    recheck: futures::channel::mpsc::UnboundedSender<ObjectRef<WasmOperator>>,
    metrics_source: crate::controller::context::MetricsSource,
    /// Watches and caches per kind, shared by the operators that use them.
    informers: crate::controller::informers::Informers,
    record_sink: Option<RecordSink>,
    input_requeue: crate::controller::context::InputRequeue,
    sharding: Option<Arc<crate::controller::buckets::Sharding>>,
    reserved_namespaces: crate::controller::context::ReservedNamespaces,
    /// With `--require-operator-grants`: where the admins' grants are read.
    admin_grants: Option<Api<crate::crd::WasmOperatorGrant>>,
    /// The cluster's RBAC changes: the operators' access answers are asked again after one.
    rbac_changes: crate::controller::rbac_changes::RbacChanges,
    /// Each tenant's share of the host's writes.
    writes: Arc<crate::controller::write_budget::WriteBudget>,
    /// How long one attempt at loading an operator may take (see [`DEFAULT_LOAD_TIMEOUT`]).
    load_timeout: Duration,
    /// When to try loading an operator again, per operator: doubling up to [`LOAD_RETRY`].
    retries: Backoff,
    /// The WasmOperators as watched: a load finishing after its operator was deleted is dropped.
    operators: Store<WasmOperator>,
    /// Whether the first listing of WasmOperators has ended (later relists do not hold `/readyz`).
    first_listing_done: AtomicBool,
    controllers: Mutex<Controllers>,
}

impl Manager {
    /// A manager reading as `client` (the host's identity); each operator acts as its own
    /// account from `identities`.
    pub fn new(client: Client, identities: Identities, modules: Arc<ModuleCache>) -> Self {
        Manager {
            client,
            identities,
            modules,
            metrics_source: crate::controller::context::MetricsSource::default(),
            record_sink: None,
            input_requeue: Default::default(),
            sharding: None,
            load_timeout: DEFAULT_LOAD_TIMEOUT,
            reserved_namespaces: Default::default(),
            require_grants: false,
            watch_connections: None,
            writes_per_second: crate::controller::write_budget::DEFAULT_WRITES_PER_SECOND,
        }
    }

    /// Runs the shared caches' watches over `client`: a connection (HTTP/2 stream pool) other
    /// than the one writes, reviews and Lease renewals take, so however many watches operators
    /// open, the API server's per-connection stream limit never holds a write back.
    /// Each tenant's writes per second (0: unbounded; see [`crate::controller::write_budget`]).
    pub fn with_writes_per_second(mut self, per_second: u32) -> Self {
        self.writes_per_second = per_second;
        self
    }

    pub fn with_watch_connections(
        mut self,
        connections: Arc<crate::controller::watch_connections::WatchConnections>,
    ) -> Self {
        self.watch_connections = Some(connections);
        self
    }

    /// Runs a WasmOperator only under an admin's `WasmOperatorGrant` made for it
    /// (`--require-operator-grants`).
    pub fn with_required_grants(mut self, required: bool) -> Self {
        self.require_grants = required;
        self
    }

    /// The host's own namespaces, where no operator's output goes.
    pub fn with_reserved_namespaces(
        mut self,
        namespaces: crate::controller::context::ReservedNamespaces,
    ) -> Self {
        self.reserved_namespaces = namespaces;
        self
    }

    /// How long one attempt at loading an operator may take (`--load-timeout`).
    pub fn with_load_timeout(mut self, timeout: Duration) -> Self {
        self.load_timeout = timeout;
        self
    }

    /// Reconciles only the resources in buckets this replica holds (`--shard`).
    pub fn with_sharding(
        mut self,
        sharding: Option<Arc<crate::controller::buckets::Sharding>>,
    ) -> Self {
        self.sharding = sharding;
        self
    }

    /// Records every decision of every operator to `sink`.
    pub fn with_record_sink(mut self, sink: Option<RecordSink>) -> Self {
        self.record_sink = sink;
        self
    }

    /// Sets which resources an input object's change requeues (default: the selected ones).
    pub fn with_input_requeue(mut self, rule: crate::controller::context::InputRequeue) -> Self {
        self.input_requeue = rule;
        self
    }

    /// Metric queries to a Prometheus a WasmOperator names connect only where `egress` allows.
    pub fn with_egress(mut self, egress: crate::egress::EgressPolicy) -> Self {
        self.metrics_source.client = crate::promql::Prometheus::with_egress(egress);
        self
    }

    /// Sets the Prometheus that metric queries use when a WasmOperator names none.
    pub fn with_prometheus(mut self, url: Option<String>) -> Self {
        self.metrics_source.default_url = url;
        self
    }

    /// What the reconciles share: this manager's settings, the watched `operators`, Events
    /// reported as `instance` (the pod), nothing running yet.
    fn context(
        self,
        operators: Store<WasmOperator>,
        instance: Option<String>,
        recheck: futures::channel::mpsc::UnboundedSender<ObjectRef<WasmOperator>>,
    ) -> Arc<ManagerContext> {
        let reporter = Reporter {
            controller: "wasmpilot".into(),
            instance,
        };
        let admin_grants = self.require_grants.then(|| Api::all(self.client.clone()));
        Arc::new(ManagerContext {
            recorder: Recorder::new(self.client.clone(), reporter.clone()),
            reporter,
            informers: crate::controller::informers::Informers::with_connections(
                self.watch_connections.clone().unwrap_or_else(|| {
                    Arc::new(
                        crate::controller::watch_connections::WatchConnections::single(
                            self.client.clone(),
                        ),
                    )
                }),
            )
            .with_scope(self.sharding.as_ref().map(|s| s.cache_scope())),
            client: self.client,
            identities: self.identities,
            modules: self.modules,
            metrics_source: self.metrics_source,
            record_sink: self.record_sink,
            input_requeue: self.input_requeue,
            sharding: self.sharding,
            reserved_namespaces: self.reserved_namespaces,
            admin_grants,
            rbac_changes: Default::default(),
            writes: Arc::new(crate::controller::write_budget::WriteBudget::new(
                self.writes_per_second,
            )),
            load_timeout: self.load_timeout,
            retries: Backoff::new(FIRST_LOAD_RETRY, LOAD_RETRY),
            operators,
            first_listing_done: AtomicBool::new(false),
            controllers: Mutex::new(Controllers::default()),
            recheck,
        })
    }

    /// Runs until `shutdown` resolves; then stops every operator's controller and waits (bounded)
    /// for their in-flight reconciles.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
        let api: Api<WasmOperator> = Api::all(self.client.clone());
        let (operators, writer) = reflector::store();
        let (recheck, rechecks) = futures::channel::mpsc::unbounded();
        if let Some(sharding) = &self.sharding {
            sharding.attach_operators(operators.clone());
        }
        let ctx = self.context(operators.clone(), std::env::var("POD_NAME").ok(), recheck);
        if ctx.sharding.is_some() {
            let weak = Arc::downgrade(&ctx);
            crate::metrics::READINESS.watch_listing(Box::new(move || {
                weak.upgrade()
                    .map(|ctx| ctx.informers.listing())
                    .unwrap_or_default()
            }));
        }
        // Deletions (and objects gone while the watch was down) stop their controllers; every
        // other change that reaches the reconcile is a new generation: status writes, the
        // manager's own included, do not.
        let observer = ctx.clone();
        let changes = watcher::watcher(api, watcher::Config::default())
            .backoff(crate::controller::schedule::watch_backoff())
            .reflect(writer)
            .inspect_ok(move |event| observer.observe(event))
            .applied_objects()
            .predicate_filter(predicates::generation, Default::default());
        let (stop, stopped) = oneshot::channel::<()>();
        // Whose reads the shared caches hold, counted now and then.
        let charging = ctx.clone();
        let charges = tokio::spawn(async move {
            use crate::controller::cache_charges;
            let mut before = cache_charges::Charges::default();
            loop {
                tokio::time::sleep(cache_charges::CHARGE_EVERY).await;
                let running: Vec<cache_charges::Reader> = {
                    let controllers = charging.lock();
                    controllers
                        .running
                        .iter()
                        .map(|(name, r)| {
                            (
                                name.clone(),
                                charging.modules.sandbox().tenant_name(name),
                                cache_charges::held(&r.operator),
                            )
                        })
                        .collect()
                };
                cache_charges::publish_watches(&running);
                cache_charges::publish(&cache_charges::charges(&running), &mut before);
            }
        });
        // On the watch connection: an admin's revocation reaches the next reconcile in seconds.
        let rbac_watches = ctx.rbac_changes.watch(&ctx.informers.client());
        let mut grant_watch = None;
        if let Some(grants) = ctx.admin_grants.clone() {
            // A grant made, changed or revoked has its WasmOperator checked again at once.
            let recheck = ctx.recheck.clone();
            grant_watch = Some(tokio::spawn(async move {
                let mut events =
                    std::pin::pin!(watcher::watcher(grants, watcher::Config::default())
                        .backoff(crate::controller::schedule::watch_backoff()));
                while let Some(event) = events.next().await {
                    match event {
                        Ok(
                            watcher::Event::Apply(g)
                            | watcher::Event::Delete(g)
                            | watcher::Event::InitApply(g),
                        ) => {
                            let _ = recheck.unbounded_send(ObjectRef::new(&g.name_any()));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %crate::error_report::Brief(&e), "watching WasmOperatorGrants (is their CRD installed? deploy/crds/wasmoperatorgrant.yaml)")
                        }
                    }
                }
            }));
            tracing::info!("a WasmOperator runs only under its admin's WasmOperatorGrant (--require-operator-grants)");
        }
        tracing::info!("watching WasmOperators");
        let controller = Controller::for_stream(changes, operators)
            .reconcile_on(rechecks)
            .with_config(kube::runtime::controller::Config::default().concurrency(LOAD_CONCURRENCY))
            .graceful_shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(reconcile_operator, load_error_policy, ctx.clone())
            .for_each(|res| async move {
                if let Err(e) = res {
                    tracing::debug!(error = %crate::error_report::Brief(&e), "WasmOperator controller event");
                }
            });
        tokio::pin!(controller);
        tokio::select! {
            () = &mut controller => {}
            () = shutdown => {
                let _ = stop.send(());
                controller.await;
            }
        }
        if let Some(watch) = grant_watch {
            watch.abort();
        }
        for watch in rbac_watches {
            watch.abort();
        }
        charges.abort();
        // In-flight reconciles finish before this host lets go (and, when leader-elected,
        // releases the Lease to a standby).
        let grace = ctx.drain_grace();
        let draining: Vec<_> = {
            let mut controllers = ctx.lock();
            let names: Vec<String> = controllers.running.keys().cloned().collect();
            for name in names {
                controllers.stop(&name);
            }
            controllers.draining.drain().collect()
        };
        futures::future::join_all(
            draining
                .into_iter()
                .map(|(name, task)| async move { drain(&name, task, grace).await }),
        )
        .await;
        Ok(())
    }
}

/// The Ready message of a running operator as it stands now.
fn current_message(message: &Mutex<String>) -> String {
    message.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// What the Ready message says of an operator granted only in some namespaces (nothing when
/// granted everywhere).
fn reach_text(reach: &Reach) -> String {
    match reach {
        Reach::Everywhere => String::new(),
        Reach::WhereGranted(missing) => format!(
            "; not granted cluster-wide ({}): it reconciles only in namespaces where it is granted, resources elsewhere get a NotGranted Condition",
            crate::rbac::missing_list(missing)
        ),
    }
}

/// How long until a running operator's WasmOperator is reconciled again without a change:
/// while it is granted only in some namespaces, after [`GRANTS_RECHECK`] (its message follows
/// the grants); otherwise at its next change.
fn until_grants_asked(reach: &Reach) -> Action {
    match reach {
        Reach::Everywhere => Action::await_change(),
        Reach::WhereGranted(_) => Action::requeue(GRANTS_RECHECK),
    }
}

/// Where the host connects for an operator (its module URLs and registries, its Prometheus):
/// the host's policy, widened by what the admin's grant allows this operator alone.
fn operator_egress(
    host: &crate::egress::EgressPolicy,
    grant: Option<&crate::crd::WasmOperatorGrantSpec>,
) -> crate::egress::EgressPolicy {
    match grant.filter(|g| !g.allow_fetch_from.is_empty()) {
        // Checked with the grant (`GrantInvalid`): a value that does not parse never gets here.
        Some(g) => host
            .widened(&g.allow_fetch_from)
            .unwrap_or_else(|_| host.clone()),
        None => host.clone(),
    }
}

/// Makes the running controller match the WasmOperator's spec: loads and starts (or swaps to)
/// its definition, or reports why it could not; the error policy decides on a retry.
pub(super) async fn reconcile_operator(
    op: Arc<WasmOperator>,
    ctx: Arc<ManagerContext>,
) -> Result<Action, OperatorLoadError> {
    let name = op.name_any();
    if op.metadata.deletion_timestamp.is_some() {
        return release(&op, &ctx).await;
    }
    let mut granted = None;
    if let Some(grants) = &ctx.admin_grants {
        match crate::controller::admin_consent::consent(grants, &op).await {
            Ok(grant) => granted = Some(grant.spec),
            Err(refused) => {
                // Never granted, granted another uid, or revoked: what runs stops.
                let freed = ctx.lock().stop(&name);
                ctx.recheck(freed);
                let failure = LoadFailure::from(refused);
                ctx.report_failure(&op, &failure).await;
                return Err(failure.into());
            }
        }
    }
    // A changed grant (output namespaces, fetch allowances) is loaded like a changed spec.
    let running = ctx
        .lock()
        .running
        .get(&name)
        .filter(|r| r.spec == op.spec && r.operator.grant == granted)
        .map(|r| {
            (
                current_message(&r.message),
                r.digests.clone(),
                r.watches.failing(),
                r.reach.clone(),
                r.operator.clone(),
            )
        });
    if let Some((mut message, digests, failing, mut reach, operator)) = running {
        if failing.is_some() {
            // A watch fails: its report stands until the watch works again.
            return Ok(Action::await_change());
        }
        // The spec is the running one (e.g. a bad edit reverted): nothing to load, but this
        // generation gets its status, so a failure of the edit in between does not linger.
        ctx.retries.reset(&name);
        let mut changed = false;
        if reach != Reach::Everywhere {
            // Granted in some namespaces only: the admin may have granted more (or less).
            match operator.grants.current_reach().await {
                Ok(now) if now != reach => {
                    tracing::info!(operator = %name, "its Ready message follows its grants' change");
                    let mut controllers = ctx.lock();
                    if let Some(r) = controllers
                        .running
                        .get_mut(&name)
                        .filter(|r| Arc::ptr_eq(&r.operator, &operator))
                    {
                        message = format!("{}{}", r.base_message, reach_text(&now));
                        *r.message.lock().unwrap_or_else(|p| p.into_inner()) = message.clone();
                        r.reach = now.clone();
                        changed = true;
                    }
                    reach = now;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(operator = %name, error = %crate::error_report::Brief(&e), "asking for its grants again")
                }
            }
        }
        if changed || !reports_generation(&op) {
            tracing::info!(operator = %name, "the definition is the running one");
            ctx.report(&op, None, &message, digests)
                .await
                .map_err(OperatorLoadError::Status)?;
        }
        return Ok(until_grants_asked(&reach));
    }
    // An invalid definition is refused before anything is said of a load.
    let egress = operator_egress(ctx.metrics_source.client.egress(), granted.as_ref());
    let definition = OperatorDefinition::validate_for_host(&name, &op.spec, &egress);
    let mut op = op;
    if definition.is_ok() && !reports_generation(&op) {
        // kstatus and Argo CD read a WasmOperator as progressing while it loads, which may take
        // minutes (its modules one at a time); the previous definition, if any, keeps running.
        let now = crate::pipeline::step::now_rfc3339();
        if let Some(body) = loading_patch(&op, &now) {
            let api: Api<WasmOperator> = Api::all(ctx.client.clone());
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                // The load's report is made against the status as it now is (the same failure
                // again must still replace `Loading`); the spec loaded stays the one reconciled.
                Ok(written) => {
                    let mut reported = (*op).clone();
                    reported.status = written.status;
                    op = Arc::new(reported);
                }
                Err(e) => {
                    tracing::debug!(operator = %name, error = %crate::error_report::Brief(&e), "could not report the load begun")
                }
            }
        }
    }
    let loaded = match definition {
        Ok(definition) => tokio::time::timeout(
            ctx.load_timeout,
            ctx.load(&name, definition, &op.spec, granted),
        )
        .await
        .unwrap_or(Err(LoadFailure::TimedOut(ctx.load_timeout))),
        Err(invalid) => Err(LoadFailure::Invalid(invalid)),
    };
    let started = match loaded {
        Ok((operator, digests, reach)) => ctx
            .start(&op, operator, &digests, &reach)
            .map(|message| (message, digests, reach))
            .map_err(LoadFailure::from),
        Err(failure) => Err(failure),
    };
    match started {
        Ok((message, digests, reach)) => {
            let Some(message) = message else {
                tracing::info!(operator = %name, "deleted while loading; not started");
                crate::metrics::READINESS.synced(&name);
                return Ok(Action::await_change());
            };
            ctx.retries.reset(&name);
            tracing::info!(operator = %name, "{message}");
            if operator_removal::lacks_release_finalizer(&op) {
                // Its resources get the operator's finalizer: deleting the WasmOperator must
                // release them first. Without the grant to patch WasmOperators it still runs.
                if let Err(e) = operator_removal::add_release_finalizer(&ctx.client, &op).await {
                    tracing::warn!(operator = %name, error = %crate::error_report::Brief(&e), "could not add {}: deleting this WasmOperator will leave its finalizer on its resources", operator_removal::RELEASE_FINALIZER);
                }
            }
            ctx.report(&op, None, &message, digests)
                .await
                .map_err(OperatorLoadError::Status)?;
            Ok(until_grants_asked(&reach))
        }
        Err(failure) => {
            ctx.report_failure(&op, &failure).await;
            // Loaded or failed: a failed operator has no caches for `/readyz` to wait for (a
            // previous definition still running keeps its own mark until its caches synced).
            if !ctx.lock().running.contains_key(&name) {
                crate::metrics::READINESS.synced(&name);
            }
            Err(failure.into())
        }
    }
}

/// A WasmOperator being deleted: its controller stops, then its resources are released from
/// the operator's finalizer (bounded; tried again with backoff until done).
async fn release(
    op: &WasmOperator,
    ctx: &Arc<ManagerContext>,
) -> Result<Action, OperatorLoadError> {
    let name = op.name_any();
    let freed = {
        let mut controllers = ctx.lock();
        if let Some(running) = controllers.running.get(&name) {
            let last = (
                running.operator.definition.clone(),
                running.operator.finalizer.clone(),
            );
            controllers.removing.insert(name.clone(), last);
        }
        controllers.stop(&name)
    };
    ctx.recheck(freed);
    if !operator_removal::releasing(op) {
        ctx.lock().removing.remove(&name);
        return Ok(Action::await_change());
    }
    let as_operator = ctx.identities.client(&name).map_err(|source| {
        OperatorLoadError::Release(operator_removal::ReleaseError::Identity(source))
    })?;
    let recorder = Recorder::new(as_operator.clone(), ctx.reporter.clone());
    // The finalizer worker, when the definition asks for it to run on removal (a module that
    // cannot load does not hold the removal: the resources are released without it). The
    // definition the operator last ran with; only when this host never ran it (it started
    // during the deletion) the spec as it is now, its inputs still read as the operator.
    let last_ran = ctx.lock().removing.get(&name).cloned();
    let (definition, mut module) = match last_ran {
        Some((definition, module)) => (Some(definition), module),
        None => (OperatorDefinition::validate(&name, &op.spec).ok(), None),
    };
    let definition = definition.filter(|d| d.finalizer_on_operator_deletion);
    if let (Some(d), None) = (&definition, &module) {
        if let Some(m) = &d.finalizer {
            match ctx
                .modules
                .finalizer_worker(&name, m, &d.finalizer_limits, d.finalizer_randomness)
                .await
            {
                Ok(loaded) => module = Some(loaded),
                Err(e) => {
                    tracing::warn!(operator = %name, error = %crate::error_report::Brief(&e), "the finalizer worker cannot run on removal; releasing without it")
                }
            }
        }
    }
    let finalize = match (&definition, &module) {
        (Some(definition), Some(module)) => Some(operator_removal::FinalizeOnRemoval {
            sandbox: ctx.modules.sandbox(),
            definition,
            module,
        }),
        _ => None,
    };
    let released = tokio::time::timeout(
        RELEASE_TIMEOUT,
        operator_removal::release(&ctx.client, &as_operator, &recorder, op, finalize),
    )
    .await
    .map_err(|_| OperatorLoadError::ReleaseTimedOut(RELEASE_TIMEOUT))?;
    match released {
        Ok(count) => {
            ctx.lock().removing.remove(&name);
            tracing::info!(operator = %name, released = count, "WasmOperator deleted: its resources are released from its finalizer");
            Ok(Action::await_change())
        }
        Err(e) => {
            tracing::warn!(operator = %name, error = %crate::error_report::Brief(&e), "releasing the deleted operator's resources; trying again");
            Err(e.into())
        }
    }
}

/// A definition that is invalid waits for an edit; anything else (a CRD not installed yet, a
/// module not published yet, missing RBAC, a status write) is tried again after a backoff.
pub(super) fn load_error_policy(
    op: Arc<WasmOperator>,
    error: &OperatorLoadError,
    ctx: Arc<ManagerContext>,
) -> Action {
    match error {
        OperatorLoadError::Load(failure) if !failure.retry() => Action::await_change(),
        _ => {
            let delay = ctx.retries.next_delay(&op.name_any());
            tracing::debug!(operator = %op.name_any(), ?delay, "loading again after backoff");
            Action::requeue(delay)
        }
    }
}

/// The kinds one operator uses, as the API server serves them.
struct OperatorKinds {
    resource: ResolvedKind,
    /// Every kind a phase or the finalizer reads or writes (the resource too when one does).
    resolved: HashMap<KindRef, ResolvedKind>,
    /// Group, version, plural and scope of each, the resource included (for the RBAC rules).
    known: BTreeMap<KindRef, crate::rbac::KnownKind>,
}

/// An operator's modules, ready to run.
struct LoadedModules {
    workers: HashMap<String, crate::sandbox::PhaseModule>,
    finalizer: Option<crate::sandbox::FinalizerModule>,
    /// Digest by phase name (and `finalizer`), for `status.activeDigests`.
    digests: BTreeMap<String, String>,
}

impl ManagerContext {
    /// A manager's context on `client` with nothing running and no WasmOperator watched.
    #[cfg(test)]
    pub(super) fn for_tests(client: Client) -> anyhow::Result<Arc<Self>> {
        let sandbox = crate::sandbox::Sandbox::new(Default::default())?;
        let modules = Arc::new(ModuleCache::new(sandbox, Some(client.clone()), None));
        let (operators, _) = reflector::store();
        let (recheck, _) = futures::channel::mpsc::unbounded();
        let identities = Identities::shared(client.clone());
        Ok(Manager::new(client, identities, modules).context(operators, None, recheck))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Controllers> {
        self.controllers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the controllers of WasmOperators that are gone: deleted, or missing from a relist.
    fn observe(&self, event: &Event<WasmOperator>) {
        match event {
            // Seen before the reconcile is (the controller gets the object after this): `/readyz`
            // waits for the first attempt to load each operator of the first listing.
            Event::InitApply(op) if !self.first_listing_done.load(Ordering::Relaxed) => {
                crate::metrics::READINESS.syncing(&op.name_any());
            }
            // Being deleted: the reconcile releases its resources, whatever its generation says.
            Event::Apply(op) if operator_removal::releasing(op) => {
                let _ = self.recheck.unbounded_send(ObjectRef::new(&op.name_any()));
            }
            Event::Delete(op) => {
                let name = op.name_any();
                self.retries.reset(&name);
                let freed = self.lock().stop(&name);
                self.forget_grant_extras(&name);
                self.recheck(freed);
            }
            Event::InitDone => {
                let mut controllers = self.lock();
                let gone: Vec<String> = controllers
                    .running
                    .keys()
                    .filter(|name| self.operators.get(&ObjectRef::new(name)).is_none())
                    .cloned()
                    .collect();
                let mut freed = Vec::new();
                for name in &gone {
                    freed.extend(controllers.stop(name));
                }
                drop(controllers);
                for name in &gone {
                    self.forget_grant_extras(name);
                }
                self.recheck(freed);
                self.first_listing_done.store(true, Ordering::Relaxed);
                crate::metrics::READINESS.mark_listed();
            }
            _ => {}
        }
    }

    /// Has the manager reconcile these WasmOperators again now: they were refused for what
    /// another operator did (managed their kind, closed a cycle), and that one stopped or changed.
    /// A deleted operator's tenant and fetch allowances (from its grant) are dropped: a
    /// WasmOperator created later under its name starts from its own grant.
    fn forget_grant_extras(&self, name: &str) {
        self.modules.sandbox().set_tenant(name, None);
        self.modules.set_operator_egress(name, None);
    }

    fn recheck(&self, names: Vec<String>) {
        for name in names {
            tracing::info!(operator = %name, "loading it again: an operator it was refused for (or displaced by) stopped or changed");
            // Err: the manager is shutting down.
            let _ = self.recheck.unbounded_send(ObjectRef::new(&name));
        }
    }

    /// How long a stopped controller may take to finish its in-flight reconciles.
    fn drain_grace(&self) -> Duration {
        self.modules.sandbox().limits().max_deadline + DRAIN_MARGIN
    }

    /// Starts the loaded operator's controller in place of the running one (which drains
    /// first); returns the Ready message, or `None` when the WasmOperator was deleted meanwhile.
    /// Refused when an older WasmOperator manages the same resource kind; a younger one that
    /// does is stopped and refused in turn.
    fn start(
        &self,
        op: &WasmOperator,
        operator: Arc<OperatorContext>,
        digests: &BTreeMap<String, String>,
        reach: &Reach,
    ) -> Result<Option<String>, StartRefusal> {
        let name = op.name_any();
        let mut controllers = self.lock();
        // A deletion is observed after the store forgets the object, under this lock: either
        // it is gone here, or its stop comes after this start.
        let current = self.operators.get(&ObjectRef::new(&name));
        if current.is_none_or(|o| o.metadata.uid != op.metadata.uid) {
            return Ok(None);
        }
        let claim = Claim::of(op);
        let kind = managed_kind(&op.spec);
        if let Some((holder, running)) = controllers.holder_of_kind(op) {
            let holder = holder.clone();
            if running.claim < claim {
                // Still running a definition of another kind: that stops too.
                let freed = controllers.stop(&name);
                controllers
                    .refused
                    .insert(name, Refusal::KindClaimed(kind.clone()));
                drop(controllers);
                self.recheck(freed);
                return Err(StartRefusal::Kind(KindClaimed {
                    kind: kind_text(&kind),
                    by: holder,
                }));
            }
            tracing::info!(operator = %name, displaced = %holder, "an older WasmOperator takes over its resource kind");
            let freed = controllers.stop(&holder);
            controllers
                .refused
                .insert(holder.clone(), Refusal::KindClaimed(kind.clone()));
            self.recheck(freed);
            self.recheck(vec![holder]);
        }
        // Each cycle its outputs close: the youngest operator on it is refused (this one, or a
        // running one, which stops; then look again).
        while let Some(cycle) = output_cycles::through(
            &name,
            &op.spec,
            controllers
                .running
                .iter()
                .map(|(n, r)| (n.as_str(), &r.spec)),
        ) {
            let youngest = cycle
                .operators()
                .filter_map(|o| controllers.running.get(o).map(|r| (r.claim.clone(), o)))
                .filter(|(c, o)| *o != name && *c > claim)
                .max()
                .map(|(_, o)| o.to_string());
            let refused = youngest.clone().unwrap_or_else(|| name.clone());
            let others = cycle
                .operators()
                .filter(|o| *o != refused)
                .map(str::to_string)
                .collect();
            let freed = controllers.stop(&refused);
            controllers
                .refused
                .insert(refused.clone(), Refusal::OutputCycle(others));
            self.recheck(freed);
            let cycle = crate::worker_text::bound_owned(
                cycle.to_string(),
                crate::worker_text::MESSAGE_BYTES,
            );
            let Some(youngest) = youngest else {
                return Err(StartRefusal::Cycle(cycle));
            };
            tracing::info!(operator = %name, refused = %youngest, %cycle, "an older WasmOperator's outputs close a cycle: the youngest on it stops");
            self.recheck(vec![youngest]);
        }
        controllers.refused.remove(&name);
        let (tx, mut rx) = oneshot::channel::<()>();
        let swapped = controllers.running.contains_key(&name);
        // The previous controller shuts down gracefully: its in-flight reconciles finish on
        // the old modules. The new one starts once it has (bounded wait), so the two never
        // reconcile the same object at once.
        let freed = controllers.stop(&name);
        self.recheck(freed);
        let previous = controllers.draining.remove(&name);
        let grace = self.drain_grace();
        let account = operator.grants.account().to_string();
        let capped = capped_limits(self.modules.sandbox(), &operator.definition);
        let mut message = format!(
            "{} controller for {} {} with {} module(s), acting as {account}",
            if swapped {
                "swapped to a new"
            } else {
                "running a"
            },
            op.spec.resource.api_version,
            op.spec.resource.kind,
            digests.len()
        );
        if !capped.is_empty() {
            let capped = crate::worker_text::bounded(&capped, crate::worker_text::MESSAGE_BYTES);
            tracing::warn!(operator = %name, %capped, "limits capped at this host's ceilings");
            message.push_str(&format!(
                "; limits capped at this host's ceilings: {capped}"
            ));
        }
        let base_message = message.clone();
        message.push_str(&reach_text(reach));
        let shared_message = Arc::new(Mutex::new(message.clone()));
        let task_name = name.clone();
        let synced = operator.clone();
        let watches = operator.watches();
        let report = report_watches(
            self.client.clone(),
            self.recorder.clone(),
            watches.clone(),
            RunningReport {
                operator: name.clone(),
                message: shared_message.clone(),
                digests: digests.clone(),
            },
        );
        let task = tokio::spawn(async move {
            if let Some(previous) = previous {
                drain(&task_name, previous, grace).await;
            }
            // Stopped or swapped again while the previous one drained: never start.
            if !matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
                return;
            }
            let reporting = tokio::spawn(report);
            watch::run(operator, async move {
                let _ = rx.await;
            })
            .await;
            reporting.abort();
        });
        controllers.running.insert(
            name.clone(),
            Running {
                spec: op.spec.clone(),
                claim,
                digests: digests.clone(),
                message: shared_message,
                base_message,
                reach: reach.clone(),
                operator: synced.clone(),
                watches,
                shutdown: Some(tx),
                task: Some(task),
            },
        );
        crate::metrics::READINESS.syncing(&name);
        tokio::spawn(report_synced(name, synced));
        crate::metrics::METRICS
            .operators_running
            .set(controllers.running.len() as i64);
        Ok(Some(message))
    }

    /// Reports a failed load: log line, metric, `Ready=False` status, a Warning Event.
    async fn report_failure(&self, op: &WasmOperator, failure: &LoadFailure) {
        let name = op.name_any();
        let still = if self.lock().running.contains_key(&name) {
            "; the previous definition keeps running"
        } else {
            ""
        };
        let message = format!("{failure}{still}");
        tracing::warn!(operator = %name, reason = failure.reason(), "{message}");
        crate::metrics::METRICS
            .load_failures
            .get_or_create(&crate::metrics::LoadLabels {
                operator: name.clone(),
                reason: failure.reason().into(),
            })
            .inc();
        if let Err(e) = self
            .report(
                op,
                Some(Failure {
                    reason: failure.reason(),
                    retried: failure.retry(),
                }),
                &message,
                BTreeMap::new(),
            )
            .await
        {
            tracing::warn!(operator = %name, error = %crate::error_report::Brief(&e), "could not update WasmOperator status");
        }
        status::publish_operator_event(
            &self.recorder,
            &name,
            op.uid(),
            true,
            failure.reason(),
            "Load",
            message,
        )
        .await;
    }

    /// Loads `definition` (validated from `spec`): its kinds, grants, caches and modules.
    async fn load(
        &self,
        name: &str,
        definition: OperatorDefinition,
        spec: &WasmOperatorSpec,
        grant: Option<crate::crd::WasmOperatorGrantSpec>,
    ) -> Result<(Arc<OperatorContext>, BTreeMap<String, String>, Reach), LoadFailure> {
        // Before anything is fetched or watched: limits that cannot fit are an edit to make.
        let roles = definition
            .phases
            .iter()
            .map(|p| (format!("phase {}", p.name), &p.limits))
            .chain(
                definition
                    .finalizer
                    .is_some()
                    .then(|| (FINALIZER_ROLE.to_string(), &definition.finalizer_limits)),
            );
        self.modules.sandbox().check_fits(roles)?;
        // Its turns of the shared slots are its tenant's (the grant's), from its modules' loads on.
        self.modules
            .sandbox()
            .set_tenant(name, grant.as_ref().and_then(|g| g.tenant.as_deref()));
        // Its grant's fetch allowances are its own: its module fetches and its queries.
        let host_egress = self.metrics_source.client.egress();
        let mut metrics_source = self.metrics_source.clone();
        if grant
            .as_ref()
            .is_some_and(|g| !g.allow_fetch_from.is_empty())
        {
            let egress = operator_egress(host_egress, grant.as_ref());
            self.modules.set_operator_egress(name, Some(egress.clone()));
            metrics_source.client = crate::promql::Prometheus::with_egress(egress);
        } else {
            self.modules.set_operator_egress(name, None);
        }
        let as_operator = self
            .identities
            .client(name)
            .map_err(LoadFailure::PermissionCheck)?;
        // The modules load while the kinds are resolved, the informers list and the access
        // reviews run (a start's longest waits, overlapped). Reading starts once the kinds are
        // known; nothing is written before the reviews pass, and a failed review drops the
        // caches, which stops their watches.
        let reads = async {
            let kinds = self.resolve_kinds(&definition).await?;
            tracing::debug!(operator = %name, "kinds resolved");
            // A cluster-scoped output is the admin's to allow, like the sensitive kinds.
            for (i, p) in spec.phases.iter().enumerate() {
                for (j, output) in p.outputs.iter().map(|o| &o.kind).enumerate() {
                    let cluster_scoped = kinds.resolved.get(output).is_some_and(|k| !k.namespaced);
                    if cluster_scoped && !crate::definition::allows_sensitive(spec, output) {
                        return Err(LoadFailure::Invalid(crate::definition::DefinitionError {
                            field: format!("spec.phases[{i}].outputs[{j}]"),
                            problem: format!(
                                "{} {} is cluster-scoped: list it in spec.allowSensitiveKinds (a field an admin reviews) to write it",
                                output.api_version, output.kind
                            ),
                            more: Vec::new(),
                        }));
                    }
                }
            }
            let caches = self.watch(&definition, &kinds.resolved, kinds.resource.namespaced);
            // Fail here, naming verb and resource, rather than at the first write of a reconcile:
            // the host must be able to read what the operator reads, and the operator's own
            // account to do what it does (asked as that account).
            let reads = crate::rbac::host_read_rules(spec, &kinds.known);
            let missing = crate::rbac::missing_permissions(&self.client, &reads, None)
                .await
                .map_err(LoadFailure::PermissionCheck)?;
            if !missing.is_empty() {
                return Err(LoadFailure::MissingPermissions(missing));
            }
            let (grants, reach) = OperatorGrants::check_at_load(
                self.identities.account(name),
                as_operator.clone(),
                crate::rbac::rules_for(spec, &kinds.known),
                &crate::rbac::reporting_rules(spec, &kinds.known),
                self.rbac_changes.clone(),
            )
            .await
            .map_err(|refusal| match refusal {
                LoadRefusal::NotGranted(n) => LoadFailure::NotGranted(n),
                LoadRefusal::Check(e) => LoadFailure::GrantCheck(e),
            })?;
            tracing::debug!(operator = %name, ?reach, "permissions checked");
            Ok((kinds, caches, grants, reach))
        };
        let (reads, modules) = future::join(reads, self.load_modules(&definition)).await;
        // A kind not served or a failed access review is reported before a module that failed.
        let (
            OperatorKinds {
                resource, resolved, ..
            },
            (input_caches, output_caches),
            grants,
            reach,
        ) = reads?;
        let LoadedModules {
            workers,
            finalizer,
            digests,
        } = modules?;
        let recorder = Recorder::new(as_operator.clone(), self.reporter.clone());
        let namespaced: HashMap<KindRef, bool> = resolved
            .iter()
            .map(|(k, r)| (k.clone(), r.namespaced))
            .collect();
        let handles = LaneHandles {
            definition: definition.clone(),
            namespaced: namespaced.clone(),
            sandbox: self.modules.sandbox().clone(),
            resource_api: resource.api.clone(),
            recorder: recorder.clone(),
            record_sink: self.record_sink.clone(),
        };
        let shadows = self.load_shadows(handles).await;
        let ctx = OperatorContext {
            definition,
            as_operator,
            host_client: self.client.clone(),
            grants,
            host_recorder: self.recorder.clone(),
            resource,
            workers,
            finalizer,
            kinds: resolved,
            namespaced,
            inputs: input_caches,
            outputs: output_caches,
            sandbox: self.modules.sandbox().clone(),
            recorder,
            backoff: Backoff::default(),
            metrics_source,
            finalized: Default::default(),
            record_sink: self.record_sink.clone(),
            shadows,
            input_requeue: self.input_requeue,
            own_writes: Default::default(),
            resources: Default::default(),
            reserved_namespaces: self.reserved_namespaces.clone(),
            grant,
            writes: self.writes.clone(),
            shard: self.sharding.as_ref().map(|s| s.operator(name)),
            resource_watch: Default::default(),
        };
        Ok((Arc::new(ctx), digests, reach))
    }

    /// The resource and every kind a phase or the finalizer reads or writes, as the API server
    /// serves them; a kind it does not serve fails, naming the field that declared it first.
    async fn resolve_kinds(
        &self,
        definition: &OperatorDefinition,
    ) -> Result<OperatorKinds, LoadFailure> {
        let mut declared: Vec<(KindRef, String)> = Vec::new();
        for (i, p) in definition.phases.iter().enumerate() {
            for (j, input) in p.inputs.iter().enumerate() {
                let k = KindRef::new(&input.api_version, &input.kind);
                declared.push((k, format!("spec.phases[{i}].inputs[{j}]")));
            }
            for (j, k) in p.outputs.iter().enumerate() {
                declared.push((k.clone(), format!("spec.phases[{i}].outputs[{j}]")));
            }
        }
        for (j, input) in definition.finalizer_inputs.iter().enumerate() {
            let k = KindRef::new(&input.api_version, &input.kind);
            declared.push((k, format!("spec.finalizer.inputs[{j}]")));
        }
        let mut seen = std::collections::HashSet::new();
        declared.retain(|(k, _)| seen.insert(k.clone()));
        // The resource first: its failure is the one to report when nothing is installed yet.
        let mut lookup = vec![(definition.resource.clone(), "spec.resource".to_string())];
        lookup.extend(
            declared
                .iter()
                .filter(|(k, _)| *k != definition.resource)
                .cloned(),
        );
        let mut found = kinds::resolve_all(&self.client, &lookup).await?.into_iter();
        let resource = found
            .next()
            .ok_or_else(|| kinds::KindNotServed::absent(&definition.resource, "spec.resource"))?;
        let mut resolved: HashMap<KindRef, ResolvedKind> =
            found.map(|r| (r.kind.clone(), r)).collect();
        if seen.contains(&definition.resource) {
            resolved.insert(definition.resource.clone(), resource.clone());
        }
        let known_kind = |r: &ResolvedKind| crate::rbac::KnownKind {
            api: r.api.clone(),
            namespaced: r.namespaced,
        };
        let mut known: BTreeMap<KindRef, crate::rbac::KnownKind> = resolved
            .iter()
            .map(|(k, r)| (k.clone(), known_kind(r)))
            .collect();
        known.insert(definition.resource.clone(), known_kind(&resource));
        Ok(OperatorKinds {
            resource,
            resolved,
            known,
        })
    }

    /// The informers of the operator's inputs (objects as workers see them) and outputs
    /// (metadata), started now unless another operator watches the same already.
    /// Inputs read across namespaces (`allNamespaces`, or a cluster-scoped resource's) get
    /// caches of every namespace, also on a sharded replica.
    fn watch(
        &self,
        definition: &OperatorDefinition,
        resolved: &HashMap<KindRef, ResolvedKind>,
        resource_namespaced: bool,
    ) -> (InputCaches, OutputCaches) {
        let mut input_caches =
            InputCaches::new(resource_namespaced, self.reserved_namespaces.clone());
        for input in definition.all_inputs() {
            let kind = KindRef::new(&input.api_version, &input.kind);
            if let Some(resolved) = resolved.get(&kind) {
                let every_namespace = input.reads_other_namespaces(resource_namespaced);
                input_caches.add(kind, &input.fields, every_namespace, || {
                    self.informers.objects(
                        resolved,
                        crate::pipeline::inputs::projection(input),
                        every_namespace,
                    )
                });
            }
        }
        let output_caches = OutputCaches(
            definition
                .output_kinds()
                .iter()
                .filter(|k| **k != definition.resource)
                .filter_map(|k| resolved.get(k))
                .map(|k| (k.kind.clone(), self.informers.metadata(k)))
                .collect(),
        );
        (input_caches, output_caches)
    }

    /// The phases' and the finalizer's modules, all at once: fetching and loading cached ones
    /// overlap (a compile waits for any other, see `ModuleCache`). Every load finishes, so the
    /// failure reported is always the first phase's, then the finalizer's.
    async fn load_modules(
        &self,
        definition: &OperatorDefinition,
    ) -> Result<LoadedModules, LoadFailure> {
        let phases = future::join_all(definition.phases.iter().filter_map(|p| {
            let m = p.module.as_ref()?;
            Some(async move {
                let module = self
                    .modules
                    .phase_worker(&definition.name, m, &p.limits, p.randomness)
                    .await
                    .map_err(|source| LoadFailure::Module {
                        role: format!("phase {}", p.name),
                        source,
                    })?;
                Ok::<_, LoadFailure>((p.name.clone(), module))
            })
        }));
        let finalizer = async {
            let Some(m) = &definition.finalizer else {
                return Ok::<_, LoadFailure>(None);
            };
            let module = self
                .modules
                .finalizer_worker(
                    &definition.name,
                    m,
                    &definition.finalizer_limits,
                    definition.finalizer_randomness,
                )
                .await
                .map_err(|source| LoadFailure::Module {
                    role: FINALIZER_ROLE.into(),
                    source,
                })?;
            Ok(Some(module))
        };
        let (phases, finalizer) = future::join(phases, finalizer).await;
        let phases = phases.into_iter().collect::<Result<Vec<_>, _>>()?;
        let finalizer = finalizer?;
        let mut digests: BTreeMap<String, String> = phases
            .iter()
            .map(|(phase, module)| (phase.clone(), module.digest.clone()))
            .collect();
        if let Some(f) = &finalizer {
            digests.insert(FINALIZER_ROLE.into(), f.digest.clone());
        }
        Ok(LoadedModules {
            workers: phases.into_iter().collect(),
            finalizer,
            digests,
        })
    }

    /// The phases' shadow components, started in their lane. A shadow that cannot be loaded
    /// does not stop the operator: it is logged and reported in `status.shadows`.
    /// Its Events on resources are the operator's (`handles.recorder`).
    async fn load_shadows(&self, handles: LaneHandles) -> Option<Shadows> {
        let (name, definition) = (handles.definition.name.as_str(), &handles.definition);
        let mut loaded = HashMap::new();
        let mut failed = BTreeMap::new();
        for p in &definition.phases {
            let Some(m) = &p.shadow else { continue };
            match self
                .modules
                .phase_worker(name, m, &p.limits, p.randomness)
                .await
            {
                Ok(module) => {
                    loaded.insert(p.name.clone(), module);
                }
                Err(e) => {
                    let why = crate::worker_text::bound_owned(
                        format!("shadow not loaded ({}): {e}", module_reason(&e)),
                        crate::worker_text::MESSAGE_BYTES,
                    );
                    tracing::warn!(operator = %name, phase = %p.name, "{why}");
                    failed.insert(p.name.clone(), why);
                }
            }
        }
        (!loaded.is_empty() || !failed.is_empty()).then(|| {
            let recorder = handles.recorder.clone();
            Shadows::start(self.client.clone(), recorder, handles, loaded, failed)
        })
    }

    /// Writes Ready and ModulesLoaded conditions, active digests and observedGeneration. A write
    /// the API server refuses for its shape is also reported as an Event on the WasmOperator.
    async fn report(
        &self,
        op: &WasmOperator,
        failure: Option<Failure<'_>>,
        message: &str,
        digests: BTreeMap<String, String>,
    ) -> Result<(), kube::Error> {
        let now = crate::pipeline::step::now_rfc3339();
        let Some(body) = report_patch(op, failure, message, &digests, &now) else {
            return Ok(());
        };
        let api: Api<WasmOperator> = Api::all(self.client.clone());
        let written = api
            .patch_status(
                &op.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await;
        if let Err(e) = &written {
            if status::refused_for_shape(e) {
                status::publish_operator_event(
                    &self.recorder,
                    &op.name_any(),
                    op.uid(),
                    true,
                    "StatusRefused",
                    "WriteStatus",
                    format!("the API server refused the WasmOperator's status: {e}"),
                )
                .await;
            }
        }
        written.map(|_| ())
    }
}

/// The limits of `definition`'s phases and finalizer that `sandbox`'s ceilings cap, phase by
/// phase (empty: none).
fn capped_limits(sandbox: &crate::sandbox::Sandbox, definition: &OperatorDefinition) -> String {
    let phases = definition
        .phases
        .iter()
        .map(|p| (format!("phase {}", p.name), sandbox.capped(&p.limits)));
    let finalizer = definition.finalizer.as_ref().map(|_| {
        (
            "finalizer".to_string(),
            sandbox.capped(&definition.finalizer_limits),
        )
    });
    phases
        .chain(finalizer)
        .filter(|(_, capped)| !capped.is_empty())
        .map(|(what, capped)| format!("{what} {}", capped.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a WasmOperator is not running its controller, as its status says it.
#[derive(Clone, Copy, Debug)]
pub struct Failure<'a> {
    /// The conditions' reason (`InvalidDefinition`, `ModuleFetchFailed`, `WatchFailing`, …).
    pub reason: &'a str,
    /// Whether the host tries again by itself (with backoff): kstatus's `Reconciling`; if not
    /// (it waits for an edit, or for another operator to change), `Stalled`.
    pub retried: bool,
}

/// The merge patch of a WasmOperator's status the manager writes: `Ready` and `ModulesLoaded`
/// (with `failure`'s reason, if any), kstatus's `Reconciling` (a failure retried) and `Stalled`
/// (a failure waiting for a change), the active `digests`, observedGeneration, and `shadows`
/// cleared once no phase declares one. `None` when it would change nothing.
pub fn report_patch(
    op: &WasmOperator,
    failure: Option<Failure<'_>>,
    message: &str,
    digests: &BTreeMap<String, String>,
    now: &str,
) -> Option<Value> {
    let current = op
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null));
    let reason = failure.map_or("ControllerRunning", |f| f.reason);
    let ready = status::ConditionUpdate {
        type_: "Ready",
        status: failure.is_none(),
        reason: reason.into(),
        message: message.into(),
    };
    let modules_ok = failure.is_none();
    let modules = status::ConditionUpdate {
        type_: "ModulesLoaded",
        status: modules_ok,
        reason: if modules_ok {
            "Loaded".into()
        } else {
            reason.into()
        },
        message: if modules_ok {
            format!("{} module(s) verified and compiled", digests.len())
        } else {
            "modules were not loaded: see the Ready condition".into()
        },
    };
    let retrying = failure.is_some_and(|f| f.retried);
    let reconciling = status::ConditionUpdate {
        type_: "Reconciling",
        status: retrying,
        reason: reason.into(),
        message: if retrying {
            "retried with backoff: see the Ready condition".into()
        } else {
            "not retrying".into()
        },
    };
    let stalled_now = failure.is_some_and(|f| !f.retried);
    let stalled = status::ConditionUpdate {
        type_: "Stalled",
        status: stalled_now,
        reason: reason.into(),
        message: if stalled_now {
            "waits for an edit of this WasmOperator or a change of the operator it names: see the Ready condition".into()
        } else {
            "no error that waits for a change".into()
        },
    };
    let mut patch = status::StatusUpdate {
        observed_generation: op.metadata.generation,
        conditions: vec![ready],
        ..Default::default()
    };
    let mut body = status::status_patch(current.as_ref(), &patch, now).unwrap_or_else(|| json!({}));
    let mut merged = current.clone().unwrap_or_else(|| json!({}));
    json_patch::merge(&mut merged, &body);
    for condition in [modules, reconciling, stalled] {
        patch.conditions = vec![condition];
        if let Some(more) = status::status_patch(Some(&merged), &patch, now) {
            json_patch::merge(&mut merged, &more);
            json_patch::merge(&mut body, &more);
        }
    }
    if failure.is_none() {
        body["modules"] = modules_patch(current.as_ref(), digests);
    }
    let shadowed = op.spec.phases.iter().any(|p| p.shadow.is_some());
    if !shadowed && current.as_ref().is_some_and(|s| s.get("shadows").is_some()) {
        // The counts of shadows no longer declared go with them.
        body["shadows"] = Value::Null;
    }
    if body.as_object().is_some_and(|m| m.is_empty()) {
        return None;
    }
    Some(json!({ "status": body }))
}

/// The merge patch of a WasmOperator's status as a load of its generation begins: kstatus's
/// `Reconciling=True` (reason `Loading`); `Ready`, `observedGeneration` and the modules stay as
/// they are (a previous definition may still run) until the load ends. `None` when
/// `Reconciling` is already true of this generation: said once, or a failure being retried
/// (which says why; a broken operator retried every few seconds writes nothing new).
pub fn loading_patch(op: &WasmOperator, now: &str) -> Option<Value> {
    let current = op
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null));
    let reconciling = current
        .as_ref()
        .and_then(|s| s["conditions"].as_array())
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Reconciling");
    if reconciling.is_some_and(|c| {
        c["status"] == "True" && c["observedGeneration"].as_i64() == op.metadata.generation
    }) {
        return None;
    }
    let generation = op
        .metadata
        .generation
        .map(|g| format!(" generation {g}"))
        .unwrap_or_default();
    let update = status::StatusUpdate {
        condition_generation: op.metadata.generation,
        conditions: vec![status::ConditionUpdate::new(
            "Reconciling",
            true,
            LOADING,
            format!(
                "loading{generation}: its kinds, grants and modules (fetched and compiled one at a time)"
            ),
        )],
        ..Default::default()
    };
    let body = status::status_patch(current.as_ref(), &update, now)?;
    Some(json!({ "status": body }))
}

/// What the WasmOperator's `Ready` says while its watches work.
struct RunningReport {
    operator: String,
    /// The Ready message, which follows the operator's grants.
    message: Arc<Mutex<String>>,
    digests: BTreeMap<String, String>,
}

/// Reports the operator's watches on its WasmOperator for as long as its controller runs:
/// `Ready=False` (`WatchFailing`, a Warning Event and a log line) when one has failed for
/// [`watch_health::FAILING_FOR`], back to the running message when all work again.
async fn report_watches(
    client: Client,
    recorder: Recorder,
    mut watches: watch_health::OperatorWatches,
    running: RunningReport,
) {
    let mut reported: Option<KindRef> = None;
    while watches.changed().await {
        let mut failing = watches.failing();
        if failing.is_some() && reported.is_none() {
            tokio::time::sleep(watch_health::FAILING_FOR).await;
            failing = watches.failing();
        }
        let kind = failing.as_ref().map(|(kind, _)| kind.clone());
        if kind == reported {
            continue;
        }
        reported = kind;
        let name = &running.operator;
        let api: Api<WasmOperator> = Api::all(client.clone());
        let op = match api.get(name).await {
            Ok(op) => op,
            Err(e) => {
                tracing::warn!(operator = %name, error = %crate::error_report::Brief(&e), "could not read the WasmOperator to report its watches");
                continue;
            }
        };
        let now = crate::pipeline::step::now_rfc3339();
        let patch = match &failing {
            Some((_, message)) => {
                tracing::warn!(operator = %name, reason = watch_health::WATCH_FAILING, "{message}");
                status::publish_operator_event(
                    &recorder,
                    name,
                    op.uid(),
                    true,
                    watch_health::WATCH_FAILING,
                    "Watch",
                    message.clone(),
                )
                .await;
                report_patch(
                    &op,
                    Some(Failure {
                        reason: watch_health::WATCH_FAILING,
                        retried: true,
                    }),
                    message,
                    &running.digests,
                    &now,
                )
            }
            None => {
                tracing::info!(operator = %name, "its watches work again");
                let message = current_message(&running.message);
                report_patch(&op, None, &message, &running.digests, &now)
            }
        };
        if let Some(body) = patch {
            if let Err(e) = api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                tracing::warn!(operator = %name, error = %crate::error_report::Brief(&e), "could not report its watches on the WasmOperator");
            }
        }
    }
}

/// Whether the WasmOperator's status already reports its current generation as running:
/// `observedGeneration` is the object's generation and `Ready` is `True`.
fn reports_generation(op: &WasmOperator) -> bool {
    let Ok(status) = serde_json::to_value(&op.status) else {
        return false;
    };
    let observed = status["observedGeneration"].as_i64();
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    ready && observed.is_some() && observed == op.metadata.generation
}

/// The merge patch of `status.modules` that leaves exactly `digests`: roles no longer in the spec
/// (a removed phase, the finalizer) are set to null, which a JSON merge patch deletes.
fn modules_patch(current_status: Option<&Value>, digests: &BTreeMap<String, String>) -> Value {
    let mut patch: serde_json::Map<String, Value> = current_status
        .and_then(|s| s.get("modules"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.keys())
        .map(|role| (role.clone(), Value::Null))
        .collect();
    for (role, digest) in digests {
        patch.insert(role.clone(), Value::String(digest.clone()));
    }
    Value::Object(patch)
}

/// Aborts a task when dropped (a no-op once it has finished).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits, at most `grace`, for a stopped controller's in-flight reconciles; then aborts it.
async fn drain(name: &str, task: JoinHandle<()>, grace: Duration) {
    let started = Instant::now();
    // Aborted also when this wait itself is cancelled (e.g. a swap's waiting task is aborted).
    let mut task = AbortOnDrop(task);
    match tokio::time::timeout(grace, &mut task.0).await {
        Ok(_) => tracing::debug!(
            operator = %name,
            waited_ms = started.elapsed().as_millis() as u64,
            "previous controller finished its in-flight reconciles"
        ),
        Err(_) => tracing::warn!(
            operator = %name,
            "previous controller still running after {grace:?}; aborting its in-flight reconciles"
        ),
    }
}

/// Marks an operator synced for `/readyz` once all its caches have their first list.
async fn report_synced(name: String, ctx: Arc<OperatorContext>) {
    for (_, informer) in ctx.inputs.all() {
        if !informer.wait_until_ready().await {
            return;
        }
    }
    for informer in ctx.outputs.0.values() {
        if !informer.wait_until_ready().await {
            return;
        }
    }
    crate::metrics::READINESS.synced(&name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_patch_removes_roles_no_longer_in_the_spec() {
        let current = json!({"modules": {"Syncing": "sha256:a", "Removed": "sha256:b"}});
        let digests = BTreeMap::from([
            ("Syncing".to_string(), "sha256:c".to_string()),
            ("Added".to_string(), "sha256:d".to_string()),
        ]);
        let patch = modules_patch(Some(&current), &digests);
        assert_eq!(
            patch,
            json!({"Syncing": "sha256:c", "Added": "sha256:d", "Removed": null})
        );
        let mut status = current.clone();
        json_patch::merge(&mut status, &json!({ "modules": patch }));
        assert_eq!(
            status["modules"],
            json!({"Syncing": "sha256:c", "Added": "sha256:d"})
        );
        assert_eq!(modules_patch(None, &digests), json!(digests));
    }

    #[test]
    fn module_failures_have_distinct_reasons() {
        let module = |source| LoadFailure::Module {
            role: "phase Start".into(),
            source,
        };
        let fetch = module(ModuleError::Fetch {
            source_name: "URL https://r/x.wasm".into(),
            source: crate::modules::url::UrlError::Status {
                status: reqwest::StatusCode::UNAUTHORIZED,
            }
            .into(),
        });
        let mismatch = module(ModuleError::DigestMismatch {
            source_name: "OCI r/x:v1".into(),
            expected: "sha256:0".into(),
            actual: "sha256:1".into(),
        });
        let compile = module(ModuleError::Load {
            source_name: "OCI r/x:v1".into(),
            error: LoadError::Compile("bad magic".into()),
        });
        let reasons = [fetch.reason(), mismatch.reason(), compile.reason()];
        assert_eq!(
            reasons,
            [
                "ModuleFetchFailed",
                "ModuleDigestMismatch",
                "ModuleCompileFailed"
            ]
        );
        assert_eq!(module(ModuleError::NoSource).reason(), "InvalidDefinition");
    }

    #[tokio::test]
    async fn drain_waits_for_the_previous_controller_then_aborts_it() {
        // Finishes within the grace: waited for, not cut short.
        let quick = tokio::spawn(tokio::time::sleep(Duration::from_millis(50)));
        let started = Instant::now();
        drain("quick", quick, Duration::from_secs(10)).await;
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(started.elapsed() < Duration::from_secs(10));

        // Never finishes: aborted after the grace (its future, and what it holds, is dropped).
        let (held, dropped) = oneshot::channel::<()>();
        let stuck = tokio::spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        drain("stuck", stuck, Duration::from_millis(50)).await;
        assert!(
            tokio::time::timeout(Duration::from_secs(5), dropped)
                .await
                .is_ok_and(|r| r.is_err()),
            "the stuck controller was aborted"
        );
    }
}
