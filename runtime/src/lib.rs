//! wasmpilot's runtime: the operator host that the cluster image runs, apart from the authoring
//! and deployment tools (the `wasmpilot` crate, built on this one).
//!
//! The layout follows the data flow of one reconcile:
//!
//! ```text
//! WasmOperator ──controller::manager──▶ definition (validated) + modules (fetched, verified,
//!      │                                compiled once into sandbox components)
//!      ▼
//! controller: watch (resource, inputs, outputs) → schedule (queue, backoff) → reconcile
//!      │
//!      ▼  one step, the same for the controller and the offline commands
//! pipeline: step (phase, final-phase restart) → request (inputs selected, metric samples)
//!     → decision (the component in the sandbox, its result checked)
//!     → effects: outputs (server-side applied, pruned) → status (phase, Conditions, Events)
//! ```
//!
//! Around it: `host` is the process (flags, signals, leader election; `memory_limit` sizes the
//! workers' memory budget from its cgroup), `evidence` records
//! decisions and holds the case format, `rbac` derives each operator's grants, `metrics` serves
//! `/metrics` and health.

pub mod api_client;
pub mod controller;
pub mod crd;
pub mod definition;
pub mod diff;
pub mod egress;
pub mod error_report;
pub mod evidence;
pub mod heap;
pub mod host;
pub mod kinds;
pub mod memory_limit;
pub mod metrics;
#[cfg(any(test, feature = "testing"))]
pub mod mock_api_server;
pub mod modules;
pub mod object_names;
pub mod pipeline;
pub mod promql;
pub mod rbac;
pub mod redaction;
pub mod sandbox;
pub mod trace_export;
pub mod worker_text;

/// The finalizer the host puts on resources of operators that declare a finalizer worker.
pub fn finalizer_name(operator: &str) -> String {
    format!("wasmpilot.io/{operator}")
}

/// The server-side apply field manager the host uses for one operator's outputs.
pub fn field_manager(operator: &str) -> String {
    format!("wasmpilot-{operator}")
}

/// Label put on every output object, naming the operator that applied it.
pub const OPERATOR_LABEL: &str = "wasmpilot.io/operator";

/// Label put on every output object, naming the phase whose worker returned it (for pruning).
pub const PHASE_LABEL: &str = "wasmpilot.io/phase";
