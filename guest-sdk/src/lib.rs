//! Write the business logic of a [wasmpilot] operator as a WebAssembly component.
//!
//! A worker decides one phase of a custom resource: it receives the resource, the
//! phase's declared inputs and the host's clock, and returns the next phase, a
//! status patch, the Kubernetes objects the host should apply, and when to run
//! again. It never talks to the API server itself.
//!
//! ```no_run
//! use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};
//! use k8s_openapi::api::apps::v1::Deployment;
//!
//! #[derive(Default)]
//! struct Syncing;
//!
//! impl PhaseWorker for Syncing {
//!     type Resource = serde_json::Value; // or your kube-derived custom resource type
//!
//!     fn sync(&self, ctx: &Context, _route: serde_json::Value, inputs: &Inputs) -> Result<Outcome, WorkerError> {
//!         let deployments: Vec<Deployment> = inputs.list("deployments")?;
//!         ctx.info("deployments seen", &[("count", &deployments.len())]);
//!         Ok(Outcome::next("Ready"))
//!     }
//! }
//!
//! wasmpilot_guest::export!(phase = Syncing);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2 -p <crate>` (crate type
//! `cdylib`); test natively with [`testing`], which runs a worker through the same
//! code path as the component export.
//!
//! [wasmpilot]: https://github.com/wasmpilot/wasmpilot

// Lets the generated bindings and the export macro name this crate the same way
// from inside it and from a worker crate.
extern crate self as wasmpilot_guest;

mod context;
mod error;
mod export;
mod inputs;
mod outcome;
pub mod selector;
mod status;
pub mod testing;
mod typed;

pub use context::{Context, LogLevel, LogRecord};
pub use error::{ErrorKind, WorkerError};
pub use export::{FinalizerWorker, PhaseWorker};
pub use inputs::{Inputs, Sample};
pub use outcome::{Finalized, Outcome};
pub use status::{HostStatus, Transition};

/// The Kubernetes API types this SDK is built against (k8s-openapi 0.29, Kubernetes 1.33).
pub use k8s_openapi;
/// The time library of [`k8s_openapi`]; [`Context::now`] returns a [`jiff::Timestamp`].
pub use k8s_openapi::jiff;
/// The serialization traits the typed API of `wasmpilot generate` names.
pub use serde;
pub use serde_json;

/// The generated WIT bindings (world `wasmpilot:operator/worker`). Not part of the API.
#[doc(hidden)]
pub mod wit {
    wit_bindgen::generate!({
        world: "worker",
        // guest-sdk/wit/: a copy of the repository's wit/ inside the crate, so the published crate
        // builds (tests/packaging.rs keeps the two identical).
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_worker_world",
        default_bindings_module: "::wasmpilot_guest::wit",
        runtime_path: "::wasmpilot_guest::__private::wit_bindgen::rt",
    });
}

/// Support for [`export!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::{
        assert_finalizer_worker, assert_phase_worker, finalize_export, run_finalize, run_sync,
        sync_export, NoFinalizer, NoPhase,
    };
    pub use wit_bindgen;
}
