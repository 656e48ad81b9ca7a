//! What of the cluster reaches a wasmpilot worker, written once for the host (which selects
//! and projects the inputs it caches and sends) and the guest SDK (whose native test harness
//! hands a worker the same objects the host would, and whose workers may select themselves).

pub mod label_selector;
pub mod projection;

pub use label_selector::{field_at, LabelSelector, SelectorError};
pub use projection::{Projection, ProjectionError, ALWAYS_KEPT};
