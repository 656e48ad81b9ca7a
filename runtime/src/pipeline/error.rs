//! Why one phase step did not complete, in the controller or an offline command: the message
//! a resource's `Synced` Condition and Event carry, its reason, and whether it is retried.

use crate::pipeline::outputs::OutputError;
use crate::sandbox::RunError;
use std::time::Duration;

/// Why a reconcile did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("phase {phase:?} is not declared by operator {operator} (declared: {declared})")]
    UnknownPhase {
        phase: String,
        operator: String,
        declared: String,
    },
    #[error("worker for phase {phase} returned next phase {next:?}, which is not declared (declared: {declared})")]
    UnknownNextPhase {
        phase: String,
        next: String,
        declared: String,
    },
    #[error("worker for phase {phase} returned next phase {next:?}, but {phase} may only move to {allowed}")]
    TransitionNotAllowed {
        phase: String,
        next: String,
        allowed: String,
    },
    #[error("worker for phase {phase} returned status info that is not a JSON object: {problem}")]
    BadStatusInfo { phase: String, problem: String },
    #[error("worker for phase {phase} ({digest}): {source}")]
    Worker {
        phase: String,
        digest: String,
        #[source]
        source: RunError,
    },
    #[error("{action}: {}", crate::error_report::api_text(.source.as_ref()))]
    Effect {
        action: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("phase {phase} is final: it runs no worker")]
    NoWorker { phase: String },
    #[error("loading the module of phase {phase}: {source}")]
    ModuleNotLoaded {
        phase: String,
        #[source]
        source: Box<crate::modules::ModuleError>,
    },
    #[error("finalizer worker ({digest}): {source}")]
    FinalizerWorker {
        digest: String,
        #[source]
        source: RunError,
    },
    #[error("finalizer worker not done yet; running again in {0:?}")]
    FinalizerPending(Duration),
    // `waited` is not in the message: it would change the Condition at every retry.
    #[error("the finalizer worker has not finished within spec.finalizer.pendingTimeout ({bound:?}) of the resource's deletion: {why}")]
    FinalizerStuck {
        waited: Duration,
        bound: Duration,
        /// Why it is not done (its last answer or error).
        why: String,
        /// When it runs again.
        retry: Duration,
    },
    #[error("outputs of phase {phase} refused, nothing was applied: {source}")]
    Outputs {
        phase: String,
        #[source]
        source: Box<OutputError>,
    },
    #[error(
        "outputs of phase {phase} not all applied ({applied} of {total} done, {}): {}",
        retry_note(.failures),
        failure_list(.failures)
    )]
    Apply {
        phase: String,
        applied: usize,
        total: usize,
        /// Each output that could not be applied (or pruned), with why.
        failures: Vec<OutputError>,
    },
    #[error("metric input for phase {phase}: {source}")]
    Query {
        phase: String,
        #[source]
        source: crate::promql::QueryError,
    },
    #[error("the cache of {0} has not synced yet")]
    InputsNotSynced(String),
    // The problem is in the message and deliberately not a `source()`: a chain printed with
    // `{:#}` would repeat it.
    #[error("an input selector of phase {phase} is invalid: {problem}")]
    InvalidSelector {
        phase: String,
        problem: wasmpilot_selection::SelectorError,
    },
    #[error("status of the resource changed while the worker ran; deciding again")]
    StatusConflict,
    #[error("the resource changed after the decision was made from the cache; deciding again")]
    StaleDecision,
    #[error("{action}: {}", crate::error_report::api_text(.source))]
    Api {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("finalizer handling: {0}")]
    Finalizer(String),
    /// The operator's account may not read or write what this resource's phase needs where
    /// the resource lives: nothing is read for the worker and nothing written.
    #[error("{0}")]
    NotGranted(crate::rbac::NotGranted),
    #[error("{0}")]
    GrantCheck(crate::rbac::GrantCheckError),
}

impl ReconcileError {
    /// Wraps a selector problem of phase `phase` (for `map_err`).
    pub fn invalid_selector(
        phase: &str,
    ) -> impl FnOnce(wasmpilot_selection::SelectorError) -> Self {
        let phase = phase.to_owned();
        move |problem| ReconcileError::InvalidSelector { phase, problem }
    }

    /// Fatal errors are reported and not retried with backoff: the resource runs again on the
    /// next change of it or its inputs, or at the resync interval.
    pub(crate) fn is_fatal(&self) -> bool {
        match self {
            ReconcileError::UnknownPhase { .. }
            | ReconcileError::UnknownNextPhase { .. }
            | ReconcileError::TransitionNotAllowed { .. }
            | ReconcileError::BadStatusInfo { .. }
            | ReconcileError::InvalidSelector { .. } => true,
            ReconcileError::Worker { source, .. }
            | ReconcileError::FinalizerWorker { source, .. } => source.is_fatal(),
            ReconcileError::Outputs { source, .. } => source.is_fatal(),
            ReconcileError::Apply { failures, .. } => all_fatal(failures),
            ReconcileError::Query { source, .. } => source.is_fatal(),
            _ => false,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::UnknownPhase { .. } => "UnknownPhase",
            ReconcileError::ModuleNotLoaded { .. } => "ModuleNotLoaded",
            ReconcileError::NoWorker { .. } => "NoWorker",
            ReconcileError::Effect { .. } => "EffectFailed",
            ReconcileError::UnknownNextPhase { .. } => "UnknownNextPhase",
            ReconcileError::TransitionNotAllowed { .. } => "TransitionNotAllowed",
            ReconcileError::BadStatusInfo { .. } => "BadStatusInfo",
            ReconcileError::Worker { source, .. }
            | ReconcileError::FinalizerWorker { source, .. } => source.reason(),
            ReconcileError::FinalizerPending(_) => "FinalizerPending",
            ReconcileError::FinalizerStuck { .. } => "FinalizerStuck",
            // Only refusals: to take over someone else's object (the worker's names are taken),
            // to write into the host's own namespaces.
            ReconcileError::Apply { failures, .. }
                if failures.iter().all(|f| {
                    matches!(
                        f,
                        OutputError::NotOurs { .. }
                            | OutputError::ReservedNamespace { .. }
                            | OutputError::NamespaceNotGranted { .. }
                    )
                }) =>
            {
                "OutputRefused"
            }
            ReconcileError::Apply { .. } => "ApplyFailed",
            ReconcileError::Outputs { .. } => "OutputRefused",
            ReconcileError::Query { .. } => "MetricQueryFailed",
            ReconcileError::InputsNotSynced(_) => "InputsNotSynced",
            ReconcileError::InvalidSelector { .. } => "InvalidSelector",
            ReconcileError::StatusConflict => "StatusConflict",
            ReconcileError::StaleDecision => "StaleDecision",
            ReconcileError::Api { .. } => "ApiError",
            ReconcileError::Finalizer(_) => "FinalizerError",
            ReconcileError::NotGranted(_) => "NotGranted",
            ReconcileError::GrantCheck(crate::rbac::GrantCheckError::CannotImpersonate {
                ..
            }) => "CannotImpersonate",
            ReconcileError::GrantCheck(_) => "PermissionCheckFailed",
        }
    }

    /// Worth a Condition and an Event (the rest are routine and only logged).
    pub(crate) fn is_reportable(&self) -> bool {
        !matches!(
            self,
            ReconcileError::StatusConflict
                | ReconcileError::StaleDecision
                | ReconcileError::FinalizerPending(_)
                | ReconcileError::InputsNotSynced(_)
        )
    }
}

/// The first few failures of a result, for one message.
/// Whether the API server will repeat every one of these refusals until something changes.
fn all_fatal(failures: &[OutputError]) -> bool {
    failures.iter().all(OutputError::is_fatal)
}

/// When an apply that failed is tried again: with backoff, or (every failure a refusal the
/// API server will repeat, e.g. a quota or an invalid object) after a change or the resync.
fn retry_note(failures: &[OutputError]) -> &'static str {
    if all_fatal(failures) {
        "tried again after a change or at the resync"
    } else {
        "retrying"
    }
}

fn failure_list(failures: &[OutputError]) -> String {
    const SHOWN: usize = 5;
    let mut text = failures
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if failures.len() > SHOWN {
        text.push_str(&format!("; and {} more", failures.len() - SHOWN));
    }
    text
}
