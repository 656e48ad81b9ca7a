//! The worker traits, the one function each export runs, and the `export!` macro.
//!
//! [`run_sync`] and [`run_finalize`] take and return the WIT records (JSON strings
//! inside), so the component export and [`testing`](crate::testing) run the same code.

use serde::de::DeserializeOwned;

use crate::context::{Context, LogRecord};
use crate::inputs::short_type_name;
use crate::wit::wasmpilot::operator::types as wire;
use crate::{Finalized, Inputs, Outcome, WorkerError};

/// Decides one phase of a resource. Register it with
/// [`export!(phase = MyWorker)`](crate::export); the type must also be `Default`.
///
/// ```no_run
/// use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};
///
/// #[derive(Default)]
/// struct Initializing;
///
/// impl PhaseWorker for Initializing {
///     type Resource = serde_json::Value;
///
///     fn sync(&self, ctx: &Context, _resource: serde_json::Value, _inputs: &Inputs) -> Result<Outcome, WorkerError> {
///         ctx.info("starting", &[]);
///         Ok(Outcome::next("Syncing"))
///     }
/// }
///
/// wasmpilot_guest::export!(phase = Initializing);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a wasmpilot phase worker",
    label = "`{Self}` does not implement `wasmpilot_guest::PhaseWorker`",
    note = "`export!(phase = T)` needs `impl wasmpilot_guest::PhaseWorker for T` (and `T: Default`); a finalizer goes in `export!(finalizer = T)`"
)]
pub trait PhaseWorker {
    /// The custom resource type, e.g. a `#[derive(kube::CustomResource)]` type or `serde_json::Value`.
    type Resource: DeserializeOwned;

    /// Decides the phase: the next phase, a status patch, outputs, when to run again.
    ///
    /// # Errors
    /// [`WorkerError::retryable`] to be retried with backoff, [`WorkerError::fatal`] to
    /// stop until the resource or an input changes.
    fn sync(
        &self,
        ctx: &Context,
        resource: Self::Resource,
        inputs: &Inputs,
    ) -> Result<Outcome, WorkerError>;
}

/// Cleans up when a resource carrying the operator's finalizer is deleted. Register it
/// with [`export!(finalizer = MyFinalizer)`](crate::export); the type must also be `Default`.
///
/// ```no_run
/// use std::time::Duration;
/// use wasmpilot_guest::{Context, Finalized, FinalizerWorker, Inputs, WorkerError};
///
/// #[derive(Default)]
/// struct Cleanup;
///
/// impl FinalizerWorker for Cleanup {
///     type Resource = serde_json::Value;
///
///     fn finalize(&self, ctx: &Context, resource: serde_json::Value, _inputs: &Inputs) -> Result<Finalized, WorkerError> {
///         if resource.pointer("/status/leases").is_some() {
///             return Ok(Finalized::pending(Duration::from_secs(10)));
///         }
///         Ok(Finalized::done())
///     }
/// }
///
/// wasmpilot_guest::export!(finalizer = Cleanup);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a wasmpilot finalizer worker",
    label = "`{Self}` does not implement `wasmpilot_guest::FinalizerWorker`",
    note = "`export!(finalizer = T)` needs `impl wasmpilot_guest::FinalizerWorker for T` (and `T: Default`); a phase worker goes in `export!(phase = T)`"
)]
pub trait FinalizerWorker {
    /// The custom resource type.
    type Resource: DeserializeOwned;

    /// Cleans up; [`Finalized::done`] lets the deletion proceed. `inputs` holds the objects of
    /// the inputs the WasmOperator declares for the finalizer (`spec.finalizer.inputs`),
    /// selected as for a phase; none declared: no inputs.
    ///
    /// # Errors
    /// As for [`PhaseWorker::sync`].
    fn finalize(
        &self,
        ctx: &Context,
        resource: Self::Resource,
        inputs: &Inputs,
    ) -> Result<Finalized, WorkerError>;
}

/// Exports a component's workers: `export!(phase = A)`, `export!(finalizer = B)` or
/// `export!(phase = A, finalizer = B)`. Use it once, in the crate that is built as the
/// component (`crate-type = ["cdylib", "rlib"]`).
///
/// The component exports both WIT interfaces of the `wasmpilot:operator/worker` world;
/// the one not given fails every call with a fatal "this component has no … worker".
///
/// ```no_run
/// # use wasmpilot_guest::*;
/// # #[derive(Default)] struct Syncing;
/// # impl PhaseWorker for Syncing { type Resource = serde_json::Value;
/// #   fn sync(&self, _: &Context, _: serde_json::Value, _: &Inputs) -> Result<Outcome, WorkerError> { Ok(Outcome::next("Ready")) } }
/// wasmpilot_guest::export!(phase = Syncing);
/// ```
///
/// A type that does not implement the role's trait is rejected at compile time
/// ("`NotAWorker` is not a wasmpilot phase worker"), natively too:
///
/// ```compile_fail,E0277
/// #[derive(Default)]
/// struct NotAWorker;
/// wasmpilot_guest::export!(phase = NotAWorker);
/// ```
#[macro_export]
macro_rules! export {
    (phase = $phase:ty $(,)?) => {
        $crate::__export_component!($phase, $crate::__private::NoFinalizer);
    };
    (finalizer = $finalizer:ty $(,)?) => {
        $crate::__export_component!($crate::__private::NoPhase, $finalizer);
    };
    (phase = $phase:ty, finalizer = $finalizer:ty $(,)?) => {
        $crate::__export_component!($phase, $finalizer);
    };
    (finalizer = $finalizer:ty, phase = $phase:ty $(,)?) => {
        $crate::__export_component!($phase, $finalizer);
    };
    ($($other:tt)*) => {
        ::core::compile_error!(
            "expected `export!(phase = MyWorker)`, `export!(finalizer = MyFinalizer)` or `export!(phase = MyWorker, finalizer = MyFinalizer)`"
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_component {
    ($phase:ty, $finalizer:ty) => {
        const _: () = {
            // Checked on every target, so `cargo test` reports a wrong type too.
            let _ = $crate::__private::assert_phase_worker::<$phase>;
            let _ = $crate::__private::assert_finalizer_worker::<$finalizer>;
        };

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __WasmpilotComponent;

            impl $crate::wit::exports::wasmpilot::operator::phase_worker::Guest
                for __WasmpilotComponent
            {
                fn sync(
                    request: $crate::wit::wasmpilot::operator::types::SyncRequest,
                ) -> ::core::result::Result<
                    $crate::wit::wasmpilot::operator::types::SyncResult,
                    $crate::wit::wasmpilot::operator::types::WorkerError,
                > {
                    $crate::__private::sync_export::<$phase>(request)
                }
            }

            impl $crate::wit::exports::wasmpilot::operator::finalizer_worker::Guest
                for __WasmpilotComponent
            {
                fn finalize(
                    request: $crate::wit::wasmpilot::operator::types::FinalizeRequest,
                ) -> ::core::result::Result<
                    $crate::wit::wasmpilot::operator::types::FinalizeResult,
                    $crate::wit::wasmpilot::operator::types::WorkerError,
                > {
                    $crate::__private::finalize_export::<$finalizer>(request)
                }
            }

    $crate::wit::__export_worker_world!(__WasmpilotComponent with_types_in $crate::wit);
        };
    };
}

/// Compile-time check behind `export!(phase = T)`.
pub fn assert_phase_worker<T: PhaseWorker + Default>() {}

/// Compile-time check behind `export!(finalizer = T)`.
pub fn assert_finalizer_worker<T: FinalizerWorker + Default>() {}

/// The phase side of a component exported with only a finalizer.
#[derive(Default)]
pub struct NoPhase;

impl PhaseWorker for NoPhase {
    type Resource = serde_json::Value;

    fn sync(&self, _: &Context, _: serde_json::Value, _: &Inputs) -> Result<Outcome, WorkerError> {
        Err(WorkerError::fatal("this component has no phase worker"))
    }
}

/// The finalizer side of a component exported with only a phase worker.
#[derive(Default)]
pub struct NoFinalizer;

impl FinalizerWorker for NoFinalizer {
    type Resource = serde_json::Value;

    fn finalize(
        &self,
        _: &Context,
        _: serde_json::Value,
        _: &Inputs,
    ) -> Result<Finalized, WorkerError> {
        Err(WorkerError::fatal("this component has no finalizer worker"))
    }
}

/// The `phase-worker.sync` export.
pub fn sync_export<W: PhaseWorker + Default>(
    request: wire::SyncRequest,
) -> Result<wire::SyncResult, wire::WorkerError> {
    run_sync(&W::default(), request).0
}

/// The `finalizer-worker.finalize` export: its inputs come from the host's
/// `finalizer-inputs` import.
pub fn finalize_export<W: FinalizerWorker + Default>(
    request: wire::FinalizeRequest,
) -> Result<wire::FinalizeResult, wire::WorkerError> {
    #[cfg(target_arch = "wasm32")]
    let inputs = crate::wit::wasmpilot::operator::finalizer_inputs::inputs();
    #[cfg(not(target_arch = "wasm32"))]
    let inputs = Vec::new();
    run_finalize(&W::default(), request, inputs).0
}

/// The phase name a finalizer worker's [`Context::phase`] reports.
pub(crate) const FINALIZER_PHASE: &str = "finalizer";

/// Runs a phase worker on a request: parse, decide, serialize. Also returns the
/// log records kept natively (none in a component, where they went to the host).
pub fn run_sync<W: PhaseWorker>(
    worker: &W,
    request: wire::SyncRequest,
) -> (Result<wire::SyncResult, wire::WorkerError>, Vec<LogRecord>) {
    let wire::SyncRequest {
        operator,
        phase,
        resource,
        inputs,
        now,
    } = request;
    let now = match parse_now(&now) {
        Ok(now) => now,
        Err(err) => return (Err(err.into()), Vec::new()),
    };
    let ctx = Context::new(operator, phase, now);
    let result = (|| {
        let resource = parse_resource::<W::Resource>(&resource)?;
        let inputs = Inputs::new(inputs.into_iter().map(|i| (i.name, i.objects)).collect());
        let outcome = worker.sync(&ctx, resource, &inputs)?;
        let Outcome {
            next_phase,
            status,
            outputs,
            requeue_after,
        } = outcome;
        Ok(wire::SyncResult {
            next_phase,
            status_info: status_json(status?)?,
            outputs: outputs
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()?,
            requeue_after_ms: requeue_after.map(millis),
        })
    })();
    (result.map_err(|e: WorkerError| e.into()), ctx.take_logs())
}

/// Runs a finalizer worker on a request and its inputs; see [`run_sync`].
pub fn run_finalize<W: FinalizerWorker>(
    worker: &W,
    request: wire::FinalizeRequest,
    inputs: Vec<wire::NamedObjects>,
) -> (
    Result<wire::FinalizeResult, wire::WorkerError>,
    Vec<LogRecord>,
) {
    let wire::FinalizeRequest {
        operator,
        resource,
        now,
    } = request;
    let now = match parse_now(&now) {
        Ok(now) => now,
        Err(err) => return (Err(err.into()), Vec::new()),
    };
    let ctx = Context::new(operator, FINALIZER_PHASE.to_owned(), now);
    let result = (|| {
        let resource = parse_resource::<W::Resource>(&resource)?;
        let inputs = Inputs::new(inputs.into_iter().map(|i| (i.name, i.objects)).collect());
        let Finalized {
            done,
            status,
            requeue_after,
        } = worker.finalize(&ctx, resource, &inputs)?;
        Ok(wire::FinalizeResult {
            done,
            status_info: status_json(status?)?,
            requeue_after_ms: requeue_after.map(millis),
        })
    })();
    (result.map_err(|e: WorkerError| e.into()), ctx.take_logs())
}

fn parse_now(now: &str) -> Result<k8s_openapi::jiff::Timestamp, WorkerError> {
    now.parse().map_err(|err| {
        WorkerError::fatal(format!(
            "the host's clock `{now}` is not an RFC 3339 timestamp: {err}"
        ))
    })
}

fn parse_resource<T: DeserializeOwned>(json: &str) -> Result<T, WorkerError> {
    serde_json::from_str(json).map_err(|err| {
        let what = match crate::inputs::identity(json) {
            Ok(Some(id)) => format!(" ({id})"),
            _ => String::new(),
        };
        WorkerError::fatal(format!(
            "the resource{what} is not a valid {}: {err}",
            short_type_name::<T>(),
        ))
    })
}

fn status_json(
    status: Option<serde_json::Map<String, serde_json::Value>>,
) -> Result<Option<String>, WorkerError> {
    match status {
        Some(map) if !map.is_empty() => Ok(Some(serde_json::to_string(&map)?)),
        _ => Ok(None),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
