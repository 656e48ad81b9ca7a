//! Timing shared by the runtime's benches: the mean time per call over a batch (checking each
//! call found what it should), and the median with min and max of several batches.

use std::time::{Duration, Instant};

/// Mean time of `call(i)` over `calls` calls; each must return `expected` (what it found),
/// else the bench measures a broken case and stops with `what`.
pub fn per_call(
    calls: usize,
    expected: usize,
    what: &str,
    mut call: impl FnMut(usize) -> usize,
) -> Duration {
    let started = Instant::now();
    let mut found = 0;
    for i in 0..calls {
        found += call(i);
    }
    let elapsed = started.elapsed();
    assert_eq!(found, expected * calls, "{what}");
    elapsed / calls as u32
}

/// The median, min and max of `samples` (not empty).
pub fn summary(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}
