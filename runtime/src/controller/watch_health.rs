//! Whether the watches an operator depends on work: one that fails (its kind's CRD deleted, the
//! host's read right revoked) is named here, for the manager to report on the WasmOperator.

use crate::crd::KindRef;
use futures::FutureExt;
use std::fmt::Display;
use std::sync::Arc;
use tokio::sync::watch;

/// The Ready reason of a WasmOperator one of whose watches fails.
pub const WATCH_FAILING: &str = "WatchFailing";

/// How long a watch fails before it is reported: one that recovers sooner (a relist after
/// `410 Gone`, a dropped connection) is not worth a Ready=False and an Event.
pub const FAILING_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The most of a watch's error a message quotes.
const ERROR_BYTES: usize = 512;

/// One watch's state: its error while it fails (the first of the failure), `None` while it
/// works. Shared by the readers of that watch.
#[derive(Clone)]
pub struct WatchHealth(Arc<watch::Sender<Option<String>>>);

impl Default for WatchHealth {
    fn default() -> Self {
        WatchHealth(Arc::new(watch::channel(None).0))
    }
}

impl WatchHealth {
    /// The watch failed; a failure already reported keeps its first error (the retries' errors
    /// would only churn the status).
    pub fn failed(&self, error: &impl Display) {
        self.0.send_if_modified(|state| {
            if state.is_some() {
                return false;
            }
            let text = error.to_string();
            *state = Some(crate::worker_text::bound_owned(text, ERROR_BYTES));
            true
        });
    }

    /// The watch delivered an event: it works.
    pub fn works(&self) {
        // Read first: while nothing failed (nearly always), an event takes no write lock.
        if self.0.borrow().is_some() {
            self.0.send_if_modified(|state| state.take().is_some());
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.0.subscribe()
    }
}

/// The watches of one operator (its resource's, its inputs' and outputs'), by kind.
#[derive(Clone, Default)]
pub struct OperatorWatches(Vec<(KindRef, watch::Receiver<Option<String>>)>);

impl OperatorWatches {
    pub fn add(&mut self, kind: &KindRef, health: watch::Receiver<Option<String>>) {
        self.0.push((kind.clone(), health));
    }

    /// The first failing watch: its kind and what to report.
    pub fn failing(&self) -> Option<(KindRef, String)> {
        self.0.iter().find_map(|(kind, rx)| {
            rx.borrow().as_ref().map(|error| {
                (
                    kind.clone(),
                    format!(
                        "the watch of {kind} fails: {error}; reconciles read the last objects it delivered, and it is retried with backoff (was a CRD deleted, or the host's right to read it revoked?)"
                    ),
                )
            })
        })
    }

    /// Waits until a watch's state changes; `false` once every watch has stopped.
    pub async fn changed(&mut self) -> bool {
        loop {
            self.0.retain(|(_, rx)| rx.has_changed().is_ok());
            if self.0.is_empty() {
                return false;
            }
            let changes = self.0.iter_mut().map(|(_, rx)| rx.changed().boxed());
            let (result, _, _) = futures::future::select_all(changes).await;
            if result.is_ok() {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch's first error is kept while it fails (retries do not churn), cleared when it
    /// works, and an operator's first failing watch is named.
    #[tokio::test]
    async fn a_failing_watch_is_named_until_it_works() {
        let (resource, input) = (WatchHealth::default(), WatchHealth::default());
        let mut watches = OperatorWatches::default();
        watches.add(
            &KindRef::new("example.org/v1", "Route"),
            resource.subscribe(),
        );
        watches.add(&KindRef::new("apps/v1", "Deployment"), input.subscribe());
        assert!(watches.failing().is_none());
        input.failed(&"404 Not Found");
        assert!(watches.changed().await);
        input.failed(&"connection refused");
        let (kind, message) = watches.failing().expect("failing");
        assert_eq!(kind.kind, "Deployment");
        assert!(message.contains("fails: 404 Not Found;"), "{message}");
        input.works();
        assert!(watches.changed().await);
        assert!(watches.failing().is_none());
        drop((resource, input));
        assert!(!watches.changed().await, "every watch stopped");
    }
}
