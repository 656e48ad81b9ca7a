//! One phase step, written once for the controller and the offline commands: where the resource
//! stands (its phase, the final-phase restart rule), the request its worker is handed
//! ([`crate::pipeline::request`]), the decision, then [`run`]'s takeover refusal, apply, prune
//! and status write through [`Effects`] (cluster, dry run or in-memory world).

use crate::crd::KindRef;
use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::pipeline::decision::{self, Decision, DecisionInput};
use crate::pipeline::effects::{Effects, PhaseReads, StatusWrite, WorkerCall, WorkerReads};
use crate::pipeline::error::ReconcileError;
use crate::pipeline::outputs::{self, CheckedOutput, ObjectKey, Owned};
pub use crate::pipeline::request::{now_rfc3339, request, Samples};
use crate::pipeline::status::StatusUpdate;
use crate::sandbox::Sandbox;
use kube::api::DynamicObject;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;
use tracing::Instrument;

/// The phase a resource is in, as the host reads it: `.status.phase`, else the initial phase.
pub fn current_phase<'a>(def: &'a OperatorDefinition, resource: &'a DynamicObject) -> &'a str {
    resource.data["status"]["phase"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or(&def.initial_phase)
}

/// The phase `name` of `def`, or the host's error for a resource in an undeclared phase.
pub fn declared_phase<'a>(
    def: &'a OperatorDefinition,
    name: &str,
) -> Result<&'a PhaseDefinition, ReconcileError> {
    def.phase(name).ok_or_else(|| ReconcileError::UnknownPhase {
        // Whoever may write the resource's status wrote it: bounded.
        phase: crate::worker_text::bounded(name, crate::worker_text::NAME_BYTES).into_owned(),
        operator: def.name.clone(),
        declared: def.phase_names(),
    })
}

/// Where a resource stands before a step.
#[derive(Debug)]
pub enum Standing<'a> {
    /// In a phase whose worker runs.
    Runs(&'a PhaseDefinition),
    /// In a final phase, its spec unchanged since: no worker runs until the spec changes.
    Final(&'a PhaseDefinition),
    /// In a final phase, but its spec changed since (`metadata.generation` is not the status's
    /// `observedGeneration`): this status write moves it back to the initial phase.
    Restart {
        phase: &'a PhaseDefinition,
        update: Box<StatusUpdate>,
    },
}

/// Where `resource` stands: its declared phase (else [`ReconcileError::UnknownPhase`]) and, for
/// a final phase, whether the spec changed after it, which restarts the resource at the
/// initial phase (the transition is stamped `now`).
pub fn standing<'a>(
    def: &'a OperatorDefinition,
    resource: &DynamicObject,
    now: &str,
) -> Result<Standing<'a>, ReconcileError> {
    let phase = declared_phase(def, current_phase(def, resource))?;
    if !phase.is_final {
        return Ok(Standing::Runs(phase));
    }
    let generation = resource.metadata.generation;
    let observed = resource.data["status"]["observedGeneration"].as_i64();
    if generation.is_none() || observed == generation {
        return Ok(Standing::Final(phase));
    }
    let update = StatusUpdate::restart_after_final(
        &phase.name,
        &def.initial_phase,
        def.phase(&def.initial_phase).is_some_and(|p| p.ready),
        generation,
        now,
        def.history_limit,
    );
    Ok(Standing::Restart {
        phase,
        update: Box::new(update),
    })
}

/// One step of one resource: the operator, the resource as read, and the clock.
#[derive(Clone, Copy)]
pub struct PhaseStep<'a> {
    pub definition: &'a OperatorDefinition,
    pub resource: &'a DynamicObject,
    /// The clock handed to the worker and stamped on the transition.
    pub now: &'a str,
    pub sandbox: &'a Sandbox,
    /// Whether each output kind is namespaced (kinds absent are taken as namespaced).
    pub namespaced: &'a HashMap<KindRef, bool>,
}

/// What a step did.
#[derive(Debug)]
pub enum StepOutcome {
    /// A final phase, its spec unchanged since: no worker ran, nothing was written.
    Final,
    /// A final phase whose spec changed: the status moved back to the initial phase (the
    /// resource as written, if the write changed anything).
    Restarted { written: Option<Box<DynamicObject>> },
    /// The worker decided, and its outputs, prunes and status were written.
    Decided(Box<Decided>),
}

/// A decision and what writing it did.
#[derive(Debug)]
pub struct Decided {
    /// The decision (its outputs were handed to [`Effects::apply`]: empty here).
    pub decision: Decision,
    pub applied: usize,
    pub pruned: usize,
    /// The resource as its status write answered (`None`: the write changed nothing).
    pub written: Option<DynamicObject>,
}

/// Runs one phase step of `step.resource`, from where it stands to its status write: a final
/// phase runs nothing (or restarts, when its spec changed); otherwise the phase's worker decides
/// ([`decide`]), outputs naming an object the resource does not control are refused (the rest
/// are applied), objects the phase applied before and no longer returns are pruned, and — when
/// every output was applied and every prune done — the decision's status is written. Any
/// refusal or failure is [`ReconcileError::Apply`], with the status left as it was.
pub async fn run(
    step: PhaseStep<'_>,
    effects: &mut impl Effects,
) -> Result<StepOutcome, ReconcileError> {
    let def = step.definition;
    let resource = step.resource;
    let phase = match standing(def, resource, step.now)? {
        Standing::Runs(phase) => phase,
        Standing::Final(_) => return Ok(StepOutcome::Final),
        Standing::Restart { update, .. } => {
            let how = StatusWrite {
                conditional: true,
                holdable: def.phase(&def.initial_phase).is_some_and(|p| !p.is_final),
            };
            let written = effects
                .write_status(resource, &update, step.now, how)
                .instrument(status_write_span())
                .await?;
            return Ok(StepOutcome::Restarted {
                written: written.map(Box::new),
            });
        }
    };
    let mut decision = decide(step, phase, effects).await?;
    let uid = resource.metadata.uid.clone().unwrap_or_default();
    let mut checked = std::mem::take(&mut decision.outputs);
    let total = checked.len();
    let keep: BTreeSet<ObjectKey> = checked.iter().map(CheckedOutput::key).collect();
    // Outputs naming someone else's object are not applied (the others are) and reported.
    let mut failures = Vec::new();
    let refused = outputs::refused_takeovers(&checked, &uid, effects.existing());
    for (index, e) in refused.into_iter().rev() {
        checked.remove(index);
        failures.insert(0, e);
    }
    let owned = Owned {
        operator: &def.name,
        phase,
        owner_uid: &uid,
        namespace: resource.metadata.namespace.as_deref(),
    };
    let prunable = outputs::prunable(&owned, effects.existing(), &keep);
    if !checked.is_empty() || !prunable.is_empty() {
        effects.before_writes(resource).await?;
    }
    let report = effects.apply(&phase.name, &uid, checked).await;
    failures.extend(report.failed);
    let pruned = match effects.prune(prunable).await {
        Ok(pruned) => pruned,
        Err((pruned, e)) => {
            failures.push(e);
            pruned
        }
    };
    if !failures.is_empty() {
        return Err(ReconcileError::Apply {
            phase: phase.name.clone(),
            applied: report.applied,
            total,
            failures,
        });
    }
    let next = def.phase(&decision.next_phase);
    let next_ready = next.is_some_and(|p| p.ready);
    let how = StatusWrite {
        conditional: true,
        holdable: total == 0
            && pruned == 0
            && decision.next_phase != phase.name
            && next.is_some_and(|p| !p.is_final),
    };
    let update = decision.status_update(
        next_ready,
        resource.metadata.generation,
        report.applied,
        pruned,
        step.now,
        def.history_limit,
    );
    let written = effects
        .write_status(resource, &update, step.now, how)
        .instrument(status_write_span())
        .await?;
    Ok(StepOutcome::Decided(Box::new(Decided {
        decision,
        applied: report.applied,
        pruned,
        written,
    })))
}

/// A status write's span, for traces only (free unless spans are exported).
fn status_write_span() -> tracing::Span {
    tracing::info_span!(target: crate::trace_export::TRACE_TARGET, "status write")
}

/// The decision of `phase`'s worker on `step.resource`: its component and inputs as `effects`
/// reads them, the request [`request`] builds, the worker run and checked by
/// [`decision::decide`]; `effects` is told of the call ([`Effects::called`]). `run-phase` and
/// `capture` decide through this without writing.
pub async fn decide(
    step: PhaseStep<'_>,
    phase: &PhaseDefinition,
    effects: &mut impl WorkerReads,
) -> Result<Decision, ReconcileError> {
    let keep_request = effects.keeps_request(&phase.name);
    let PhaseReads {
        module,
        source,
        samples,
        slot,
    } = effects.reads(phase).await?;
    let request = request(
        step.definition,
        phase,
        step.resource,
        source,
        samples,
        step.now,
    )
    .await?;
    let kept = keep_request.then(|| request.clone());
    let input = DecisionInput {
        definition: step.definition,
        phase,
        module: &module,
        resource: step.resource,
        request,
        namespaced: step.namespaced,
        slot,
    };
    let started = Instant::now();
    // The reconcile's span names the deciding module; the call has a span for traces only.
    tracing::Span::current().record("module", module.digest.as_str());
    let span = tracing::info_span!(
        target: crate::trace_export::TRACE_TARGET,
        "worker call",
        phase = %phase.name,
        module = %module.digest,
        otel.status_code = tracing::field::Empty,
    );
    let decided = decision::decide(step.sandbox, input)
        .instrument(span.clone())
        .await;
    if decided.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    effects.called(WorkerCall {
        phase: &phase.name,
        module: &module.digest,
        request: kept,
        duration: started.elapsed(),
        decided: &decided,
    });
    decided
}
