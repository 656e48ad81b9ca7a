//! The request a phase's worker is handed, built once for every caller: the resource as workers
//! see it, each declared input selected, each metric query's samples, and the host's clock.

use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::pipeline::error::ReconcileError;
use crate::pipeline::inputs::{self, ObjectSource};
use crate::promql::{Endpoint, Prometheus};
use crate::sandbox::{NamedObjects, SyncRequest};
use kube::api::DynamicObject;
use serde_json::Value;

/// The host's clock as workers get it: RFC 3339, UTC, whole seconds.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

/// Where a phase's metric samples come from.
pub enum Samples<'a> {
    /// Its queries, run now against the WasmOperator's Prometheus, else `fallback_url` (the
    /// controller's `--prometheus-url`, `plan`'s and `capture`'s too).
    Query {
        prometheus: &'a Prometheus,
        fallback_url: Option<&'a str>,
    },
    /// Given by query name (`simulate --samples`); a query given none gets no samples.
    Given(Vec<NamedObjects>),
}

/// The request `phase`'s worker is handed for `resource`: the resource as workers see it
/// ([`inputs::to_worker_json`]), each declared input selected from `source` (an invalid selector
/// is [`ReconcileError::InvalidSelector`]), then each metric query's samples, and the clock.
pub async fn request(
    def: &OperatorDefinition,
    phase: &PhaseDefinition,
    resource: &DynamicObject,
    source: &impl ObjectSource,
    samples: Samples<'_>,
    now: &str,
) -> Result<SyncRequest, ReconcileError> {
    let resource_json = inputs::to_worker_json(resource, &def.resource);
    let mut phase_inputs = inputs::gather(&phase.inputs, inputs::Reader::of(resource), source)
        .map_err(ReconcileError::invalid_selector(&phase.name))?;
    if !phase.queries.is_empty() {
        match samples {
            Samples::Query {
                prometheus,
                fallback_url,
            } => {
                let endpoint = match &def.prometheus {
                    Some((url, timeout)) => Some(Endpoint {
                        url,
                        timeout: *timeout,
                        operator_chosen: true,
                    }),
                    None => fallback_url.map(|url| Endpoint {
                        url,
                        timeout: crate::promql::DEFAULT_TIMEOUT,
                        operator_chosen: false,
                    }),
                };
                let as_value: Value = serde_json::from_str(&resource_json).unwrap_or(Value::Null);
                let queried = prometheus
                    .run(&phase.queries, &as_value, endpoint, now)
                    .await
                    .map_err(|source| ReconcileError::Query {
                        phase: phase.name.clone(),
                        source,
                    })?;
                phase_inputs.extend(queried);
            }
            Samples::Given(mut given) => {
                for query in &phase.queries {
                    let objects = given
                        .iter_mut()
                        .find(|g| g.name == query.name)
                        .map(|g| std::mem::take(&mut g.objects))
                        .unwrap_or_default();
                    phase_inputs.push(NamedObjects {
                        name: query.name.clone(),
                        objects,
                    });
                }
            }
        }
    }
    Ok(SyncRequest {
        operator: def.name.clone(),
        phase: phase.name.clone(),
        resource: resource_json,
        inputs: phase_inputs,
        now: now.to_string(),
    })
}
