//! The finalizer step, the same in the controller and in `wasmpilot run-phase --finalizer`: the
//! finalizer's declared inputs selected for the resource, its component run, its answer checked.

use crate::definition::{OperatorDefinition, FINALIZER_ROLE};
use crate::pipeline::decision::{parse_status_info, requeue_after};
use crate::pipeline::inputs::{self, ObjectSource};
use crate::pipeline::ReconcileError;
use crate::sandbox::{FinalizeRequest, FinalizerModule, Sandbox};
use kube::api::DynamicObject;
use serde_json::{Map, Value};
use std::time::Duration;

/// How long a finalizer that is not done and names no delay waits before it runs again.
pub const DEFAULT_PENDING_DELAY_MS: u64 = 5_000;

/// What the finalizer worker answered, checked.
#[derive(Debug)]
pub struct FinalizeDecision {
    /// The resource may go: the host removes its finalizer.
    pub done: bool,
    /// Not done: when to run the finalizer again (the worker's delay, bounded, or the default).
    pub requeue_after: Duration,
    /// Status info to write on the resource (a JSON object), if the worker returned any.
    pub status_info: Option<Map<String, Value>>,
}

/// Runs `module`, the finalizer of `definition`, for `resource` (being deleted), with the
/// finalizer's declared inputs selected from `source`, at time `now` (RFC 3339).
pub async fn decide(
    sandbox: &Sandbox,
    definition: &OperatorDefinition,
    module: &FinalizerModule,
    resource: &DynamicObject,
    source: &impl ObjectSource,
    now: String,
) -> Result<FinalizeDecision, ReconcileError> {
    let declared = &definition.finalizer_inputs;
    let finalizer_inputs = inputs::gather(declared, inputs::Reader::of(resource), source)
        .map_err(ReconcileError::invalid_selector(FINALIZER_ROLE))?;
    let request = FinalizeRequest {
        operator: definition.name.clone(),
        resource: inputs::to_worker_json(resource, &definition.resource),
        now,
    };
    // The Secret values it is handed stay out of what it says (logs, errors, status).
    let redactor = crate::pipeline::decision::secrets_handed(declared, &finalizer_inputs);
    let result = sandbox
        .run_finalize(module, request, finalizer_inputs, redactor.clone())
        .await
        .map_err(|source| ReconcileError::FinalizerWorker {
            digest: module.digest.clone(),
            source,
        })?;
    let mut status_info = parse_status_info(FINALIZER_ROLE, result.status_info.as_deref())?;
    if let Some(info) = status_info.as_mut() {
        redactor.json_map(info);
    }
    Ok(FinalizeDecision {
        done: result.done,
        requeue_after: requeue_after(result.requeue_after_ms.unwrap_or(DEFAULT_PENDING_DELAY_MS)),
        status_info,
    })
}
