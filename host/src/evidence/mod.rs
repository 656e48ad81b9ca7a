//! Evidence for operator upgrades: every decision is a function of a request the host holds, so
//! it can be recorded (the host's `record`), captured from a live resource (`capture`), run
//! again against a candidate (`replay`) or shadowed by a candidate on live traffic (the
//! controller's `shadow` lane); `case` is the one format they share.

pub use wasmpilot_runtime::evidence::{case, record};

pub mod capture;
pub mod replay;
