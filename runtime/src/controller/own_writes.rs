//! This host's own status writes, remembered per resource until their watch events arrive, so
//! the event of a write the host already acted on reconciles nothing.

use kube::api::DynamicObject;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Resources at most remembered with an own write whose watch event has not arrived (a
/// resource deleted meanwhile never brings it); beyond, the memory starts over.
const OWN_WRITES_KEPT: usize = 100_000;

/// How long the resource's watch waits for a status write of this host in flight to answer
/// before it takes an event of that resource as someone else's.
const OWN_WRITE_WAIT: Duration = Duration::from_secs(5);

/// This host's status writes per resource (by uid): in flight, or the resourceVersion the last
/// one produced until its watch event arrives. That event is this host's own write, already
/// acted on (the phase it moved to was run in the same reconcile, or a requeue is set), and
/// reconciles nothing; an event arriving while a write is in flight waits for its answer to
/// tell. A worker whose every decision changes its status therefore writes at its
/// `requeue_after` pace, not as fast as the watch brings its writes back.
#[derive(Default)]
pub struct OwnWrites {
    writes: std::sync::Mutex<HashMap<String, OwnWrite>>,
    answered: tokio::sync::Notify,
}

enum OwnWrite {
    InFlight,
    /// The resource as the write answered.
    Wrote(Arc<DynamicObject>),
}

impl OwnWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnWrite>> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A status write of the resource `uid` is about to be sent.
    pub(crate) fn begin(&self, uid: Option<&str>) {
        let Some(uid) = uid else { return };
        let mut writes = self.lock();
        if writes.len() >= OWN_WRITES_KEPT {
            writes.clear();
        }
        writes.insert(uid.to_string(), OwnWrite::InFlight);
    }

    /// The write begun for `uid` was answered: `written` (none if it failed).
    pub(crate) fn finish(&self, uid: Option<&str>, written: Option<&DynamicObject>) {
        let Some(uid) = uid else { return };
        {
            let mut writes = self.lock();
            match written.filter(|w| w.metadata.resource_version.is_some()) {
                Some(w) => writes.insert(uid.to_string(), OwnWrite::Wrote(Arc::new(w.clone()))),
                None => writes.remove(uid),
            };
        }
        self.answered.notify_waiters();
    }

    /// This host's last status write of `obj`'s resource, as the API server answered it, when
    /// it is newer than `obj` (its watch event has not arrived yet, so the cache still holds an
    /// older version): what a reconcile should decide from.
    pub fn newer_than(&self, obj: &DynamicObject) -> Option<Arc<DynamicObject>> {
        let uid = obj.metadata.uid.as_deref()?;
        match self.lock().get(uid) {
            Some(OwnWrite::Wrote(written))
                if crate::controller::informers::is_newer(&written.metadata, &obj.metadata) =>
            {
                Some(written.clone())
            }
            _ => None,
        }
    }

    /// Whether the version `rv` of the resource `uid`, as its watch brings it, is exactly this
    /// host's last write of it; waits (bounded) for a write of it in flight to be answered first.
    pub async fn is_own(&self, uid: Option<String>, rv: Option<String>) -> bool {
        let (Some(uid), Some(rv)) = (uid, rv) else {
            return false;
        };
        let (uid, rv) = (&uid, &rv);
        let waited = std::time::Instant::now();
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            {
                let mut writes = self.lock();
                match writes.get(uid) {
                    Some(OwnWrite::InFlight) => {}
                    Some(OwnWrite::Wrote(written))
                        if written.metadata.resource_version.as_ref() == Some(rv) =>
                    {
                        writes.remove(uid);
                        return true;
                    }
                    _ => return false,
                }
            }
            let left = OWN_WRITE_WAIT.saturating_sub(waited.elapsed());
            if left.is_zero() || tokio::time::timeout(left, answered).await.is_err() {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn written(rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            "metadata": {"name": "r", "uid": "u1", "resourceVersion": rv}
        }))
        .expect("an object")
    }

    /// The watch event of a write still in flight waits for its answer; the event of the
    /// version written is the host's own (once), any other version is news.
    #[tokio::test]
    async fn own_status_writes_are_told_from_other_changes() {
        let own = Arc::new(OwnWrites::default());
        let some = |s: &str| Some(s.to_string());
        own.begin(Some("u1"));
        let waiting = {
            let own = own.clone();
            tokio::spawn(async move { own.is_own(some("u1"), some("5")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "waits while the write is in flight");
        own.finish(Some("u1"), Some(&written("5")));
        assert!(
            waiting.await.expect("the waiting event"),
            "the write's own event"
        );
        assert!(!own.is_own(some("u1"), some("5")).await, "told once");
        own.begin(Some("u1"));
        own.finish(Some("u1"), Some(&written("7")));
        assert!(
            !own.is_own(some("u1"), some("6")).await,
            "another writer's version"
        );
        assert!(!own.is_own(some("u2"), some("7")).await, "another resource");
        own.begin(Some("u1"));
        own.finish(Some("u1"), None);
        assert!(
            !own.is_own(some("u1"), some("7")).await,
            "a failed write wrote nothing"
        );
    }

    /// A reconcile started from a cache that does not hold this host's last write yet decides
    /// from that write; once the cache holds it (or a later version), from the cache.
    #[test]
    fn the_last_own_write_is_read_until_the_cache_catches_up() {
        let own = OwnWrites::default();
        assert!(own.newer_than(&written("4")).is_none(), "nothing written");
        own.begin(Some("u1"));
        assert!(own.newer_than(&written("4")).is_none(), "in flight");
        own.finish(Some("u1"), Some(&written("5")));
        let newer = own.newer_than(&written("4")).expect("the write");
        assert_eq!(newer.metadata.resource_version.as_deref(), Some("5"));
        assert!(
            own.newer_than(&written("5")).is_none(),
            "the cache caught up"
        );
        assert!(own.newer_than(&written("6")).is_none(), "a later version");
    }
}
