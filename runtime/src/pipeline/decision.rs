//! One worker decision through the host's checks: the phase's component run in the sandbox on
//! the request [`crate::pipeline::request::request`] built (or a recorded one), then the next phase
//! (declared, and allowed from this phase), the status info (a JSON object) and the outputs
//! (declared kinds, named, in the resource's namespace) checked. [`crate::pipeline::step::run`]
//! writes it; replay and the shadow lane only compare it.

use crate::crd::{InputSpec, KindRef};
use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::pipeline::error::ReconcileError;
use crate::pipeline::outputs::{self, CheckedOutput, Owner};
use crate::pipeline::status::{StatusUpdate, Transition};
use crate::redaction::Redactor;
use crate::sandbox::{NamedObjects, PhaseModule, RequestDigest, Sandbox, SyncCall, SyncRequest};
use crate::worker_text::{bounded, NAME_BYTES};
use kube::api::DynamicObject;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One worker decision that passed the host's checks: what a reconcile would apply and record.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The phase that ran.
    pub phase: String,
    pub next_phase: String,
    /// Digest of the component that decided.
    pub module: String,
    /// The worker's status patch (host-owned keys are dropped when it is merged).
    pub status_info: Option<Map<String, Value>>,
    pub requeue_after_ms: Option<u64>,
    /// Outputs with namespace and controller ownerReference set, in the worker's order.
    pub outputs: Vec<CheckedOutput>,
    /// The sha256 of the request the worker saw ([`RequestDigest`]).
    pub input_hash: RequestDigest,
}

impl Decision {
    /// The status write of this decision (the same in the reconcile, `simulate` and `plan`):
    /// next phase, status info, generation, deciding module, `Synced=True` and the kstatus
    /// conditions (`next_ready`: the next phase is final or marked ready); and when the phase
    /// changes, a transition in `.status.history` naming the module and the request's sha256.
    pub fn status_update(
        &self,
        next_ready: bool,
        generation: Option<i64>,
        applied: usize,
        pruned: usize,
        now: &str,
        history_limit: usize,
    ) -> StatusUpdate {
        let update = StatusUpdate::phase_completed(
            &self.next_phase,
            next_ready,
            self.status_info.clone(),
            generation,
            &self.module,
        );
        if self.next_phase == self.phase {
            return update;
        }
        let transition = Transition {
            from: self.phase.clone(),
            to: self.next_phase.clone(),
            time: now.to_string(),
            generation,
            module: Some(self.module.clone()),
            input_hash: Some(self.input_hash.to_prefixed_hex()),
            applied: u32::try_from(applied).unwrap_or(u32::MAX),
            pruned: u32::try_from(pruned).unwrap_or(u32::MAX),
        };
        update.with_transition(transition, history_limit)
    }
}

/// What one decision needs: the phase, its component and the request the worker is handed.
pub struct DecisionInput<'a> {
    pub definition: &'a OperatorDefinition,
    pub phase: &'a PhaseDefinition,
    /// The phase's component, with the phase's call limits.
    pub module: &'a PhaseModule,
    /// The resource the request names (its uid and namespace own the outputs).
    pub resource: &'a DynamicObject,
    /// Exactly what the worker receives ([`crate::pipeline::request::request`], or a recorded one
    /// when replaying).
    pub request: SyncRequest,
    /// Whether each output kind is namespaced (kinds absent are taken as namespaced).
    pub namespaced: &'a HashMap<KindRef, bool>,
    /// The worker slot the caller took before it built the request (`None`: taken here).
    pub slot: Option<crate::sandbox::WorkerSlot>,
}

/// Runs the phase's worker once and checks its decision. Errors are the host's own, so their
/// messages are what the resource's `Synced` condition says.
pub async fn decide(
    sandbox: &Sandbox,
    input: DecisionInput<'_>,
) -> Result<Decision, ReconcileError> {
    let DecisionInput {
        definition: def,
        phase,
        module,
        resource,
        request,
        namespaced,
        slot,
    } = input;
    let current = &phase.name;
    let input_hash = RequestDigest::of_sync(&request);
    // The Secret values the worker is handed stay out of what it says (logs, errors, status).
    let redactor = secrets_handed(&phase.inputs, &request.inputs);
    let started = Instant::now();
    let call = SyncCall {
        slot,
        redactor: redactor.clone(),
    };
    let outcome = sandbox
        .run_sync_digested(module, request, input_hash, call)
        .await;
    let result = outcome.map_err(|source| ReconcileError::Worker {
        phase: current.clone(),
        digest: module.digest.clone(),
        source,
    })?;
    tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, next = %result.next_phase, outputs = result.outputs.len(), "worker decided");

    // The next phase is the worker's text: its Secret values replaced, then bounded, before it
    // reaches a message.
    let next_for_message = || bounded(&redactor.text(&result.next_phase), NAME_BYTES).into_owned();
    if def.phase(&result.next_phase).is_none() {
        return Err(ReconcileError::UnknownNextPhase {
            phase: current.clone(),
            next: next_for_message(),
            declared: def.phase_names(),
        });
    }
    if !phase.allows(&result.next_phase) {
        return Err(ReconcileError::TransitionNotAllowed {
            phase: current.clone(),
            next: next_for_message(),
            allowed: phase.next.join(", "),
        });
    }
    let mut status_info = parse_status_info(current, result.status_info.as_deref())?;
    if let Some(info) = status_info.as_mut() {
        redactor.json_map(info);
    }
    let uid = resource.metadata.uid.clone().unwrap_or_default();
    let name = resource.metadata.name.clone().unwrap_or_default();
    let owner = Owner {
        api_version: &def.resource.api_version,
        kind: &def.resource.kind,
        name: &name,
        uid: &uid,
        namespace: resource.metadata.namespace.as_deref(),
    };
    let outputs = outputs::check(phase, &owner, namespaced, &result.outputs, &redactor).map_err(
        |source| ReconcileError::Outputs {
            phase: current.clone(),
            source: Box::new(source),
        },
    )?;
    Ok(Decision {
        phase: current.clone(),
        next_phase: result.next_phase,
        module: module.digest.clone(),
        status_info,
        // A worker may not put a resource off for longer than the host allows.
        requeue_after_ms: result
            .requeue_after_ms
            .map(|ms| requeue_after(ms).as_millis() as u64),
        outputs,
        input_hash,
    })
}

/// The Secret values among the inputs handed to a worker (`named`) that are declared (`declared`)
/// as `v1 Secret`.
pub(crate) fn secrets_handed(declared: &[InputSpec], named: &[NamedObjects]) -> Redactor {
    let secret_inputs: Vec<&str> = declared
        .iter()
        .filter(|i| i.api_version == "v1" && i.kind == "Secret")
        .map(|i| i.name.as_str())
        .collect();
    if secret_inputs.is_empty() {
        return Redactor::default();
    }
    Redactor::of_objects(
        named
            .iter()
            .filter(|n| secret_inputs.contains(&n.name.as_str()))
            .flat_map(|n| n.objects.iter().map(String::as_str)),
    )
}

/// The longest a worker's `requeue_after` may put a resource off (longer asks are cut to it).
pub const MAX_REQUEUE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The soonest a worker's `requeue_after` may run a resource again (shorter asks, 0 included,
/// are raised to it): with the host's own status writes waking nothing, a worker that changes
/// its status on every call writes at most this often per resource.
pub const MIN_REQUEUE_AFTER: Duration = Duration::from_secs(1);

/// Phase changes one reconcile follows at once, from the object as written, after the first
/// decision; a phase still moving after them goes on [`MIN_REQUEUE_AFTER`] later (so a cycling
/// operator yields its worker).
pub const MAX_CHAINED_PHASES: usize = 4;

/// A worker's requeue-after, within [`MIN_REQUEUE_AFTER`] and [`MAX_REQUEUE_AFTER`].
pub fn requeue_after(ms: u64) -> Duration {
    Duration::from_millis(ms).clamp(MIN_REQUEUE_AFTER, MAX_REQUEUE_AFTER)
}

/// Why the host waits as long as it does before it decides on a resource again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// The worker asked for it ([`requeue_after`]).
    RequeueAfter,
    /// The worker asked for nothing: the operator's `resyncInterval`.
    ResyncInterval,
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitReason::RequeueAfter => "requeue-after",
            WaitReason::ResyncInterval => "resync interval",
        })
    }
}

/// How long the host waits, after a decision that stays in its phase, before it decides on the
/// resource again unless something else changes: the worker's requeue-after or the resync
/// interval. What the decision wrote (status, outputs) does not shorten it: the watch events
/// of the host's own writes wake nothing. (A decision that moves to another phase is followed
/// at once instead, up to [`MAX_CHAINED_PHASES`] times in one reconcile.)
pub fn wait_after_staying(
    requeue_after_ms: Option<u64>,
    resync: Duration,
) -> (Duration, WaitReason) {
    match requeue_after_ms {
        Some(ms) => (requeue_after(ms), WaitReason::RequeueAfter),
        None => (resync, WaitReason::ResyncInterval),
    }
}

/// The worker's status info: a JSON object (or nothing), else the host's error naming the phase.
pub(crate) fn parse_status_info(
    phase: &str,
    raw: Option<&str>,
) -> Result<Option<Map<String, Value>>, ReconcileError> {
    let Some(raw) = raw else { return Ok(None) };
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => Ok(Some(m)),
        Ok(Value::Null) => Ok(None),
        Ok(other) => Err(ReconcileError::BadStatusInfo {
            phase: phase.into(),
            problem: format!("got {}", kind_of(&other)),
        }),
        Err(e) => Err(ReconcileError::BadStatusInfo {
            phase: phase.into(),
            problem: e.to_string(),
        }),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        _ => "something else",
    }
}
