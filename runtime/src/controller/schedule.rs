//! Per-object retry timing: exponential backoff with a cap, reset on success.
//! Queueing, de-duplication and concurrency come from kube-runtime's `Controller`.

use kube::api::DynamicObject;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Exponential backoff per object key: `base · 2^(failures-1)`, at most `cap`.
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure and returns how long to wait before the next attempt.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Forgets the failures of an object after a successful reconcile.
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Failures recorded for an object since its last success.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(300))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_object_up_to_the_cap_and_resets() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let delays: Vec<_> = (0..6).map(|_| b.next_delay("a").as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(
            b.next_delay("b"),
            Duration::from_secs(1),
            "objects back off independently"
        );
        b.reset("a");
        assert_eq!(b.failures("a"), 0);
        assert_eq!(b.next_delay("a"), Duration::from_secs(1));
    }
}

/// Backoff for watch streams after errors (connection lost, `410 Gone` relists): exponential
/// from 250 ms to at most 5 s, so watches recover within seconds of an API server outage.
/// (kube-runtime's default grows to 30 s and pauses every trigger of a controller meanwhile.)
pub fn watch_backoff() -> kube::runtime::utils::ResetTimerBackoff<WatchBackoff> {
    kube::runtime::utils::ResetTimerBackoff::new(WatchBackoff::default(), Duration::from_secs(30))
}

/// Doubling delays between `min` and `max`.
#[derive(Clone, Debug)]
pub struct WatchBackoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        let min = Duration::from_millis(250);
        WatchBackoff {
            min,
            max: Duration::from_secs(5),
            next: min,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let current = self.next;
        self.next = (self.next * 2).min(self.max);
        Some(current)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod watch_backoff_tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    #[test]
    fn grows_to_five_seconds_and_resets() {
        let mut b = WatchBackoff::default();
        let ms: Vec<u128> = b.by_ref().take(7).map(|d| d.as_millis()).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 4000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(250)));
    }
}

/// `namespace/name` (or `name`), as logs, backoff and cases name a resource.
pub fn resource_key(obj: &DynamicObject) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}
