//! Recent deletions a watch saw, by namespace and resourceVersion: what a bucket's new holder
//! asks before it skips a resource handed over settled (did an input go away meanwhile?).
//!
//! A sharded replica's watches receive every namespace's events but act only on the buckets
//! they hold, so an input deleted while no replica held its bucket leaves no newer object to
//! compare with the resource's version. Each watch therefore logs every deletion it sees (in
//! its cache's scope or not) for a while; the log is bounded, and answers "maybe" once it had to
//! drop entries younger than that.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a deletion is remembered: longer than a bucket stays unheld (one Lease duration,
/// 15 s by default, plus a round) and its caches take to list again.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(120);

/// At most this many deletions are remembered (about 60 bytes each).
pub const MAX_REMEMBERED: usize = 4096;

/// One deletion: where, and the version the API server deleted it at (`None`: not a number).
struct Deletion {
    namespace: Box<str>,
    version: Option<u64>,
    at: Instant,
}

#[derive(Default)]
struct Log {
    entries: VecDeque<Deletion>,
    /// When a deletion younger than [`REMEMBERED_FOR`] was last dropped to stay bounded.
    overflowed_at: Option<Instant>,
}

/// The deletions one watch saw lately (see the module).
#[derive(Default)]
pub struct DeletionLog {
    log: Mutex<Log>,
    remembered_for: Option<Duration>,
    max: Option<usize>,
}

impl DeletionLog {
    /// A log with other bounds than [`REMEMBERED_FOR`] and [`MAX_REMEMBERED`] (tests).
    pub fn bounded(remembered_for: Duration, max: usize) -> Self {
        DeletionLog {
            log: Mutex::default(),
            remembered_for: Some(remembered_for),
            max: Some(max),
        }
    }

    fn remembered_for(&self) -> Duration {
        self.remembered_for.unwrap_or(REMEMBERED_FOR)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forget_old(&self, log: &mut Log, now: Instant) {
        let keep = self.remembered_for();
        while log
            .entries
            .front()
            .is_some_and(|d| now.saturating_duration_since(d.at) >= keep)
        {
            log.entries.pop_front();
        }
        if log
            .overflowed_at
            .is_some_and(|t| now.saturating_duration_since(t) >= keep)
        {
            log.overflowed_at = None;
        }
    }

    /// Remembers that an object of `namespace` (`None`: cluster-scoped) was deleted at
    /// `version`.
    pub fn record(&self, namespace: Option<&str>, version: Option<&str>) {
        let now = Instant::now();
        let mut log = self.lock();
        self.forget_old(&mut log, now);
        if log.entries.len() >= self.max.unwrap_or(MAX_REMEMBERED) {
            log.entries.pop_front();
            log.overflowed_at = Some(now);
        }
        log.entries.push_back(Deletion {
            namespace: namespace.unwrap_or_default().into(),
            version: version.and_then(|v| v.parse().ok()),
            at: now,
        });
    }

    /// Whether an object of `namespace` — or a cluster-scoped one, which namespaced resources
    /// read too — may have been deleted after `version`: one remembered at a later version (or
    /// at one that is not a number), or the log dropped entries it would still remember.
    pub fn deleted_after(&self, namespace: Option<&str>, version: u64) -> bool {
        let mut log = self.lock();
        self.forget_old(&mut log, Instant::now());
        if log.overflowed_at.is_some() {
            return true;
        }
        let namespace = namespace.unwrap_or_default();
        log.entries.iter().any(|d| {
            (d.namespace.is_empty() || &*d.namespace == namespace)
                && d.version.is_none_or(|v| v > version)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_counts_in_its_namespace_and_after_the_version_asked() {
        let log = DeletionLog::default();
        assert!(!log.deleted_after(Some("team-a"), 0), "nothing deleted yet");
        log.record(Some("team-a"), Some("120"));
        assert!(log.deleted_after(Some("team-a"), 100));
        assert!(
            !log.deleted_after(Some("team-a"), 120),
            "deleted before the resource was written"
        );
        assert!(!log.deleted_after(Some("team-b"), 100), "another namespace");
        log.record(Some("team-b"), Some("not-a-number"));
        assert!(
            log.deleted_after(Some("team-b"), 1_000_000),
            "a version not a number: maybe"
        );
        log.record(None, Some("130"));
        assert!(
            log.deleted_after(Some("team-c"), 125),
            "cluster-scoped objects are read by all"
        );
    }

    #[test]
    fn it_forgets_after_a_while_and_says_maybe_when_it_had_to_drop_recent_ones() {
        let log = DeletionLog::bounded(Duration::from_millis(50), 2);
        log.record(Some("a"), Some("10"));
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            !log.deleted_after(Some("a"), 5),
            "forgotten once older than its bound"
        );

        log.record(Some("a"), Some("11"));
        log.record(Some("a"), Some("12"));
        log.record(Some("a"), Some("13"));
        assert!(
            log.deleted_after(Some("z"), 1_000),
            "full: a recent deletion was dropped, so any namespace may have lost one"
        );
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            !log.deleted_after(Some("z"), 1_000),
            "the doubt lasts as long as the memory"
        );
    }
}
