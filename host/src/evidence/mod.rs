//! Evidence for operator upgrades: every decision is a function of a request the host holds, so
//! it can be recorded (`record`), captured from a live resource (`capture`), run again against
//! a candidate (`replay`) or shadowed by a candidate on live traffic (the controller's `shadow` lane); `case` is the
//! one format they share.

pub mod capture;
pub mod case;
pub mod record;
pub mod replay;
