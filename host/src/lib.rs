//! wasmpilot: a Kubernetes operator host whose business logic runs as sandboxed Wasm components.
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
//! pipeline: step (phase, final-phase restart, inputs selected, metric samples)
//!     → decision (the component in the sandbox, its result checked)
//!     → outputs (server-side applied, pruned) → status (phase, status info, Conditions, Events)
//! ```
//!
//! Around it: `offline` runs pipeline steps from files (`run-phase`; `authoring`'s `simulate`
//! and `plan` build on it), `authoring` is the project loop (init, generate, build, simulate,
//! graph, plan), `evidence` records, replays and shadows decisions, `deploy` ships an operator's
//! components, and `cli` (in the binary) wires the commands.

pub mod api_client;
pub mod authoring;
pub mod component_build;
pub mod controller;
pub mod crd;
pub mod definition;
pub mod deploy;
pub mod diff;
pub mod egress;
pub mod error_report;
pub mod evidence;
pub mod kinds;
pub mod metrics;
#[cfg(test)]
mod mock_api_server;
pub mod modules;
pub mod offline;
pub mod pipeline;
pub mod promql;
pub mod rbac;
pub mod redaction;
pub mod sandbox;
#[cfg(test)]
mod step_equivalence_tests;
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
