//! One reconcile of one resource, top to bottom: grants and finalizer bookkeeping, then one
//! [`crate::pipeline::step::run`] on the cluster ([`ClusterEffects`]), phases chained, a stale
//! read decided again; errors end as a Condition and an Event on the resource, then backoff.

use crate::controller::cluster_effects::{
    short, write_status, write_status_over, ClusterEffects, Read,
};
use crate::controller::context::OperatorContext;
use crate::controller::finalizer;
use crate::controller::grants::{ReconcileRefusal, GRANTS_RECHECK};
use crate::pipeline::decision;
use crate::pipeline::status::{self, ConditionUpdate, StatusUpdate, SYNCED};
use crate::pipeline::step::{self, now_rfc3339, PhaseStep, StepOutcome};
use crate::pipeline::ReconcileError;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The reconcile entry point given to the controller.
pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<OperatorContext>,
) -> Result<Action, ReconcileError> {
    // Sharded: only the replica holding the resource's bucket touches it; the others wait for
    // a change (gaining the bucket reconciles everything this replica watches).
    let _bucket = match &ctx.shard {
        Some(shard) => match shard.enter(&obj) {
            Some(guard) => Some(guard),
            None => {
                crate::metrics::METRICS
                    .reconciles_not_held
                    .get_or_create(&crate::metrics::OperatorLabels {
                        operator: ctx.definition.name.clone(),
                    })
                    .inc();
                return Ok(Action::await_change());
            }
        },
        None => None,
    };
    // The cache may not hold this host's own last status write yet (its watch event is on the
    // way, say when an output's event requeues the resource at once): decide from what was
    // written, not from the version before it.
    let obj = ctx.own_writes.newer_than(&obj).unwrap_or(obj);
    if let Some(left) = _bucket.as_ref().and_then(|b| b.settling) {
        // Gained from another replica just now: its last writes are still reaching this
        // replica's watches (see HANDOVER_SETTLE); decide once they have.
        return Ok(Action::requeue(left));
    }
    if _bucket.as_ref().is_some_and(|b| b.first_after_handover)
        && settled(&obj, &ctx.definition)
        && !inputs_changed_since_written(&ctx, &obj)
    {
        // Handed over settled (its spec decided, a ready phase, synced) and none of its inputs
        // written since: the previous holder did the work; re-running it would apply the same
        // outputs twice. Its periodic resync goes on here, and any change reconciles it at once.
        // An input written after the resource was (while no replica held the bucket, whose
        // watch events only a holder acts on) is decided now.
        return Ok(Action::requeue(ctx.definition.resync));
    }
    let span = tracing::info_span!(
        "reconcile",
        operator = %ctx.definition.name,
        resource = %OperatorContext::key(&obj),
        phase = tracing::field::Empty,
        module = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    // Exported spans: the log lines and the recorded case name the trace.
    if let Some(trace_id) = span.in_scope(crate::trace_export::current_trace_id) {
        span.record("trace_id", trace_id.as_str());
    }
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
        let mut changes = Vec::new();
        let mut decided = decide_fresh(
            &ctx,
            &api,
            Versions::read(obj.clone(), Read::FromCache),
            true,
            &mut changes,
        )
        .await;
        // A phase that moved on is followed at once, from the object as written (or with its
        // status held), rather than after the watch brings it back (bounded, so a cycling
        // operator yields its worker). The last phase of the bound holds nothing.
        for chained in 1..=decision::MAX_CHAINED_PHASES {
            let Ok(Step {
                next: Some(next),
                held,
                ..
            }) = &decided.result
            else {
                break;
            };
            let versions = if *held {
                Versions {
                    decided_on: next.clone(),
                    ..decided.versions.clone()
                }
            } else {
                Versions::read(next.clone(), Read::FromApiServer)
            };
            let may_hold = chained < decision::MAX_CHAINED_PHASES;
            decided = decide_fresh(&ctx, &api, versions, may_hold, &mut changes).await;
        }
        if !changes.is_empty() {
            announce_phase_changes(&ctx, &obj, &changes);
        }
        // The chain's bound reached with the phase still moving: go on after a pause (the
        // status write's own watch event wakes nothing).
        let result = decided.result.map(|s| match s.next {
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
                report_error(&ctx, &api, &decided.versions, e).await
            }
        }
    }
    .instrument(span)
    .await
}

/// What one decision led to: the controller's next action, and the resource as written (or
/// with its status held, `held`) when its phase changed, to be decided on in the same
/// reconcile.
struct Step {
    action: Action,
    next: Option<Arc<DynamicObject>>,
    held: bool,
}

/// The resource a decision is made from and the version the API server has: the same object,
/// unless status updates of phases before are held in memory (see
/// [`crate::pipeline::effects::StatusWrite::holdable`]), then `decided_on` carries them.
#[derive(Clone)]
struct Versions {
    decided_on: Arc<DynamicObject>,
    on_server: Arc<DynamicObject>,
    /// Where `on_server` came from.
    read: Read,
}

impl Versions {
    /// `obj` as read, nothing held.
    fn read(obj: Arc<DynamicObject>, read: Read) -> Self {
        Versions {
            decided_on: obj.clone(),
            on_server: obj,
            read,
        }
    }
}

/// A decision's outcome and the versions it was made from (a fresh read's, when the first
/// attempt was stale): a failure is reported on them, with what is held.
struct Decided {
    result: Result<Step, ReconcileError>,
    versions: Versions,
}

/// A phase change one reconcile made, for its one PhaseChanged Event.
struct PhaseChange {
    from: String,
    to: String,
    applied: usize,
    pruned: usize,
    module: String,
    input: String,
    /// Its status update was held, not yet written.
    held: bool,
}

/// One decision ([`decide_recorded`]); when the cached object turns out stale (its status write
/// or outputs refused), decided once more at once from the object as the API server has it,
/// instead of waiting for the watch (what was held is decided again from there).
async fn decide_fresh(
    ctx: &Arc<OperatorContext>,
    api: &Api<DynamicObject>,
    versions: Versions,
    may_hold: bool,
    changes: &mut Vec<PhaseChange>,
) -> Decided {
    let result = decide_recorded(ctx, api, &versions, may_hold, changes).await;
    match result {
        Err(stale @ (ReconcileError::StatusConflict | ReconcileError::StaleDecision)) => {
            match api.get_opt(&versions.on_server.name_any()).await {
                Ok(Some(fresh)) => {
                    tracing::info!("{stale}");
                    // What was held is decided again from the fresh version.
                    while changes.last().is_some_and(|c| c.held) {
                        changes.pop();
                    }
                    let versions = Versions::read(Arc::new(fresh), Read::FromApiServer);
                    let result = decide_recorded(ctx, api, &versions, may_hold, changes).await;
                    Decided { result, versions }
                }
                Ok(None) => Decided {
                    result: Ok(Step {
                        action: Action::await_change(),
                        next: None,
                        held: false,
                    }),
                    versions,
                },
                Err(_) => Decided {
                    result: Err(stale),
                    versions,
                },
            }
        }
        result => Decided { result, versions },
    }
}

/// One decision on `versions`, its worker call handed to the evidence step.
async fn decide_recorded(
    ctx: &Arc<OperatorContext>,
    api: &Api<DynamicObject>,
    versions: &Versions,
    may_hold: bool,
    changes: &mut Vec<PhaseChange>,
) -> Result<Step, ReconcileError> {
    let mut after = Aftermath {
        may_hold,
        ..Default::default()
    };
    let result = decide(ctx, api, versions, &mut after).await;
    if let Some(call) = after.live.take() {
        crate::controller::live_evidence::after_live_call(ctx, &versions.decided_on, call);
    }
    changes.extend(after.change);
    result.map(|action| Step {
        action,
        next: after.next,
        held: after.held,
    })
}

/// What a decision leaves besides its action: the worker call for the evidence step, the
/// resource as written (or held) when its phase changed, and the change.
#[derive(Default)]
struct Aftermath {
    /// Whether the decision's status update may be held (in).
    may_hold: bool,
    live: Option<crate::evidence::record::LiveCall>,
    next: Option<Arc<DynamicObject>>,
    held: bool,
    change: Option<PhaseChange>,
}

/// One PhaseChanged Event for the phase changes of one reconcile (`Initializing → Syncing →
/// Ready`), sent off the reconcile's path. Its action names the first change (the recorder
/// folds repeats of one (reason, action) into a series, and each kind of transition should stay
/// visible).
fn announce_phase_changes(ctx: &OperatorContext, obj: &DynamicObject, changes: &[PhaseChange]) {
    let Some(first) = changes.first() else {
        return;
    };
    let mut path = first.from.clone();
    for c in changes {
        path.push_str(" → ");
        path.push_str(&c.to);
    }
    let applied: usize = changes.iter().map(|c| c.applied).sum();
    let pruned: usize = changes.iter().map(|c| c.pruned).sum();
    let modules: Vec<&str> = changes.iter().map(|c| short(&c.module)).collect();
    let inputs: Vec<&str> = changes.iter().map(|c| short(&c.input)).collect();
    let note = format!(
        "{path} ({applied} output{} applied, {pruned} pruned; module {}, input {})",
        if applied == 1 { "" } else { "s" },
        modules.join(", "),
        inputs.join(", ")
    );
    let action = format!("{}To{}", first.from, first.to);
    let recorder = ctx.recorder.clone();
    let reference = obj.object_ref(&ctx.resource.api);
    tokio::spawn(async move {
        status::publish_event(&recorder, &reference, false, "PhaseChanged", &action, note).await;
    });
}

/// Finalizer bookkeeping, then the phase worker (or the finalizer worker on deletion). The
/// phase worker's call is left in `effects` when the evidence step wants it, and the resource
/// as written when its phase changed.
async fn decide(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    versions: &Versions,
    after: &mut Aftermath,
) -> Result<Action, ReconcileError> {
    let obj = versions.decided_on.clone();
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
            return run_phase(ctx, api, versions, after).await;
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
        run_phase(ctx, api, versions, after).await
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

/// The phase step on the cluster ([`step::run`] with [`ClusterEffects`]), then what the
/// controller adds: the phase change (for the reconcile's Event), and when to look at the
/// resource again.
async fn run_phase(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    versions: &Versions,
    after: &mut Aftermath,
) -> Result<Action, ReconcileError> {
    let def = &ctx.definition;
    let obj = &versions.decided_on;
    let now = now_rfc3339();
    let current = step::current_phase(def, obj).to_string();
    // The status may hold any text (whoever may write it wrote it): bounded in the log.
    tracing::Span::current().record(
        "phase",
        crate::worker_text::bounded(&current, crate::worker_text::NAME_BYTES).as_ref(),
    );
    let mut effects = ClusterEffects {
        ctx,
        api,
        resource: obj,
        on_server: &versions.on_server,
        read: versions.read,
        may_hold: after.may_hold,
        held: false,
        live: None,
    };
    let phase_step = PhaseStep {
        definition: def,
        resource: obj,
        now: &now,
        sandbox: &ctx.sandbox,
        namespaced: &ctx.namespaced,
    };
    let outcome = step::run(phase_step, &mut effects).await;
    after.live = effects.live.take();
    after.held = effects.held;
    let decided = match outcome? {
        StepOutcome::Final => return Ok(Action::await_change()),
        StepOutcome::Restarted { written } => {
            tracing::info!(from = %current, to = %def.initial_phase, "spec changed after a final phase: starting again");
            after.next = written.map(|w| Arc::new(*w));
            return Ok(Action::await_change());
        }
        StepOutcome::Decided(decided) => decided,
    };
    let decision = &decided.decision;
    let (applied, pruned) = (decided.applied, decided.pruned);
    let next = &decision.next_phase;
    if *next != current {
        tracing::info!(from = %current, to = %next, outputs = applied, pruned, held = after.held, "phase changed");
        after.change = Some(PhaseChange {
            from: current.clone(),
            to: next.clone(),
            applied,
            pruned,
            module: decision.module.clone(),
            input: decision.input_hash.to_prefixed_hex(),
            held: after.held,
        });
        after.next = decided.written.map(Arc::new);
    } else if decided.written.is_some() {
        tracing::debug!(phase = %current, "status updated");
    }
    Ok(Action::requeue(
        decision::wait_after_staying(decision.requeue_after_ms, def.resync).0,
    ))
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
    ctx.inputs_synced(
        &ctx.definition.finalizer_inputs,
        obj.metadata.namespace.as_deref(),
    )
    .await?;
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
        write_status(api, &obj, &update, &now_rfc3339(), false, &ctx.own_writes).await?;
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

/// Reports an error on the resource; fatal ones wait for a change, the rest go to backoff.
async fn report_error(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    versions: &Versions,
    err: ReconcileError,
) -> Result<Action, ReconcileError> {
    let obj = &*versions.decided_on;
    let fatal = err.is_fatal();
    if err.is_reportable() {
        tracing::warn!(error = %err, fatal, "reconcile failed");
        // kstatus: Stalled when the resource cannot go on by itself (a fatal error, an output
        // refused for being someone else's, a missing grant), else Reconciling (retried).
        let stalled = fatal || matches!(err.reason(), "OutputRefused" | "NotGranted");
        let message = err.to_string();
        let phase = step::current_phase(&ctx.definition, obj).to_string();
        let mut conditions = vec![ConditionUpdate::new(
            SYNCED,
            false,
            err.reason(),
            message.clone(),
        )];
        conditions.extend(status::failure_conditions(
            &phase,
            err.reason(),
            &message,
            stalled,
        ));
        let update = StatusUpdate {
            conditions,
            condition_generation: obj.metadata.generation,
            ..Default::default()
        };
        // Only a still-existing object can carry a condition; a failure here is logged.
        if obj.meta().deletion_timestamp.is_none() || ctx.finalizer.is_some() {
            // With what was held (a phase moved to before this failure): the status says
            // which phase failed.
            let written = write_status_over(
                api,
                obj,
                &versions.on_server,
                &update,
                &now_rfc3339(),
                false,
                &ctx.own_writes,
            )
            .await;
            if let Err(e) = written {
                tracing::warn!(error = %crate::error_report::Brief(&e), "could not record the failure in the status");
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

/// Whether an input the resource's current phase reads (from the caches, synced for a bucket
/// before it opens) was written — or one of its kind in the resource's namespace deleted —
/// after the resource itself: its last decision may predate it.
fn inputs_changed_since_written(ctx: &OperatorContext, obj: &DynamicObject) -> bool {
    let phase = obj
        .data
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .and_then(|p| ctx.definition.phases.iter().find(|d| d.name == p));
    let Some(phase) = phase else {
        return true;
    };
    let written = obj.metadata.resource_version.as_deref();
    if crate::pipeline::inputs::selected_changed_after(
        &phase.inputs,
        crate::pipeline::inputs::Reader::of(obj),
        &ctx.inputs,
        written,
    ) {
        return true;
    }
    // One deleted meanwhile leaves nothing newer to compare: the watches' deletion logs.
    let Some(written) = written.and_then(|v| v.parse::<u64>().ok()) else {
        return true;
    };
    let namespace = obj.metadata.namespace.as_deref();
    phase.inputs.iter().any(|input| {
        ctx.inputs
            .informer(input)
            .is_none_or(|informer| informer.deleted_after(namespace, written))
    })
}

/// A resource whose current spec has been decided and applied: its observedGeneration is its
/// generation, it is in a final or ready phase, `Synced=True`, and it is not being deleted.
fn settled(obj: &DynamicObject, definition: &crate::definition::OperatorDefinition) -> bool {
    let status = obj.data.get("status");
    let observed = status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    let phase = status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .and_then(|p| definition.phases.iter().find(|d| d.name == p));
    let synced = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.get("type") == Some(&Value::from(SYNCED))
                    && c.get("status") == Some(&Value::from("True"))
            })
        });
    obj.metadata.deletion_timestamp.is_none()
        && observed.is_some()
        && observed == obj.metadata.generation
        && phase.is_some_and(|p| p.is_final || p.ready)
        && synced
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::RunError;

    #[test]
    fn settled_means_decided_ready_synced_and_not_being_deleted() {
        let spec: crate::crd::WasmOperatorSpec = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "examples.io/v1", "kind": "Widget"},
            "phases": [
                {"name": "Syncing", "initial": true, "module": {"file": {"path": "s.wasm"}}},
                {"name": "Steady", "ready": true, "module": {"file": {"path": "r.wasm"}}},
                {"name": "Done", "final": true},
            ],
        }))
        .expect("a spec");
        let def =
            crate::definition::OperatorDefinition::validate("settled-test", &spec).expect("valid");
        let widget = |phase: &str, observed: i64, synced: &str, deleting: bool| {
            let mut v = serde_json::json!({"apiVersion": "examples.io/v1", "kind": "Widget",
                "metadata": {"name": "w", "namespace": "team-a", "generation": 2},
                "status": {"phase": phase, "observedGeneration": observed,
                    "conditions": [{"type": "Synced", "status": synced}]}});
            if deleting {
                v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
                v["metadata"]["finalizers"] = serde_json::json!(["x"]);
            }
            serde_json::from_value::<DynamicObject>(v).expect("an object")
        };
        assert!(settled(&widget("Steady", 2, "True", false), &def));
        assert!(settled(&widget("Done", 2, "True", false), &def));
        assert!(
            !settled(&widget("Steady", 1, "True", false), &def),
            "a newer spec is undecided"
        );
        assert!(
            !settled(&widget("Syncing", 2, "True", false), &def),
            "moving between phases"
        );
        assert!(
            !settled(&widget("Steady", 2, "False", false), &def),
            "retrying"
        );
        assert!(
            !settled(&widget("Steady", 2, "True", true), &def),
            "being deleted"
        );
        assert!(
            !settled(&widget("Gone", 2, "True", false), &def),
            "a phase not declared"
        );
        let bare: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "examples.io/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team-a", "generation": 1}}))
        .expect("an object");
        assert!(!settled(&bare, &def), "never decided");
    }

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
