//! One phase step, the same in the controller and the offline commands (`step::run`): where the
//! resource stands and what its worker is handed (`step`: phase, `inputs` selected,
//! [`crate::promql`] samples), the worker's checked `decision` (run in [`crate::sandbox`]), its
//! `outputs` (checked, applied, pruned) and the `status` written, all through `effects` (the
//! cluster, a dry run, an in-memory world); `error` says why a step did not complete.
//! `finalize` is the finalizer's step on a resource being deleted.

pub mod decision;
pub mod effects;
pub mod error;
pub mod finalize;
pub mod inputs;
pub mod outputs;
pub mod request;
pub mod status;
pub mod step;

pub use error::ReconcileError;
