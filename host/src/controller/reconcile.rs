//! One reconcile of one resource, top to bottom: current phase → inputs → sandbox → outputs →
//! status. Errors end as a Condition and an Event on the resource, then backoff or resync.
//! The worker's decision and its checks are [`crate::pipeline::decision::decide`] (shared with the offline
//! commands); applying, pruning and the status write are here.

use crate::controller::finalizer;
use crate::controller::grants::{ReconcileRefusal, GRANTS_RECHECK};
use crate::controller::informers::{MetadataInformer, ObjectInformer};
use crate::controller::live_evidence::LiveCall;
use crate::controller::schedule::Backoff;
use crate::crd::{InputSpec, KindRef};
use crate::definition::OperatorDefinition;
use crate::evidence::case::RecordedResult;
use crate::kinds::ResolvedKind;
use crate::pipeline::decision::{self, DecisionInput};
use crate::pipeline::inputs::{ObjectSource, WorkerObject};
use crate::pipeline::outputs::{self, CheckedOutput, ObjectKey, OutputError};
use crate::pipeline::status::{self, ConditionUpdate, StatusUpdate, SYNCED};
use crate::pipeline::step::{self, now_rfc3339, Samples, Standing};
use crate::pipeline::ReconcileError;
use crate::sandbox::{FinalizerModule, PhaseModule, RunError, Sandbox};
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// How long a reconcile waits for the input caches' first list before retrying.
const INPUTS_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything one operator's reconciles share; built by the manager when the operator loads.
pub struct OperatorContext {
    pub definition: OperatorDefinition,
    /// Sends every request as the operator's own account (impersonated): its writes, and the
    /// reads that decide one (a resource read after a stale decision).
    pub as_operator: Client,
    /// The host's own identity: the watches of the shared caches.
    pub host_client: Client,
    /// What the operator's account is granted, per namespace.
    pub grants: crate::controller::grants::OperatorGrants,
    /// Events the host reports itself on the operator's resources (a refusal for missing
    /// grants, which the operator's account may not be able to report there).
    pub host_recorder: Recorder,
    pub resource: ResolvedKind,
    /// Phase name → its component.
    pub workers: HashMap<String, PhaseModule>,
    pub finalizer: Option<FinalizerModule>,
    /// Input and output kinds, resolved.
    pub kinds: HashMap<KindRef, ResolvedKind>,
    pub namespaced: HashMap<KindRef, bool>,
    pub inputs: InputCaches,
    pub outputs: OutputCaches,
    pub sandbox: Arc<Sandbox>,
    /// Events on the operator's resources, sent as the operator's account.
    pub recorder: Recorder,
    pub backoff: Backoff,
    pub metrics_source: MetricsSource,
    /// Resources whose finalizer worker reported done (it runs once per deletion).
    pub finalized: finalizer::FinalizedResources,
    /// Where decisions are recorded (`wasmpilot run --record-dir`), if anywhere.
    pub record_sink: Option<crate::evidence::record::RecordSink>,
    /// The phases' shadow components, if any phase declares one.
    pub shadows: Option<crate::controller::shadow::Shadows>,
    /// Which resources an input object's change requeues.
    pub input_requeue: crate::controller::watch::InputRequeue,
    /// The resource versions this host's own status writes produced (their watch events wake
    /// nothing).
    pub own_writes: OwnWrites,
}

/// Resources at most remembered with an own write whose watch event has not arrived (a
/// resource deleted meanwhile never brings it); beyond, the memory starts over.
const OWN_WRITES_KEPT: usize = 100_000;

/// How long the resource's watch waits for a status write of this host in flight to answer
/// before it takes an event of that resource as someone else's.
const OWN_WRITE_WAIT: Duration = Duration::from_secs(5);

/// This host's status writes per resource (by uid): in flight, or the resourceVersion the last
/// one produced until its watch event arrives. That event is this host's own write, already
/// acted on (the phase it moved to was run in the same reconcile, or a requeue is set), and
/// reconciles nothing; an event arriving while a write is in flight waits for its answer to
/// tell. A worker whose every decision changes its status therefore writes at its
/// `requeue_after` pace, not as fast as the watch brings its writes back.
#[derive(Default)]
pub struct OwnWrites {
    writes: std::sync::Mutex<HashMap<String, OwnWrite>>,
    answered: tokio::sync::Notify,
}

enum OwnWrite {
    InFlight,
    Wrote(String),
}

impl OwnWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnWrite>> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A status write of the resource `uid` is about to be sent.
    fn begin(&self, uid: Option<&str>) {
        let Some(uid) = uid else { return };
        let mut writes = self.lock();
        if writes.len() >= OWN_WRITES_KEPT {
            writes.clear();
        }
        writes.insert(uid.to_string(), OwnWrite::InFlight);
    }

    /// The write begun for `uid` was answered: `written` (none if it failed).
    fn finish(&self, uid: Option<&str>, written: Option<&DynamicObject>) {
        let Some(uid) = uid else { return };
        let rv = written.and_then(|w| w.metadata.resource_version.clone());
        {
            let mut writes = self.lock();
            match rv {
                Some(rv) => writes.insert(uid.to_string(), OwnWrite::Wrote(rv)),
                None => writes.remove(uid),
            };
        }
        self.answered.notify_waiters();
    }

    /// Whether the version `rv` of the resource `uid`, as its watch brings it, is exactly this
    /// host's last write of it; waits (bounded) for a write of it in flight to be answered first.
    pub async fn is_own(&self, uid: Option<String>, rv: Option<String>) -> bool {
        let (Some(uid), Some(rv)) = (uid, rv) else {
            return false;
        };
        let (uid, rv) = (&uid, &rv);
        let waited = std::time::Instant::now();
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            {
                let mut writes = self.lock();
                match writes.get(uid) {
                    Some(OwnWrite::InFlight) => {}
                    Some(OwnWrite::Wrote(written)) if written == rv => {
                        writes.remove(uid);
                        return true;
                    }
                    _ => return false,
                }
            }
            let left = OWN_WRITE_WAIT.saturating_sub(waited.elapsed());
            if left.is_zero() || tokio::time::timeout(left, answered).await.is_err() {
                return false;
            }
        }
    }
}

/// Where phases' metric queries go unless the WasmOperator names its own Prometheus.
#[derive(Clone, Default)]
pub struct MetricsSource {
    pub client: crate::promql::Prometheus,
    pub default_url: Option<String>,
}

/// The shared informers of the operator's inputs: per kind, one per projection declared (the
/// `fields` as written; inputs declaring the same fields, or none, share one).
#[derive(Clone, Default)]
pub struct InputCaches(HashMap<KindRef, Vec<ProjectedInformer>>);

/// An informer and the `fields` (as declared) of the inputs reading it.
type ProjectedInformer = (Vec<String>, Arc<ObjectInformer>);

impl InputCaches {
    /// Adds the informer of inputs of `kind` declaring `fields`, unless there is one.
    pub fn add(
        &mut self,
        kind: KindRef,
        fields: &[String],
        informer: impl FnOnce() -> Arc<ObjectInformer>,
    ) {
        let slot = self.0.entry(kind).or_default();
        if !slot.iter().any(|(f, _)| f == fields) {
            slot.push((fields.to_vec(), informer()));
        }
    }

    /// The informer `input` reads.
    pub fn informer(&self, input: &InputSpec) -> Option<&Arc<ObjectInformer>> {
        let kind = KindRef::new(&input.api_version, &input.kind);
        let slot = self.0.get(&kind)?;
        slot.iter()
            .find(|(f, _)| *f == input.fields)
            .map(|(_, i)| i)
    }

    /// Caches an object this host just wrote in every informer of its kind (see
    /// [`ObjectInformer::wrote`]).
    pub fn wrote(&self, kind: &KindRef, object: &DynamicObject) {
        for (_, informer) in self.0.get(kind).into_iter().flatten() {
            informer.wrote(object);
        }
    }

    /// Drops an object this host just deleted from every informer of its kind.
    pub fn deleted(&self, kind: &KindRef, namespace: Option<&str>, name: &str) {
        for (_, informer) in self.0.get(kind).into_iter().flatten() {
            informer.deleted(namespace, name);
        }
    }

    /// Every distinct informer, with its kind (two projections of a kind may share one).
    pub fn all(&self) -> Vec<(&KindRef, &Arc<ObjectInformer>)> {
        let mut all: Vec<(&KindRef, &Arc<ObjectInformer>)> = Vec::new();
        for (kind, slot) in &self.0 {
            for (_, informer) in slot {
                if !all.iter().any(|(_, i)| Arc::ptr_eq(i, informer)) {
                    all.push((kind, informer));
                }
            }
        }
        all
    }

    /// The kinds read.
    pub fn kinds(&self) -> impl Iterator<Item = &KindRef> {
        self.0.keys()
    }
}

impl ObjectSource for InputCaches {
    fn worker_objects(&self, input: &InputSpec, namespace: Option<&str>) -> Vec<Arc<WorkerObject>> {
        let Some(informer) = self.informer(input) else {
            return Vec::new();
        };
        let mut objects = informer.cache.in_namespace(namespace);
        // Cluster-scoped objects (indexed under "") are visible to namespaced resources too.
        if namespace.is_some_and(|ns| !ns.is_empty()) {
            objects.extend(informer.cache.in_namespace(Some("")));
        }
        objects
    }
}

/// The shared metadata informers of every output kind (for pruning and owner requeues).
#[derive(Clone, Default)]
pub struct OutputCaches(pub HashMap<KindRef, Arc<MetadataInformer>>);

impl OutputCaches {
    /// Caches the metadata of an object this host just wrote (see [`MetadataInformer::wrote`]).
    pub fn wrote(&self, kind: &KindRef, object: &DynamicObject) {
        if let Some(informer) = self.0.get(kind) {
            informer.wrote(object);
        }
    }

    pub fn deleted(&self, kind: &KindRef, namespace: Option<&str>, name: &str) {
        if let Some(informer) = self.0.get(kind) {
            informer.deleted(namespace, name);
        }
    }
}

impl outputs::ExistingObjects for OutputCaches {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<kube::api::ObjectMeta> {
        let found = self.0.get(kind)?.cache.get(namespace, name)?;
        Some(found.metadata.clone())
    }

    fn each_in_namespace(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        visit: &mut dyn FnMut(&kube::api::ObjectMeta),
    ) {
        if let Some(informer) = self.0.get(kind) {
            for m in informer.cache.in_namespace(namespace) {
                visit(&m.metadata);
            }
        }
    }
}

impl OperatorContext {
    fn api_for(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        self.resource.api(&self.as_operator, namespace)
    }

    /// `namespace/name` (or `name`), as logs, backoff and cases name a resource.
    pub fn key(obj: &DynamicObject) -> String {
        format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
    }
}

/// The reconcile entry point given to the controller.
pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<OperatorContext>,
) -> Result<Action, ReconcileError> {
    let span = tracing::info_span!(
        "reconcile",
        operator = %ctx.definition.name,
        resource = %OperatorContext::key(&obj),
        phase = tracing::field::Empty,
    );
    async move {
        let metrics = &crate::metrics::METRICS;
        metrics.reconciles_in_flight.inc();
        let phase_label = obj
            .data
            .get("status")
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or(&ctx.definition.initial_phase)
            .to_string();
        let api = ctx.api_for(obj.namespace().as_deref());
        let mut step = decide_fresh(&ctx, &api, obj.clone(), Read::FromCache).await;
        // The object the last decision was made from: a failure is reported on it.
        let mut latest = obj.clone();
        // A phase that moved on is followed at once, from the object as written, rather than
        // after the watch brings it back (bounded, so a cycling operator yields its worker).
        for _ in 0..MAX_CHAINED_PHASES {
            let Ok(Step {
                next: Some(next), ..
            }) = &step
            else {
                break;
            };
            latest = next.clone();
            step = decide_fresh(&ctx, &api, latest.clone(), Read::FromApiServer).await;
        }
        // The chain's bound reached with the phase still moving: go on after a pause (the
        // status write's own watch event wakes nothing).
        let result = step.map(|s| match s.next {
            Some(_) => Action::requeue(decision::MIN_REQUEUE_AFTER),
            None => s.action,
        });
        metrics.reconciles_in_flight.dec();
        let labels = |result: &str| crate::metrics::ReconcileLabels {
            operator: ctx.definition.name.clone(),
            phase: phase_label.clone(),
            result: result.to_string(),
        };
        match result {
            Ok(action) => {
                metrics.reconciles.get_or_create(&labels("ok")).inc();
                ctx.backoff.reset(&OperatorContext::key(&obj));
                Ok(action)
            }
            Err(e) => {
                metrics.reconciles.get_or_create(&labels(e.reason())).inc();
                report_error(&ctx, &api, &latest, e).await
            }
        }
    }
    .instrument(span)
    .await
}

/// Phase changes one reconcile follows before it leaves the rest to the watch.
const MAX_CHAINED_PHASES: usize = 4;

/// What one decision led to: the controller's next action, and the resource as written when
/// its phase changed (to be decided on in the same reconcile).
struct Step {
    action: Action,
    next: Option<Arc<DynamicObject>>,
}

/// One decision on `obj` ([`decide_recorded`]); when the cached object
/// turns out stale (its status write or outputs refused), decided once more at once from the
/// object as the API server has it, instead of waiting for the watch.
async fn decide_fresh(
    ctx: &Arc<OperatorContext>,
    api: &Api<DynamicObject>,
    obj: Arc<DynamicObject>,
    read: Read,
) -> Result<Step, ReconcileError> {
    let (result, next) = decide_recorded(ctx, api, obj.clone(), read).await;
    let (result, next) = match result {
        Err(stale @ (ReconcileError::StatusConflict | ReconcileError::StaleDecision)) => {
            match api.get_opt(&obj.name_any()).await {
                Ok(Some(fresh)) => {
                    tracing::info!("{stale}");
                    decide_recorded(ctx, api, Arc::new(fresh), Read::FromApiServer).await
                }
                Ok(None) => (Ok(Action::await_change()), None),
                Err(_) => (Err(stale), None),
            }
        }
        other => (other, next),
    };
    result.map(|action| Step { action, next })
}

/// One decision on `obj`, its worker call handed to the evidence step; also the resource as
/// written when its phase changed.
async fn decide_recorded(
    ctx: &Arc<OperatorContext>,
    api: &Api<DynamicObject>,
    obj: Arc<DynamicObject>,
    read: Read,
) -> (Result<Action, ReconcileError>, Option<Arc<DynamicObject>>) {
    let mut effects = Effects::default();
    let result = decide(ctx, api, obj.clone(), read, &mut effects).await;
    if let Some(call) = effects.live.take() {
        crate::controller::live_evidence::after_live_call(ctx, &obj, call);
    }
    (result, effects.next)
}

/// Where the object a decision is made from comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// The controller's watch cache, which may lag behind the API server: checked against a
    /// fresh read of its metadata before outputs are applied.
    FromCache,
    /// The API server's answer just now (a status write's, or a read after a stale decision):
    /// not read again.
    FromApiServer,
}

/// What a decision leaves besides its action: the worker call for the evidence step, and the
/// resource as written when its phase changed.
#[derive(Default)]
struct Effects {
    live: Option<LiveCall>,
    next: Option<Arc<DynamicObject>>,
}

/// Finalizer bookkeeping, then the phase worker (or the finalizer worker on deletion). The
/// phase worker's call is left in `effects` when the evidence step wants it, and the resource
/// as written when its phase changed.
async fn decide(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    obj: Arc<DynamicObject>,
    read: Read,
    effects: &mut Effects,
) -> Result<Action, ReconcileError> {
    // Nothing is read for the worker, nor written, where the operator's account is not granted.
    ctx.grants
        .check(obj.namespace().as_deref())
        .await
        .map_err(|refusal| match refusal {
            ReconcileRefusal::NotGranted(n) => ReconcileError::NotGranted(n),
            ReconcileRefusal::Check(e) => ReconcileError::GrantCheck(e),
        })?;
    if ctx.finalizer.is_some() {
        let name = crate::finalizer_name(&ctx.definition.name);
        let deleting = obj.meta().deletion_timestamp.is_some();
        if !finalizer::has(&obj, &name) {
            if deleting {
                // Released (by this host or another), or never added: nothing left to do.
                return Ok(Action::await_change());
            }
            // The watch brings the object with the finalizer, and that runs the phase.
            finalizer::add(api, &obj, &name).await?;
            return Ok(Action::await_change());
        }
        if !deleting {
            return run_phase(ctx, api, obj, read, effects).await;
        }
        let uid = obj.uid().unwrap_or_default();
        if !ctx.finalized.contains(&uid) {
            let action = match run_finalizer(ctx, api, obj.clone()).await {
                Ok(action) => action,
                Err(e) => return past_pending_timeout(ctx, api, &obj, &name, e).await,
            };
            ctx.finalized.insert(&uid);
            finalizer::remove(api, &obj, &name).await?;
            return Ok(action);
        }
        // The worker reported done already; an event from before the removal (its own status
        // write) must not run it again.
        tracing::debug!("finalizer worker done earlier; only removing the finalizer");
        finalizer::remove(api, &obj, &name).await?;
        Ok(Action::await_change())
    } else if obj.meta().deletion_timestamp.is_some() {
        Ok(Action::await_change())
    } else {
        run_phase(ctx, api, obj, read, effects).await
    }
}

/// A finalizer that did not finish (`e`): past the definition's `pendingTimeout` since the
/// deletion began, reported as stuck — or given up, its finalizer removed, when the definition
/// says so; within it (or without one), `e` as it is.
async fn past_pending_timeout(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    obj: &Arc<DynamicObject>,
    finalizer_name: &str,
    e: ReconcileError,
) -> Result<Action, ReconcileError> {
    let Some((bound, give_up)) = ctx.definition.finalizer_pending_timeout else {
        return Err(e);
    };
    let waited = obj
        .meta()
        .deletion_timestamp
        .as_ref()
        .and_then(|t| {
            let since = jiff::Timestamp::now().duration_since(t.0);
            Duration::try_from(since).ok()
        })
        .unwrap_or_default();
    if waited <= bound {
        return Err(e);
    }
    let retry = match &e {
        ReconcileError::FinalizerPending(after) => *after,
        _ => Duration::from_secs(5),
    };
    let why = crate::worker_text::bound_owned(e.to_string(), crate::worker_text::MESSAGE_BYTES);
    if !give_up {
        return Err(ReconcileError::FinalizerStuck {
            waited,
            bound,
            why,
            retry,
        });
    }
    tracing::warn!(
        ?waited,
        ?bound,
        "finalizer worker given up: removing the finalizer"
    );
    finalizer::remove(api, obj, finalizer_name).await?;
    let reference = obj.object_ref(&ctx.resource.api);
    status::publish_event(
        &ctx.recorder,
        &reference,
        true,
        "FinalizerAbandoned",
        "Finalize",
        format!(
            "the finalizer worker had not finished {}s after the deletion began (spec.finalizer.pendingTimeout {bound:?}, onPendingTimeout: giveUp): finalizer removed without it; last: {why}",
            waited.as_secs()
        ),
    )
    .await;
    Ok(Action::await_change())
}

/// The controller's error policy: the worker's own delay for a pending finalizer, else backoff.
pub fn error_policy(
    obj: Arc<DynamicObject>,
    err: &ReconcileError,
    ctx: Arc<OperatorContext>,
) -> Action {
    match err {
        ReconcileError::FinalizerPending(after) => Action::requeue(*after),
        ReconcileError::FinalizerStuck { retry, .. } => Action::requeue(*retry),
        // Asked again once the answer may have changed.
        ReconcileError::NotGranted(_) => Action::requeue(GRANTS_RECHECK),
        // Not a failure of the resource: the watch will bring the new object shortly.
        ReconcileError::StatusConflict | ReconcileError::StaleDecision => {
            Action::requeue(Duration::from_secs(1))
        }
        _ => {
            let delay = ctx.backoff.next_delay(&OperatorContext::key(&obj));
            tracing::debug!(resource = %OperatorContext::key(&obj), ?delay, "retrying after backoff");
            Action::requeue(delay)
        }
    }
}

async fn run_phase(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    obj: Arc<DynamicObject>,
    read: Read,
    effects: &mut Effects,
) -> Result<Action, ReconcileError> {
    let def = &ctx.definition;
    let now = now_rfc3339();
    let current = step::current_phase(def, &obj).to_string();
    tracing::Span::current().record("phase", current.as_str());
    let generation = obj.metadata.generation;
    let phase = match step::standing(def, &obj, &now)? {
        Standing::Runs(phase) => phase,
        Standing::Final(_) => return Ok(Action::await_change()),
        Standing::Restart { update, .. } => {
            tracing::info!(from = %current, to = %def.initial_phase, "spec changed after a final phase: starting again");
            effects.next = write_status(api, &obj, &update, true, &ctx.own_writes)
                .await?
                .map(Arc::new);
            return Ok(Action::await_change());
        }
    };
    let module = ctx
        .workers
        .get(&current)
        .ok_or_else(|| ReconcileError::UnknownPhase {
            phase: current.clone(),
            operator: def.name.clone(),
            declared: step::phase_names(def),
        })?;
    wait_for_inputs(ctx, &phase.inputs).await?;
    // The takeover check and pruning read the output caches: not before their first list.
    wait_for_outputs(ctx, &phase.outputs).await?;
    let samples = Samples::Query {
        prometheus: &ctx.metrics_source.client,
        fallback_url: ctx.metrics_source.default_url.as_deref(),
    };
    // The request (every selected input, copied) is built once a worker slot is held, so
    // calls waiting for one hold no request.
    let slot = ctx
        .sandbox
        .slot(&def.name)
        .await
        .map_err(|source| ReconcileError::Worker {
            phase: current.clone(),
            digest: module.digest.clone(),
            source,
        })?;
    let request = step::request(def, phase, &obj, &ctx.inputs, samples, &now).await?;
    let kept_request =
        crate::controller::live_evidence::wanted(ctx, &current).then(|| request.clone());
    let input = DecisionInput {
        definition: def,
        phase,
        module,
        resource: &obj,
        request,
        namespaced: &ctx.namespaced,
        slot: Some(slot),
    };
    let started = Instant::now();
    let decided = decision::decide(&ctx.sandbox, input, |elapsed, error| {
        record_worker_call(&def.name, &current, elapsed, error)
    })
    .await;
    if let Some(request) = kept_request {
        effects.live = Some(LiveCall {
            request,
            result: RecordedResult::of(&decided),
            module: module.digest.clone(),
            duration: started.elapsed(),
        });
    }
    let mut decision = decided?;
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let namespace = obj.namespace();
    let mut checked = std::mem::take(&mut decision.outputs);
    // Outputs naming someone else's object are not applied (the others are) and reported.
    let refused = outputs::refused_takeovers(&checked, &uid, &ctx.outputs);
    let total = checked.len();
    let keep: BTreeSet<ObjectKey> = checked.iter().map(CheckedOutput::key).collect();
    let mut failures: Vec<OutputError> = Vec::new();
    for (index, e) in refused.into_iter().rev() {
        checked.remove(index);
        failures.insert(0, e);
    }
    let owned = outputs::Owned {
        operator: &def.name,
        phase,
        owner_uid: &uid,
        namespace: namespace.as_deref(),
    };
    let prunable = outputs::prunable(&owned, &ctx.outputs, &keep);
    if read == Read::FromCache && (!checked.is_empty() || !prunable.is_empty()) {
        // Nothing is written from a decision about an object that has changed since.
        ensure_unchanged(api, &obj).await?;
    }
    let report = outputs::apply_outputs(
        &ctx.as_operator,
        &def.name,
        &current,
        &uid,
        &ctx.kinds,
        checked,
    )
    .await;
    let applied = report.applied;
    // Read your own writes: the next decision on this resource (the phase chained below, or
    // the reconcile the status write brings) reads its owned inputs from these caches.
    for (kind, object) in &report.written {
        ctx.inputs.wrote(kind, object);
        ctx.outputs.wrote(kind, object);
    }
    failures.extend(report.failed);
    if !report.converged.is_empty() {
        let reference = obj.object_ref(&ctx.resource.api);
        for (object, how) in &report.converged {
            report_convergence(ctx, &reference, object, how).await;
        }
    }
    let gone = |kind: &KindRef, m: &kube::api::ObjectMeta| {
        let name = m.name.as_deref().unwrap_or_default();
        ctx.inputs.deleted(kind, m.namespace.as_deref(), name);
        ctx.outputs.deleted(kind, m.namespace.as_deref(), name);
    };
    let pruned = match outputs::prune_outputs(&ctx.as_operator, &ctx.kinds, prunable, gone).await {
        Ok(pruned) => pruned,
        Err((pruned, e)) => {
            failures.push(e);
            pruned
        }
    };
    if pruned > 0 {
        tracing::info!(pruned, "deleted outputs the worker no longer returns");
    }
    if !failures.is_empty() {
        return Err(ReconcileError::Apply {
            phase: current.clone(),
            applied,
            total,
            failures,
        });
    }

    let update = decision.status_update(
        generation,
        applied,
        pruned,
        &now_rfc3339(),
        def.history_limit,
    );
    let next = decision.next_phase;
    let input_hash = decision.input_hash.to_prefixed_hex();
    let written = write_status(api, &obj, &update, true, &ctx.own_writes).await?;
    let wrote = written.is_some();
    if next != current {
        effects.next = written.map(Arc::new);
        tracing::info!(from = %current, to = %next, outputs = applied, pruned, "phase changed");
        let reference = obj.object_ref(&ctx.resource.api);
        status::publish_event(
            &ctx.recorder,
            &reference,
            false,
            "PhaseChanged",
            // The action names the transition (e.g. `ReadyToSyncing`): the event recorder folds
            // repeats of the same (reason, action) into one series, and each kind of transition
            // should stay visible.
            &format!("{current}To{next}"),
            format!(
                "{current} → {next} ({applied} outputs applied, {pruned} pruned, module {}, input {})",
                short(&module.digest),
                short(&input_hash)
            ),
        )
        .await;
    } else if wrote {
        tracing::debug!(phase = %current, "status updated");
    }
    Ok(match decision.requeue_after_ms {
        Some(ms) => Action::requeue(decision::requeue_after(ms)),
        None => Action::requeue(def.resync),
    })
}

async fn run_finalizer(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    obj: Arc<DynamicObject>,
) -> Result<Action, ReconcileError> {
    let Some(module) = &ctx.finalizer else {
        return Ok(Action::await_change());
    };
    tracing::Span::current().record("phase", "finalizer");
    wait_for_inputs(ctx, &ctx.definition.finalizer_inputs).await?;
    let decided = crate::pipeline::finalize::decide(
        &ctx.sandbox,
        &ctx.definition,
        module,
        &obj,
        &ctx.inputs,
        now_rfc3339(),
    )
    .await?;
    if decided.status_info.is_some() {
        let update = StatusUpdate {
            status_info: decided.status_info,
            ..Default::default()
        };
        write_status(api, &obj, &update, false, &ctx.own_writes).await?;
    }
    if decided.done {
        tracing::info!("finalizer worker done; releasing the resource");
        let reference = obj.object_ref(&ctx.resource.api);
        status::publish_event(
            &ctx.recorder,
            &reference,
            false,
            "Finalized",
            "Finalize",
            format!("finalizer worker done (module {})", short(&module.digest)),
        )
        .await;
        Ok(Action::await_change())
    } else {
        Err(ReconcileError::FinalizerPending(decided.requeue_after))
    }
}

/// An output that server-side apply alone could not converge, and what the host did instead:
/// a log line and an Event on the resource naming the object and the field managers overridden.
async fn report_convergence(
    ctx: &OperatorContext,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    object: &str,
    how: &outputs::Convergence,
) {
    let (reason, note) = match how {
        outputs::Convergence::Applied => return,
        outputs::Convergence::Replaced { lists, managers } => (
            "OutputReplaced",
            format!(
                "{object}: replaced {} holding entries of field manager(s) {} with the worker's, then applied",
                lists.join(", "),
                managers.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ),
        outputs::Convergence::Recreated { reason } => (
            "OutputRecreated",
            format!("{object}: deleted and created again from the worker's decision ({reason})"),
        ),
    };
    tracing::info!(reason, "{note}");
    status::publish_event(&ctx.recorder, reference, false, reason, "Apply", note).await;
}

/// Worker call duration, and limit kills, for `/metrics`.
fn record_worker_call(operator: &str, phase: &str, elapsed: Duration, error: Option<&RunError>) {
    let m = &crate::metrics::METRICS;
    let labels = crate::metrics::PhaseLabels {
        operator: operator.to_string(),
        phase: phase.to_string(),
    };
    m.worker_duration
        .get_or_create(&labels)
        .observe(elapsed.as_secs_f64());
    let limit = match error {
        Some(RunError::DeadlineExceeded(_)) => "deadline",
        Some(RunError::MemoryLimit { .. }) => "memory",
        _ => return,
    };
    m.limit_kills
        .get_or_create(&crate::metrics::LimitLabels {
            operator: labels.operator,
            phase: labels.phase,
            limit: limit.into(),
        })
        .inc();
}

/// Reports an error on the resource; fatal ones wait for a change, the rest go to backoff.
async fn report_error(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    err: ReconcileError,
) -> Result<Action, ReconcileError> {
    let fatal = err.is_fatal();
    if err.is_reportable() {
        tracing::warn!(error = %err, fatal, "reconcile failed");
        let update = StatusUpdate {
            condition: Some(ConditionUpdate {
                type_: SYNCED,
                status: false,
                reason: err.reason().into(),
                message: err.to_string(),
            }),
            ..Default::default()
        };
        // Only a still-existing object can carry a condition; a failure here is logged.
        if obj.meta().deletion_timestamp.is_none() || ctx.finalizer.is_some() {
            if let Err(e) = write_status(api, obj, &update, false, &ctx.own_writes).await {
                tracing::warn!(error = %e, "could not record the failure in the status");
            }
        }
        let reference = obj.object_ref(&ctx.resource.api);
        // A refusal for the operator's grants is reported by the host: the operator's account
        // may not be able to create Events where it is not granted.
        let recorder = match err {
            ReconcileError::NotGranted(_) | ReconcileError::GrantCheck(_) => &ctx.host_recorder,
            _ => &ctx.recorder,
        };
        status::publish_event(
            recorder,
            &reference,
            true,
            err.reason(),
            "Reconcile",
            err.to_string(),
        )
        .await;
    } else {
        tracing::debug!(error = %err, "reconcile deferred");
    }
    if fatal {
        Ok(Action::requeue(ctx.definition.resync))
    } else {
        Err(err)
    }
}

/// Writes a status update if it changes anything; returns the resource as written, if it wrote.
/// The write is remembered in `own`, so its watch event does not reconcile the resource again.
pub(crate) async fn write_status(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    update: &StatusUpdate,
    conditional: bool,
    own: &OwnWrites,
) -> Result<Option<DynamicObject>, ReconcileError> {
    let Some(patch) = status::status_patch(obj.data.get("status"), update, &now_rfc3339()) else {
        return Ok(None);
    };
    let rv = if conditional {
        obj.metadata.resource_version.as_deref()
    } else {
        None
    };
    let uid = obj.metadata.uid.as_deref();
    own.begin(uid);
    let written = status::patch_status(api, &obj.name_any(), rv, patch).await;
    own.finish(uid, written.as_ref().ok());
    match written {
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(ReconcileError::StatusConflict),
        Err(source) => Err(ReconcileError::Api {
            action: "patching the status",
            source,
        }),
    }
}

/// Fails with [`ReconcileError::StaleDecision`] when the resource on the API server is not the
/// version the decision was made from (the watch cache lagged behind a change): its outputs
/// would be applied from an outdated spec or phase. The caller decides again from a fresh read.
/// (Between this read and the writes a change can still land; the status write is conditional
/// on the same resourceVersion, and the next reconcile converges the outputs.)
async fn ensure_unchanged(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<(), ReconcileError> {
    let fresh = api
        .get_metadata_opt(&obj.name_any())
        .await
        .map_err(|source| ReconcileError::Api {
            action: "reading the resource before applying its outputs",
            source,
        })?;
    match fresh {
        Some(m) if m.metadata.resource_version == obj.metadata.resource_version => Ok(()),
        _ => Err(ReconcileError::StaleDecision),
    }
}

async fn wait_for_inputs(
    ctx: &OperatorContext,
    inputs: &[InputSpec],
) -> Result<(), ReconcileError> {
    for informer in inputs.iter().filter_map(|i| ctx.inputs.informer(i)) {
        synced(informer).await?;
    }
    Ok(())
}

async fn wait_for_outputs(ctx: &OperatorContext, kinds: &[KindRef]) -> Result<(), ReconcileError> {
    for informer in kinds.iter().filter_map(|k| ctx.outputs.0.get(k)) {
        synced(informer).await?;
    }
    Ok(())
}

/// Waits (bounded) for an informer's first complete list.
async fn synced<T: crate::controller::informers::Cached>(
    informer: &crate::controller::informers::Informer<T>,
) -> Result<(), ReconcileError> {
    match tokio::time::timeout(INPUTS_SYNC_TIMEOUT, informer.wait_until_ready()).await {
        Ok(true) => Ok(()),
        _ => Err(ReconcileError::InputsNotSynced(informer.kind.to_string())),
    }
}

/// `sha256:0123456789ab` — enough to tell modules apart in messages.
fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_info_must_be_an_object() {
        assert!(decision::parse_status_info("P", None).unwrap().is_none());
        assert!(decision::parse_status_info("P", Some("null"))
            .unwrap()
            .is_none());
        assert_eq!(
            decision::parse_status_info("P", Some(r#"{"a":1}"#))
                .unwrap()
                .unwrap()["a"],
            1
        );
        let e = decision::parse_status_info("P", Some("[1]")).unwrap_err();
        assert!(
            e.to_string().contains("not a JSON object: got an array"),
            "{e}"
        );
        assert!(e.is_fatal());
    }

    fn written(rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            "metadata": {"name": "r", "uid": "u1", "resourceVersion": rv}
        }))
        .expect("an object")
    }

    /// The watch event of a write still in flight waits for its answer; the event of the
    /// version written is the host's own (once), any other version is news.
    #[tokio::test]
    async fn own_status_writes_are_told_from_other_changes() {
        let own = Arc::new(OwnWrites::default());
        let some = |s: &str| Some(s.to_string());
        own.begin(Some("u1"));
        let waiting = {
            let own = own.clone();
            tokio::spawn(async move { own.is_own(some("u1"), some("5")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "waits while the write is in flight");
        own.finish(Some("u1"), Some(&written("5")));
        assert!(
            waiting.await.expect("the waiting event"),
            "the write's own event"
        );
        assert!(!own.is_own(some("u1"), some("5")).await, "told once");
        own.begin(Some("u1"));
        own.finish(Some("u1"), Some(&written("7")));
        assert!(
            !own.is_own(some("u1"), some("6")).await,
            "another writer's version"
        );
        assert!(!own.is_own(some("u2"), some("7")).await, "another resource");
        own.begin(Some("u1"));
        own.finish(Some("u1"), None);
        assert!(
            !own.is_own(some("u1"), some("7")).await,
            "a failed write wrote nothing"
        );
    }

    #[test]
    fn worker_errors_keep_their_retry_class() {
        let retry = ReconcileError::Worker {
            phase: "S".into(),
            digest: "d".into(),
            source: RunError::Retryable("later".into()),
        };
        assert!(!retry.is_fatal());
        let fatal = ReconcileError::Worker {
            phase: "S".into(),
            digest: "d".into(),
            source: RunError::Fatal("never".into()),
        };
        assert!(fatal.is_fatal());
        assert_eq!(fatal.reason(), "WorkerFatalError");
        let deadline = ReconcileError::Worker {
            phase: "Syncing".into(),
            digest: "d".into(),
            source: RunError::DeadlineExceeded(Duration::from_secs(2)),
        };
        assert_eq!(
            deadline.to_string(),
            "worker for phase Syncing (d): the worker exceeded its 2s deadline"
        );
        assert!(!deadline.is_fatal());
    }
}
