//! The start of one phase step, written once for the controller and the offline commands (`plan`,
//! `simulate`, `run-phase`, `capture`): which phase the resource is in, the final-phase restart
//! rule, and the request its worker is handed (inputs selected, metric samples, the clock).

use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::pipeline::error::ReconcileError;
use crate::pipeline::inputs::{self, ObjectSource};
use crate::pipeline::status::StatusUpdate;
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

/// The phase a resource is in, as the host reads it: `.status.phase`, else the initial phase.
pub fn current_phase<'a>(def: &'a OperatorDefinition, resource: &'a DynamicObject) -> &'a str {
    resource.data["status"]["phase"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or(&def.initial_phase)
}

/// The declared phases, comma-separated, for messages.
pub fn phase_names(def: &OperatorDefinition) -> String {
    def.phases
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The phase `name` of `def`, or the host's error for a resource in an undeclared phase.
pub fn declared_phase<'a>(
    def: &'a OperatorDefinition,
    name: &str,
) -> Result<&'a PhaseDefinition, ReconcileError> {
    def.phase(name).ok_or_else(|| ReconcileError::UnknownPhase {
        phase: name.to_string(),
        operator: def.name.clone(),
        declared: phase_names(def),
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
        generation,
        now,
        def.history_limit,
    );
    Ok(Standing::Restart {
        phase,
        update: Box::new(update),
    })
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
