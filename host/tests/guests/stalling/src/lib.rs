//! A test-only phase worker that never decides: every call sleeps for a minute (in a WASI poll,
//! where no guest code runs), past any deadline. The shadow tests use it as a candidate that
//! stalls, to show the live path does not wait for it.

use std::time::Duration;
use wasmpilot_guest::{Context, Inputs, Outcome, PhaseWorker, WorkerError};

#[derive(Default)]
struct Stalling;

impl PhaseWorker for Stalling {
    type Resource = serde_json::Value;

    fn sync(&self, _: &Context, _: serde_json::Value, _: &Inputs) -> Result<Outcome, WorkerError> {
        std::thread::sleep(Duration::from_secs(60));
        Err(WorkerError::fatal("woke up after a minute"))
    }
}

wasmpilot_guest::export!(phase = Stalling);
