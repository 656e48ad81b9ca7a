//! The shared caches' watch connections: at most [`WATCHES_PER_CONNECTION`] watches on one
//! HTTP/2 connection, another connection opened for more, so no watch waits for a stream.
//!
//! A watch holds an HTTP/2 stream for as long as it runs, and an API server allows a bounded
//! number of concurrent streams per connection (about 100, kubernetes#121120): past it, a new
//! watch's request waits until another watch ends — one author's many input projections would
//! keep every operator loaded after them from ever syncing. Counted in `wasmpilot_watches`,
//! `wasmpilot_watch_connections` and, for watches that may wait (no connection could be
//! opened), `wasmpilot_watches_on_full_connections`.

use kube::Client;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Watches one connection carries before another is opened: half the streams the API server
/// allows, leaving room for its reconnects.
pub const WATCHES_PER_CONNECTION: usize = 50;

/// Opens one more connection to the API server (the host's identity, a pool of its own).
pub type OpenConnection = Box<dyn Fn() -> Result<Client, kube::Error> + Send + Sync>;

/// The watch connections of a host.
pub struct WatchConnections {
    open: Option<OpenConnection>,
    connections: Mutex<Vec<Arc<WatchConnection>>>,
}

struct WatchConnection {
    client: Client,
    watches: AtomicUsize,
}

/// One watch's place on a connection, given back when dropped (its informer stopped).
pub struct WatchStream {
    connection: Arc<WatchConnection>,
    /// Placed past the connection's share.
    over: bool,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.connection.watches.fetch_sub(1, Ordering::AcqRel);
        crate::metrics::METRICS.watches.dec();
        if self.over {
            crate::metrics::METRICS.watches_on_full_connections.dec();
        }
    }
}

impl WatchConnections {
    /// Every watch on `client` (the mock API server's tests; a host that opens no more).
    pub fn single(client: Client) -> Self {
        WatchConnections {
            open: None,
            connections: Mutex::new(vec![Arc::new(WatchConnection {
                client,
                watches: AtomicUsize::new(0),
            })]),
        }
    }

    /// Watches on `first`, then on connections `open` makes as they fill.
    pub fn opening(first: Client, open: OpenConnection) -> Self {
        WatchConnections {
            open: Some(open),
            ..WatchConnections::single(first)
        }
    }

    /// The first connection's client (the host's own watches: WasmOperators' grants, RBAC).
    pub fn first(&self) -> Client {
        self.lock()
            .first()
            .map(|c| c.client.clone())
            .expect("a first connection, made with the set")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<WatchConnection>>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A client for one more watch: on the first connection with room, else on a new one (or,
    /// when none can be opened, the least loaded).
    pub fn take(&self) -> (Client, WatchStream) {
        let mut connections = self.lock();
        let with_room = connections
            .iter()
            .find(|c| c.watches.load(Ordering::Acquire) < WATCHES_PER_CONNECTION)
            .cloned();
        let connection = match with_room {
            Some(c) => c,
            None => {
                let opened = self.open.as_ref().map(|open| open());
                match opened {
                    Some(Ok(client)) => {
                        let c = Arc::new(WatchConnection {
                            client,
                            watches: AtomicUsize::new(0),
                        });
                        connections.push(c.clone());
                        tracing::info!(
                            connections = connections.len(),
                            "opened another watch connection ({WATCHES_PER_CONNECTION} watches each)"
                        );
                        crate::metrics::METRICS
                            .watch_connections
                            .set(connections.len() as i64);
                        c
                    }
                    failed => {
                        if let Some(Err(e)) = failed {
                            tracing::warn!(error = %crate::error_report::Brief(&e), "could not open another watch connection; this watch shares a full one");
                        }
                        connections
                            .iter()
                            .min_by_key(|c| c.watches.load(Ordering::Acquire))
                            .cloned()
                            .expect("a first connection, made with the set")
                    }
                }
            }
        };
        let over = connection.watches.fetch_add(1, Ordering::AcqRel) >= WATCHES_PER_CONNECTION;
        crate::metrics::METRICS.watches.inc();
        if over {
            crate::metrics::METRICS.watches_on_full_connections.inc();
        }
        (
            connection.client.clone(),
            WatchStream {
                connection: connection.clone(),
                over,
            },
        )
    }

    /// Watches per connection, in the order they were opened.
    pub fn load(&self) -> Vec<usize> {
        self.lock()
            .iter()
            .map(|c| c.watches.load(Ordering::Acquire))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_full_connection_gets_a_new_one_and_a_freed_place_is_taken_again() {
        let opened = Arc::new(AtomicUsize::new(0));
        let counting = opened.clone();
        let set = WatchConnections::opening(
            client(),
            Box::new(move || {
                counting.fetch_add(1, Ordering::SeqCst);
                Ok(client())
            }),
        );
        let mut streams: Vec<WatchStream> = (0..WATCHES_PER_CONNECTION * 2 + 1)
            .map(|_| set.take().1)
            .collect();
        assert_eq!(
            set.load(),
            [WATCHES_PER_CONNECTION, WATCHES_PER_CONNECTION, 1]
        );
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        // A watch of the first connection ends: the next one takes its place there.
        streams.swap_remove(0);
        assert_eq!(set.load()[0], WATCHES_PER_CONNECTION - 1);
        streams.push(set.take().1);
        assert_eq!(
            set.load(),
            [WATCHES_PER_CONNECTION, WATCHES_PER_CONNECTION, 1]
        );
        assert_eq!(opened.load(Ordering::SeqCst), 2, "no connection opened");
    }

    #[tokio::test]
    async fn a_set_that_cannot_open_more_shares_the_least_loaded() {
        let set = WatchConnections::single(client());
        let streams: Vec<WatchStream> = (0..WATCHES_PER_CONNECTION + 5)
            .map(|_| set.take().1)
            .collect();
        assert_eq!(set.load(), [WATCHES_PER_CONNECTION + 5]);
        assert_eq!(
            streams.iter().filter(|s| s.over).count(),
            5,
            "the 5 past the share are counted as possibly waiting"
        );
    }
}
