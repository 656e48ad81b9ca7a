//! wasmpilot: a Kubernetes operator host whose business logic runs as sandboxed Wasm components.
//!
//! The modules follow the data flow of one reconcile, in order:
//!
//! ```text
//! WasmOperator ──manager──▶ definition (validated) + modules (fetched, verified, compiled once)
//!      │
//!      ▼
//! watch (resource, inputs, outputs) → schedule (queue, backoff) → reconcile:
//!     inputs (from the watch caches) → sandbox (the phase component, fresh instance)
//!     → outputs (validated, server-side applied) → status (phase, status info, Conditions, Events)
//! ```
//!
//! `decision` is the worker call and its checks, shared by `reconcile` and `offline`, which runs
//! one phase from files through the same definition, inputs, sandbox and output checks, without
//! a cluster; `deploy` builds an operator's components and ships them;
//! `authoring` is the project loop around them (init, build, simulate, graph, plan).

pub mod authoring;
pub mod component_build;
pub mod crd;
pub mod decision;
pub mod definition;
pub mod deploy;
pub mod diff;
pub mod evidence;
pub mod informers;
pub mod inputs;
pub mod kinds;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod modules;
pub mod offline;
pub mod outputs;
pub mod promql;
pub mod rbac;
pub mod reconcile;
pub mod sandbox;
pub mod schedule;
pub mod selector;
pub mod status;
pub mod watch;
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
