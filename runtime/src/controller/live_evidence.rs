//! The evidence step of a reconcile: its live worker call, kept when the operator records or
//! shadows the phase, handed to the record sink and to the phase's shadow lane afterwards.

use crate::controller::context::OperatorContext;
use crate::evidence::case::CaseSource;
use crate::evidence::record::{LiveCall, PendingRecord};
use kube::api::DynamicObject;
use std::sync::Arc;

/// Whether a reconcile of `phase` must keep its call ([`LiveCall`]) for the evidence step.
pub fn wanted(ctx: &OperatorContext, phase: &str) -> bool {
    ctx.record_sink.is_some() || ctx.shadows.as_ref().is_some_and(|s| s.has(phase))
}

/// After a reconcile (its decision applied and its status written, or its failure handled):
/// hands the call to the record sink and to the phase's shadow, neither of which it waits for.
pub fn after_live_call(ctx: &Arc<OperatorContext>, resource: &Arc<DynamicObject>, call: LiveCall) {
    let shadows = ctx.shadows.as_ref().filter(|s| s.has(&call.request.phase));
    let Some(sink) = &ctx.record_sink else {
        if let Some(shadows) = shadows {
            shadows.enqueue(resource.clone(), call);
        }
        return;
    };
    let record = |call: LiveCall| {
        PendingRecord {
            source: CaseSource::Recorded,
            resource: OperatorContext::key(resource),
            request: call.request,
            module: call.module,
            result: call.result,
            duration: Some(call.duration),
            shadow: None,
            trace_id: call.trace_id,
        }
        .without_secret_data()
    };
    match shadows {
        Some(shadows) => {
            sink.record(record(LiveCall {
                request: call.request.clone(),
                result: call.result.clone(),
                module: call.module.clone(),
                duration: call.duration,
                trace_id: call.trace_id.clone(),
            }));
            shadows.enqueue(resource.clone(), call);
        }
        None => sink.record(record(call)),
    }
}
