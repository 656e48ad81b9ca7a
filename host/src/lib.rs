//! wasmpilot's tools, on top of the runtime ([`wasmpilot_runtime`], re-exported here): the
//! authoring loop, deployment, the offline and evidence commands, and the `wasmpilot` CLI.
//! The host itself is the runtime crate; this crate is what an operator author runs.
//!
//! ```text
//! runtime (wasmpilot_runtime): controller → pipeline step → sandbox, modules, definition
//! tools (this crate):          authoring (init, generate, build, simulate, graph, plan),
//!                              offline (run-phase), evidence (capture, replay), deploy, grant,
//!                              dashboard, cli
//! ```
//!
//! `simulate` and `plan` run the runtime's one phase step (`pipeline::step::run`) with effects
//! of their own: an in-memory world, a server-side dry run.

pub use wasmpilot_runtime::{
    api_client, controller, crd, definition, diff, egress, error_report, field_manager,
    finalizer_name, host, kinds, metrics, modules, pipeline, promql, rbac, redaction, sandbox,
    worker_text, OPERATOR_LABEL, PHASE_LABEL,
};

pub mod authoring;
pub mod component_build;
pub mod crd_reference;
pub mod dashboard;
pub mod deploy;
pub mod evidence;
pub mod offline;
pub mod operator_grant;
pub mod shell;
#[cfg(test)]
mod step_equivalence_tests;
