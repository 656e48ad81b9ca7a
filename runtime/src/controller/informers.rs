//! One watch and cache per kind, shared by every operator that reads or writes it: input kinds
//! as the JSON workers see, output kinds as metadata; stopped with its last user.
//!
//! An input object is serialized for workers once, as it arrives — cut to the input's declared
//! `fields`, if any — and only that JSON and a few metadata fields are kept (not the parsed
//! object: ~10× its JSON in memory). A change no worker could see (the projected JSON, labels
//! and controller unchanged, as for a Deployment's status under a projection without status)
//! updates the cache but requeues nothing. Inputs of one kind with different projections have
//! a watch each; those with the same projection (or none) share one.
//! Ten operators reading Deployments cost one list+watch and one copy of each Deployment, as with
//! controller-runtime's shared informers; the cache is indexed by namespace, so a reconcile
//! reads its namespace's objects only. Each operator's controller subscribes to the changes,
//! each handed over with the version it replaced (a selector that matched the labels before a
//! change requeues its resource, with no per-operator copy of every object's labels); one that
//! falls more than [`EVENT_BUFFER`] changes behind is handed the whole cache once (its queue
//! de-duplicates) instead of missing a change, then without the versions replaced.
//!
//! The host reads its own writes: an object it applies (or prunes) enters the caches of its
//! kind as the API server answered, ahead of the watch event, which then brings nothing new
//! (an event of an older version than the cached one is not cached).

use crate::controller::buckets::CacheScope;
use crate::controller::deletion_log::DeletionLog;
use crate::controller::object_index::{Indexed, ObjectIndex};
use crate::crd::KindRef;
use crate::kinds::ResolvedKind;
use crate::pipeline::inputs::Wanted;
use crate::pipeline::inputs::WorkerObject;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock, Weak};
use tokio::sync::broadcast::{self, error::RecvError};
use wasmpilot_selection::Projection;

/// Objects per list page: a page is parsed whole before its objects are reduced to what the
/// cache keeps, so the page size bounds the transient memory of a (re)list (kube's default: 500).
const LIST_PAGE_SIZE: u32 = 100;

/// Changes a subscriber may fall behind before it is handed the whole cache instead.
pub const EVENT_BUFFER: usize = 256;

/// Input objects as workers see them.
pub type ObjectInformer = Informer<WorkerObject>;
/// Metadata of an output kind (names, labels, owners, uids: what pruning and requeues read).
pub type MetadataInformer = Informer<PartialObjectMeta<DynamicObject>>;

/// What an informer keeps per object: anything that knows its metadata.
pub trait Cached: Indexed + Send + Sync + 'static {
    /// Whether a write this host made is announced to subscribers when it enters the cache
    /// (see [`Informer::wrote`]); else only its watch event is.
    const ANNOUNCE_OWN_WRITES: bool;

    /// The `cache` label of `wasmpilot_cached_objects` for this kind of cache.
    const CACHE: &'static str;

    /// Whether the cache indexes its objects by label too (not only by controller).
    const INDEX_LABELS: bool;

    /// Whether an update from `previous` to `self` concerns no subscriber (then it is cached
    /// but not broadcast).
    fn unchanged_from(&self, previous: &Self) -> bool;
}

impl Cached for WorkerObject {
    /// Announced at once: the watch event that follows is then no news (the same JSON).
    const ANNOUNCE_OWN_WRITES: bool = true;
    const CACHE: &'static str = "inputs";
    /// Inputs are selected by label.
    const INDEX_LABELS: bool = true;

    fn unchanged_from(&self, previous: &Self) -> bool {
        self.same_for_workers(previous)
    }
}

impl Cached for PartialObjectMeta<DynamicObject> {
    /// Not announced: the host's own output writes wake no reconcile (nor does their watch
    /// event, which brings the version already cached); another writer's change is a later
    /// version, announced by its watch event.
    const ANNOUNCE_OWN_WRITES: bool = false;
    const CACHE: &'static str = "outputs";
    /// Output metadata is read by controller (pruning) and by name.
    const INDEX_LABELS: bool = false;

    /// Output metadata: every update is news (pruning and owner requeues read it).
    fn unchanged_from(&self, _previous: &Self) -> bool {
        false
    }
}

impl Indexed for WorkerObject {
    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }
}

impl Indexed for PartialObjectMeta<DynamicObject> {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// A change an informer announces: the object as cached now (or as it was deleted), and the
/// version the cache held before (`None`: new to the cache, deleted, or handed over whole after
/// a subscriber fell behind) — what a selector matched before the change.
pub struct Change<T> {
    pub object: Arc<T>,
    pub before: Option<Arc<T>>,
    /// This host wrote it ([`Informer::wrote`]): an output applied in a reconcile of the
    /// resource controlling it, which has already seen it.
    pub own_write: bool,
}

impl<T> Clone for Change<T> {
    fn clone(&self) -> Self {
        Change {
            object: self.object.clone(),
            before: self.before.clone(),
            own_write: self.own_write,
        }
    }
}

impl<T> Change<T> {
    fn new(object: Arc<T>, before: Option<Arc<T>>) -> Self {
        Change {
            object,
            before,
            own_write: false,
        }
    }
}

/// What an informer keeps of an object this host wrote (an apply's answer).
type KeepWritten<T> = Arc<dyn Fn(&DynamicObject) -> T + Send + Sync>;

/// A running watch of one kind across all namespaces, its cache, and its change feed.
pub struct Informer<T: Cached> {
    pub kind: KindRef,
    pub api: ApiResource,
    pub cache: Arc<Cache<T>>,
    changes: broadcast::Sender<Change<T>>,
    keep_written: KeepWritten<T>,
    /// On a sharded replica: the namespaces to keep (those of the buckets it holds).
    scope: Option<Arc<CacheScope>>,
    coverage: tokio::sync::watch::Receiver<Coverage>,
    /// Every deletion the watch saw lately, in the scope or not (see [`DeletionLog`]).
    deletions: Arc<DeletionLog>,
    /// Whether the watch works, for the operators that read this cache.
    health: crate::controller::watch_health::WatchHealth,
    /// This host's writes of objects of the kind not answered yet (see [`Informer::writing`]).
    in_flight: Arc<InFlight<T>>,
    task: tokio::task::JoinHandle<()>,
    /// Its watch's place on a watch connection (given back when the informer goes).
    stream: Option<crate::controller::watch_connections::WatchStream>,
}

/// An object's place in a cache: its namespace (none when cluster-scoped) and name.
type ObjectKey = (Option<String>, String);

fn key_of(meta: &ObjectMeta) -> ObjectKey {
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// This host's writes of objects of one kind, sent and not answered yet, each with the watch
/// event of its object that arrived meanwhile: the answer tells whether that event brought the
/// write itself (this host's own, which wakes no reconcile of its writer) or another writer's
/// change (announced as usual).
struct InFlight<T> {
    writes: Mutex<HashMap<ObjectKey, HeldEvent<T>>>,
}

struct HeldEvent<T> {
    /// Writes of the object in flight.
    writers: usize,
    /// The change its watch brought while they were; `before` is the version cached when the
    /// first of them arrived (what a selector matched before).
    change: Option<Change<T>>,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight {
            writes: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> InFlight<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, HeldEvent<T>>> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(&self, key: ObjectKey) {
        self.lock()
            .entry(key)
            .or_insert(HeldEvent {
                writers: 0,
                change: None,
            })
            .writers += 1;
    }

    /// `change`, unless a write of its object is in flight: then it is held (`None`).
    fn hold(&self, change: Change<T>, meta: &ObjectMeta) -> Option<Change<T>> {
        let mut writes = self.lock();
        let Some(held) = writes.get_mut(&key_of(meta)) else {
            return Some(change);
        };
        held.change = Some(match held.change.take() {
            Some(earlier) => Change {
                before: earlier.before,
                ..change
            },
            None => change,
        });
        None
    }

    /// The change held for `key`, taken (its write was answered).
    fn take(&self, key: &ObjectKey) -> Option<Change<T>> {
        self.lock().get_mut(key).and_then(|h| h.change.take())
    }

    /// A write of `key` ended: the change still held once none is in flight, to announce.
    fn end(&self, key: &ObjectKey) -> Option<Change<T>> {
        let mut writes = self.lock();
        let held = writes.get_mut(key)?;
        held.writers = held.writers.saturating_sub(1);
        if held.writers > 0 {
            return None;
        }
        writes.remove(key).and_then(|h| h.change)
    }
}

/// What the watch's event of `obj` (new or changed) announces once cached: nothing when it is
/// no news (not newer than the version cached: this host's own write got there first, see
/// [`Informer::wrote`]; or unchanged for subscribers), or while a write of it by this host is in
/// flight (held until the write's answer says whose change it is).
fn watched<T: Cached>(cache: &Cache<T>, in_flight: &InFlight<T>, obj: Arc<T>) -> Option<Change<T>> {
    let change = match cache.insert_unless_older(obj.clone()) {
        Inserted::NotNewer => return None,
        Inserted::Replaced(p) if obj.unchanged_from(&p) => return None,
        Inserted::Replaced(p) => Change::new(obj.clone(), Some(p)),
        Inserted::New => Change::new(obj.clone(), None),
    };
    in_flight.hold(change, obj.meta())
}

/// A write this host is sending ([`Informer::writing`]): when dropped, a watch event of its
/// object still held (its answer never came: the write failed) is announced as usual.
#[must_use = "the write is in flight until this is dropped"]
pub struct WriteInFlight(Option<Box<dyn FnOnce() + Send + Sync>>);

impl Drop for WriteInFlight {
    fn drop(&mut self) {
        if let Some(end) = self.0.take() {
            end();
        }
    }
}

/// How far an informer's cache can be read: whether its first list is complete, and the
/// buckets whose namespaces it holds (`None`: every namespace).
#[derive(Clone, Default)]
struct Coverage {
    listed: bool,
    kept: Option<Arc<BTreeSet<u32>>>,
}

/// Whether a cache keeping `kept` under `scope` holds the objects of `namespace`.
fn keeps(
    scope: Option<&CacheScope>,
    kept: Option<&BTreeSet<u32>>,
    namespace: Option<&str>,
) -> bool {
    match (scope, kept) {
        (Some(scope), Some(kept)) => scope.covers(kept, namespace),
        _ => true,
    }
}

/// The next change of the scope (never, without one).
async fn scope_changed(
    scope: &mut Option<tokio::sync::watch::Receiver<Arc<BTreeSet<u32>>>>,
) -> Result<(), tokio::sync::watch::error::RecvError> {
    match scope {
        Some(rx) => rx.changed().await,
        None => futures::future::pending().await,
    }
}

impl<T: Cached> Drop for Informer<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<T: Cached> Informer<T> {
    /// Watches `W` objects of `kind` and keeps `keep(object)` of each — of the namespaces
    /// `scope` keeps, when sharded: the watch is listed again when the scope grows (a bucket
    /// gained), and what it no longer covers is dropped when it shrinks.
    fn start<W>(
        client: &Client,
        kind: &ResolvedKind,
        keep: impl Fn(W) -> T + Send + 'static,
        keep_written: KeepWritten<T>,
        scope: Option<Arc<CacheScope>>,
    ) -> Self
    where
        W: Resource<DynamicType = ApiResource> + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let api: Api<W> = Api::all_with(client.clone(), &kind.api);
        let cache = Arc::new(Cache::counted(
            crate::metrics::METRICS
                .cached_objects
                .get_or_create(&crate::metrics::CacheLabels {
                    kind: kind.kind.to_string(),
                    cache: T::CACHE.to_string(),
                })
                .clone(),
        ));
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (sender, writer, label) = (changes.clone(), cache.clone(), kind.kind.to_string());
        let (coverage_tx, coverage) = tokio::sync::watch::channel(Coverage::default());
        let watched_scope = scope.clone();
        let deletions = Arc::new(DeletionLog::default());
        let deleted = deletions.clone();
        let health = crate::controller::watch_health::WatchHealth::default();
        let watch_health = health.clone();
        let in_flight: Arc<InFlight<T>> = Arc::default();
        let held_writes = in_flight.clone();
        let task = tokio::spawn(async move {
            let scope = watched_scope.as_deref();
            let mut scope_rx = scope.map(CacheScope::subscribe);
            loop {
                let kept = scope_rx.as_mut().map(|rx| rx.borrow_and_update().clone());
                // What a previous list covered: objects of namespaces it did not are no news
                // (the bucket's gain requeues its resources).
                let mut before = coverage_tx.borrow().clone();
                let mut events = watcher(
                    api.clone(),
                    watcher::Config::default().page_size(LIST_PAGE_SIZE),
                )
                .backoff(crate::controller::schedule::watch_backoff())
                .boxed();
                // A (re)list is collected apart and replaces the cache when complete, as
                // kube-runtime's reflector does: readers never see a half-listed cache.
                let mut relist: Option<ObjectIndex<T>> = None;
                let mut kept = kept;
                loop {
                    let listed = coverage_tx.borrow().listed && relist.is_none();
                    let event = tokio::select! {
                        event = events.next() => match event {
                            Some(event) => event,
                            None => return,
                        },
                        changed = scope_changed(&mut scope_rx), if listed => {
                            let Some(rx) = scope_rx.as_mut().filter(|_| changed.is_ok()) else {
                                scope_rx = None;
                                continue;
                            };
                            let now = rx.borrow_and_update().clone();
                            if kept.as_ref().is_some_and(|k| now.is_subset(k)) {
                                // Buckets let go: drop their namespaces, and hand the
                                // pages they held back (they lie between the objects kept).
                                writer.retain(|ns| keeps(scope, Some(&now), ns));
                                crate::heap::release_free_pages();
                                kept = Some(now);
                                coverage_tx.send_replace(Coverage { listed: true, kept: kept.clone() });
                                continue;
                            }
                            // A bucket gained: list again with the larger scope.
                            break;
                        }
                    };
                    match &event {
                        Ok(_) => watch_health.works(),
                        Err(e) => watch_health.failed(&crate::error_report::Brief(e)),
                    }
                    let in_scope = |meta: &ObjectMeta| {
                        keeps(scope, kept.as_deref(), meta.namespace.as_deref())
                    };
                    let obj = match event {
                        // Out of scope is decided on the object as parsed, before it is cut
                        // to what the cache keeps: a sharded replica receives every object of
                        // the kind and keeps its share, so the others cost no copy.
                        Ok(watcher::Event::Apply(obj)) => {
                            if !in_scope(obj.meta()) {
                                continue;
                            }
                            match watched(&writer, &held_writes, Arc::new(keep(obj))) {
                                Some(change) => change,
                                None => continue,
                            }
                        }
                        Ok(watcher::Event::Delete(obj)) => {
                            let meta = obj.meta();
                            deleted.record(
                                meta.namespace.as_deref(),
                                meta.resource_version.as_deref(),
                            );
                            if !in_scope(obj.meta()) {
                                continue;
                            }
                            let obj = Arc::new(keep(obj));
                            writer.remove(obj.meta());
                            Change::new(obj, None)
                        }
                        Ok(watcher::Event::Init) => {
                            relist = Some(ObjectIndex::new(T::INDEX_LABELS));
                            continue;
                        }
                        Ok(watcher::Event::InitApply(obj)) => {
                            if !in_scope(obj.meta()) {
                                continue;
                            }
                            let obj = Arc::new(keep(obj));
                            let meta = obj.meta();
                            let cached = writer.get(
                                meta.namespace.as_deref(),
                                meta.name.as_deref().unwrap_or_default(),
                            );
                            // A relist (a watch restarted, a bucket gained) re-delivers every
                            // object: one at the version cached is kept as cached, where it
                            // lies, and the copy just parsed is dropped (the kept objects stay
                            // packed rather than move between each list's short-lived pages).
                            if let Some(cached) = cached.as_ref().filter(|c| {
                                c.meta().resource_version.is_some()
                                    && c.meta().resource_version == meta.resource_version
                            }) {
                                if let Some(listed) = relist.as_mut() {
                                    listed.insert(cached.clone());
                                }
                                continue;
                            }
                            if let Some(listed) = relist.as_mut() {
                                listed.insert(obj.clone());
                            }
                            if before.listed
                                && !keeps(scope, before.kept.as_deref(), meta.namespace.as_deref())
                            {
                                continue;
                            }
                            // Of the others, only those that changed for a subscriber are news.
                            if cached.as_ref().is_some_and(|c| obj.unchanged_from(c)) {
                                continue;
                            }
                            Change::new(obj, cached)
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(listed) = relist.take() {
                                writer.replace(listed);
                            }
                            // The listed pages were parsed whole and are dropped: their memory
                            // goes back rather than staying between the objects kept.
                            crate::heap::release_free_pages();
                            before = Coverage {
                                listed: true,
                                kept: kept.clone(),
                            };
                            coverage_tx.send_replace(before.clone());
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(kind = %label, error = %crate::error_report::Brief(&e), "watch failed; retrying with backoff");
                            continue;
                        }
                    };
                    // Err: no operator subscribed right now.
                    let _ = sender.send(obj);
                }
                tracing::debug!(kind = %label, "the cache scope grew: listing again");
            }
        });
        Informer {
            kind: kind.kind.clone(),
            api: kind.api.clone(),
            cache,
            changes,
            keep_written,
            scope,
            coverage,
            deletions,
            health,
            in_flight,
            task,
            stream: None,
        }
    }

    /// Whether this cache's watch works (its error while it fails).
    pub fn health(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.health.subscribe()
    }

    /// Whether an object of `namespace` (or a cluster-scoped one) may have been deleted after
    /// `version`, in this cache's scope or not (see [`DeletionLog::deleted_after`]).
    pub fn deleted_after(&self, namespace: Option<&str>, version: u64) -> bool {
        self.deletions.deleted_after(namespace, version)
    }

    /// Whether this cache keeps the objects of `namespace` (always, unsharded).
    fn keeps_namespace(&self, namespace: Option<&str>) -> bool {
        let coverage = self.coverage.borrow();
        keeps(self.scope.as_deref(), coverage.kept.as_deref(), namespace)
    }

    /// An object this host just wrote (as the API server answered the write), cached ahead of
    /// its watch event: a reconcile that reads it next — the phase chained right after the one
    /// that applied it, or the reconcile its status write brings — sees what was applied, not
    /// what the watch had delivered so far (under load it lags; AutoRoute's Ready then saw the
    /// Gateway Syncing had just applied as missing and went back to Syncing). A version older
    /// than the cached one is not cached, nor is its watch event later.
    pub fn wrote(&self, object: &DynamicObject) {
        if !self.keeps_namespace(object.metadata.namespace.as_deref()) {
            return;
        }
        if let Some(held) = self.in_flight.take(&key_of(&object.metadata)) {
            if held.object.meta().resource_version.is_some()
                && held.object.meta().resource_version == object.metadata.resource_version
            {
                // The watch brought this very write ahead of its answer: this host's own, as
                // if the answer had come first (the cache holds it already).
                if T::ANNOUNCE_OWN_WRITES {
                    let _ = self.changes.send(Change {
                        own_write: true,
                        ..held
                    });
                }
                return;
            }
            // Another writer's change: news as usual.
            let _ = self.changes.send(held);
        }
        let obj = Arc::new((self.keep_written)(object));
        let before = match self.cache.insert_unless_older(obj.clone()) {
            Inserted::NotNewer => return,
            Inserted::Replaced(p) if obj.unchanged_from(&p) => return,
            Inserted::Replaced(p) => Some(p),
            Inserted::New => None,
        };
        if T::ANNOUNCE_OWN_WRITES {
            // Err: no operator subscribed right now.
            let _ = self.changes.send(Change {
                own_write: true,
                ..Change::new(obj, before)
            });
        }
    }

    /// A write of the object `namespace/name` this host is about to send. Until the guard is
    /// dropped (after [`Informer::wrote`] with the write's answer, or without it when the write
    /// failed), a watch event of the object is cached but held: the answer tells whether it
    /// brought that write (this host's own, announced as such) or another writer's change.
    /// Without this, a watch faster than the answer announced the host's own output as someone
    /// else's change, and the resource that applied it reconciled once more.
    pub fn writing(&self, namespace: Option<&str>, name: &str) -> WriteInFlight {
        let key = (namespace.map(str::to_string), name.to_string());
        self.in_flight.begin(key.clone());
        let (in_flight, changes) = (self.in_flight.clone(), self.changes.clone());
        WriteInFlight(Some(Box::new(move || {
            if let Some(held) = in_flight.end(&key) {
                // Err: no operator subscribed right now.
                let _ = changes.send(held);
            }
        })))
    }

    /// An object this host just deleted, gone from the cache ahead of its watch event (which
    /// announces it).
    pub fn deleted(&self, namespace: Option<&str>, name: &str) {
        self.cache.remove_named(namespace, name);
    }

    /// Waits for the first complete list; `false` if the watch stopped before it.
    ///
    /// (Not `Store::wait_until_ready`: kube-runtime 5 wakes only the last of several tasks
    /// waiting on the same store, so a second waiter — a reconcile next to the readiness
    /// report — could hang forever.)
    pub async fn wait_until_ready(&self) -> bool {
        let mut coverage = self.coverage.clone();
        let synced = coverage.wait_for(|c| c.listed).await.is_ok();
        synced
    }

    /// Whether the cache, once listed, holds every namespace the scope keeps now: false while
    /// a bucket just gained is being listed. (Before its first list the operator's own sync
    /// is what is waited for: a list that keeps failing must not hold the replica unready.)
    pub fn covers_scope(&self) -> bool {
        let coverage = self.coverage.borrow();
        !coverage.listed
            || match (self.scope.as_deref(), coverage.kept.as_deref()) {
                (Some(scope), Some(kept)) => scope.current().is_subset(kept),
                (Some(_), None) => false,
                (None, _) => true,
            }
    }

    /// Waits until the cache is listed and holds `namespace` (on a sharded replica, a bucket
    /// just gained is listed again first); `false` if the watch stopped before.
    pub async fn wait_until_covers(&self, namespace: Option<&str>) -> bool {
        let mut coverage = self.coverage.clone();
        let scope = self.scope.as_deref();
        let covered = coverage
            .wait_for(|c| c.listed && keeps(scope, c.kept.as_deref(), namespace))
            .await
            .is_ok();
        covered
    }

    /// Changes from now on; after falling [`EVENT_BUFFER`] behind, every cached object once
    /// (what it replaced unknown).
    pub fn subscribe(&self) -> impl Stream<Item = Change<T>> + Send + 'static {
        let cache = self.cache.clone();
        futures::stream::unfold(self.changes.subscribe(), move |mut rx| {
            let cache = cache.clone();
            async move {
                match rx.recv().await {
                    Ok(obj) => Some((vec![obj], rx)),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(
                            missed,
                            "subscriber lagged: requeueing from the whole cache"
                        );
                        let all = cache.all().into_iter().map(|o| Change::new(o, None));
                        Some((all.collect(), rx))
                    }
                    Err(RecvError::Closed) => None,
                }
            }
        })
        .flat_map(futures::stream::iter)
    }
}

#[cfg(any(test, feature = "testing"))]
impl<T: Cached> Informer<T> {
    /// An informer that holds `objects` and is synced, watching nothing: the caches of a
    /// reconcile run against a scripted API server.
    pub fn holding(kind: &ResolvedKind, objects: Vec<T>, keep_written: KeepWritten<T>) -> Self {
        let cache = Arc::new(Cache::default());
        for obj in objects {
            cache.insert(Arc::new(obj));
        }
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (_, coverage) = tokio::sync::watch::channel(Coverage {
            listed: true,
            kept: None,
        });
        Informer {
            kind: kind.kind.clone(),
            api: kind.api.clone(),
            cache,
            changes,
            keep_written,
            scope: None,
            coverage,
            deletions: Arc::default(),
            health: Default::default(),
            in_flight: Arc::default(),
            task: tokio::spawn(async {}),
            stream: None,
        }
    }
}

#[cfg(test)]
impl<T: Cached> Informer<T> {
    /// An informer whose first list never completes (its watch cannot list, say).
    pub fn unsynced(kind: &ResolvedKind, keep_written: KeepWritten<T>) -> Self {
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (synced, coverage) = tokio::sync::watch::channel(Coverage::default());
        Informer {
            kind: kind.kind.clone(),
            api: kind.api.clone(),
            cache: Arc::new(Cache::default()),
            changes,
            keep_written,
            scope: None,
            coverage,
            deletions: Arc::default(),
            health: Default::default(),
            in_flight: Arc::default(),
            task: tokio::spawn(async move {
                let _synced = synced;
                futures::future::pending::<()>().await
            }),
            stream: None,
        }
    }
}

/// An informer's objects, indexed by namespace, controller and label ([`ObjectIndex`]): a
/// reconcile reads the candidates for its resource, not every object of the kind.
pub struct Cache<T> {
    objects: RwLock<ObjectIndex<T>>,
    /// Counts the objects held (shared with the caches of the same kind: they add up).
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl<T: Cached> Default for Cache<T> {
    fn default() -> Self {
        Self::counted(Default::default())
    }
}

impl<T> Drop for Cache<T> {
    fn drop(&mut self) {
        let objects = self.objects.get_mut().unwrap_or_else(|p| p.into_inner());
        self.gauge.dec_by(objects.len() as i64);
    }
}

impl<T: Cached> Cache<T> {
    /// An empty cache whose size `gauge` follows.
    fn counted(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        Cache {
            objects: RwLock::new(ObjectIndex::new(T::INDEX_LABELS)),
            gauge,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ObjectIndex<T>> {
        self.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ObjectIndex<T>> {
        self.objects.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The objects in `namespace`, by name; `None`: every object of the kind.
    pub fn in_namespace(&self, namespace: Option<&str>) -> Vec<Arc<T>> {
        self.read().in_namespace(namespace)
    }

    /// A superset of the objects `wanted` names, read through the narrowest index (see
    /// [`ObjectIndex::candidates`]).
    pub fn candidates(&self, wanted: &Wanted<'_>) -> Vec<Arc<T>> {
        self.read().candidates(wanted)
    }

    /// One object by namespace (`None`: cluster-scoped) and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<T>> {
        self.read().get(namespace, name).cloned()
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<T>> {
        self.in_namespace(None)
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(any(test, feature = "testing"))]
    fn insert(&self, obj: Arc<T>) -> Option<Arc<T>> {
        let previous = self.write().insert(obj);
        if previous.is_none() {
            self.gauge.inc();
        }
        previous
    }

    /// Caches `obj` unless the cache holds a later version of it (by resourceVersion: this
    /// host's own write, cached before the watch brought the version `obj` is).
    fn insert_unless_older(&self, obj: Arc<T>) -> Inserted<T> {
        let mut objects = self.write();
        let meta = obj.meta();
        let cached = objects.get(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
        if cached.is_some_and(|c| !is_newer(meta, c.meta())) {
            return Inserted::NotNewer;
        }
        match objects.insert(obj) {
            Some(previous) => Inserted::Replaced(previous),
            None => {
                self.gauge.inc();
                Inserted::New
            }
        }
    }

    fn remove(&self, meta: &ObjectMeta) {
        self.remove_named(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    fn remove_named(&self, namespace: Option<&str>, name: &str) {
        if self.write().remove(namespace, name).is_some() {
            self.gauge.dec();
        }
    }

    /// Keeps only the namespaces `keep` accepts (`None`: cluster-scoped objects).
    fn retain(&self, keep: impl Fn(Option<&str>) -> bool) {
        let mut objects = self.write();
        let before = objects.len() as i64;
        objects.retain_namespaces(keep);
        self.gauge.dec_by(before - objects.len() as i64);
    }

    fn replace(&self, listed: ObjectIndex<T>) {
        let mut objects = self.write();
        self.gauge
            .inc_by(listed.len() as i64 - objects.len() as i64);
        *objects = listed;
    }
}

/// What [`Cache::insert_unless_older`] did.
enum Inserted<T> {
    New,
    Replaced(Arc<T>),
    /// The cache holds this version or a later one: nothing changed.
    NotNewer,
}

/// Whether `incoming` is a later version than `cached`, or cannot be ordered against it.
/// resourceVersions are opaque to clients, but every API server in use issues etcd
/// revisions, which order the writes of an object; one that is not a number counts as newer
/// when it differs (the watch's order is then the only order).
pub(crate) fn is_newer(incoming: &ObjectMeta, cached: &ObjectMeta) -> bool {
    let revision = |m: &ObjectMeta| m.resource_version.as_deref()?.parse::<u64>().ok();
    match (revision(incoming), revision(cached)) {
        (Some(i), Some(c)) => i > c,
        _ => {
            incoming.resource_version != cached.resource_version
                || incoming.resource_version.is_none()
        }
    }
}

/// What tells input watches apart: the kind, and the projection its objects are cut to.
/// An input watch: its kind, projection, and whether it caches every namespace.
type InputWatch = (KindRef, Option<Projection>, bool);

/// The host's informers, by kind (and projection, for inputs); operators share them while any
/// of them runs.
pub struct Informers {
    connections: Arc<crate::controller::watch_connections::WatchConnections>,
    objects: Mutex<HashMap<InputWatch, Weak<ObjectInformer>>>,
    metadata: Mutex<HashMap<KindRef, Weak<MetadataInformer>>>,
    /// On a sharded replica: the namespaces the caches keep.
    scope: Option<Arc<CacheScope>>,
}

impl Informers {
    /// The client of the first watch connection (the host's own watches).
    pub fn client(&self) -> Client {
        self.connections.first()
    }

    /// Caches watching on `client` only.
    pub fn new(client: Client) -> Self {
        Informers::with_connections(Arc::new(
            crate::controller::watch_connections::WatchConnections::single(client),
        ))
    }

    /// Caches watching on `connections`, as many as their watches need.
    pub fn with_connections(
        connections: Arc<crate::controller::watch_connections::WatchConnections>,
    ) -> Self {
        Informers {
            connections,
            objects: Mutex::default(),
            metadata: Mutex::default(),
            scope: None,
        }
    }

    /// Caches that keep only the namespaces `scope` covers (a sharded replica's buckets).
    pub fn with_scope(mut self, scope: Option<Arc<CacheScope>>) -> Self {
        self.scope = scope;
        self
    }

    /// The informer of an input kind cut to `projection` (objects as workers see them),
    /// started if no operator holds one yet; caching only the sharded replica's namespaces
    /// unless `every_namespace` (inputs read across namespaces).
    pub fn objects(
        &self,
        kind: &ResolvedKind,
        projection: Option<Projection>,
        every_namespace: bool,
    ) -> Arc<ObjectInformer> {
        let kind_ref = kind.kind.clone();
        let key = (kind.kind.clone(), projection.clone(), every_namespace);
        let scope = if every_namespace {
            None
        } else {
            self.scope.clone()
        };
        let view: KeepWritten<WorkerObject> =
            Arc::new(move |o: &DynamicObject| WorkerObject::new(o, &kind_ref, projection.as_ref()));
        shared(&self.objects, key, kind, || {
            let keep = view.clone();
            let (client, stream) = self.connections.take();
            let mut informer =
                Informer::start(&client, kind, move |o: DynamicObject| keep(&o), view, scope);
            informer.stream = Some(stream);
            informer
        })
    }

    /// The metadata informer of an output kind, started if no operator holds it yet.
    pub fn metadata(&self, kind: &ResolvedKind) -> Arc<MetadataInformer> {
        shared(&self.metadata, kind.kind.clone(), kind, || {
            let (client, stream) = self.connections.take();
            let mut informer = Informer::start(
                &client,
                kind,
                |mut m: PartialObjectMeta<DynamicObject>| {
                    strip_metadata(&mut m);
                    m
                },
                Arc::new(metadata_of),
                self.scope.clone(),
            );
            informer.stream = Some(stream);
            informer
        })
    }

    /// The kinds whose caches do not hold every namespace the scope keeps yet (listing again
    /// for a bucket gained), by name.
    pub fn listing(&self) -> Vec<String> {
        fn of<K, T: Cached>(map: &Mutex<HashMap<K, Weak<Informer<T>>>>) -> Vec<String> {
            map.lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter_map(Weak::upgrade)
                .filter(|i| !i.covers_scope())
                .map(|i| i.kind.to_string())
                .collect()
        }
        let mut kinds = of(&self.objects);
        kinds.extend(of(&self.metadata));
        kinds.sort();
        kinds.dedup();
        kinds
    }

    /// How many input and output kinds are watched right now.
    pub fn watched(&self) -> (usize, usize) {
        (live_count(&self.objects), live_count(&self.metadata))
    }
}

fn live_count<K, T>(map: &Mutex<HashMap<K, Weak<T>>>) -> usize {
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|w| w.strong_count() > 0)
        .count()
}

fn shared<K: std::hash::Hash + Eq, T: Cached>(
    map: &Mutex<HashMap<K, Weak<Informer<T>>>>,
    key: K,
    kind: &ResolvedKind,
    start: impl FnOnce() -> Informer<T>,
) -> Arc<Informer<T>> {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(informer) = map.get(&key).and_then(Weak::upgrade) {
        if informer.api == kind.api {
            tracing::debug!(kind = %kind.kind, "sharing the running watch");
            return informer;
        }
    }
    tracing::debug!(kind = %kind.kind, "starting a shared watch");
    let informer = Arc::new(start());
    map.retain(|_, w| w.strong_count() > 0);
    map.insert(key, Arc::downgrade(&informer));
    informer
}

/// The metadata an output informer keeps of an object this host wrote.
pub fn metadata_of(o: &DynamicObject) -> PartialObjectMeta<DynamicObject> {
    let mut m = PartialObjectMeta {
        types: None,
        metadata: o.metadata.clone(),
        _phantom: std::marker::PhantomData,
    };
    strip_metadata(&mut m);
    m
}

/// Output metadata keeps what pruning and owner requeues read.
fn strip_metadata(m: &mut PartialObjectMeta<DynamicObject>) {
    m.metadata.managed_fields = None;
    m.metadata.annotations = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: Option<&str>, name: &str) -> Arc<PartialObjectMeta<DynamicObject>> {
        let mut o: PartialObjectMeta<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
        }))
        .unwrap();
        o.metadata.namespace = ns.map(str::to_string);
        Arc::new(o)
    }

    fn names(objects: Vec<Arc<PartialObjectMeta<DynamicObject>>>) -> Vec<String> {
        objects
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }

    #[test]
    fn cache_is_indexed_by_namespace() {
        let cache: Cache<PartialObjectMeta<DynamicObject>> = Cache::default();
        for (ns, name) in [
            (Some("a"), "z"),
            (Some("b"), "x"),
            (Some("a"), "y"),
            (None, "c"),
        ] {
            cache.insert(obj(ns, name));
        }
        assert_eq!(names(cache.in_namespace(Some("a"))), ["y", "z"]);
        assert_eq!(names(cache.in_namespace(Some("b"))), ["x"]);
        assert_eq!(
            names(cache.in_namespace(Some(""))),
            ["c"],
            "cluster-scoped under \"\""
        );
        assert!(cache.in_namespace(Some("other")).is_empty());
        assert_eq!(cache.len(), 4);

        cache.insert(obj(Some("a"), "y")); // an update replaces
        cache.remove(&obj(Some("a"), "z").metadata);
        cache.remove(&obj(Some("b"), "x").metadata);
        assert_eq!(names(cache.in_namespace(Some("a"))), ["y"]);
        assert_eq!(cache.len(), 2);

        let mut listed = ObjectIndex::new(false);
        listed.insert(obj(Some("d"), "w"));
        cache.replace(listed);
        assert_eq!(names(cache.all()), ["w"]);
    }

    fn config_maps() -> ResolvedKind {
        ResolvedKind {
            kind: KindRef::new("v1", "ConfigMap"),
            api: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
        }
    }

    fn version(name: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "a", "resourceVersion": rv},
            "data": {"rv": rv}
        }))
        .unwrap()
    }

    /// The host's own write is cached at once and announced; the watch's older events of the
    /// same object, arriving after it, change nothing; a later version replaces it.
    #[tokio::test]
    async fn own_writes_are_read_back_and_older_watch_events_do_not_undo_them() {
        let kind = config_maps();
        let kind_ref = kind.kind.clone();
        let informer = Informer::holding(
            &kind,
            vec![WorkerObject::new(&version("c", "9"), &kind_ref, None)],
            Arc::new(move |o: &DynamicObject| WorkerObject::new(o, &kind_ref, None)),
        );
        let mut changes = informer.changes.subscribe();
        let json =
            |i: &Informer<WorkerObject>| i.cache.get(Some("a"), "c").map(|o| o.json.to_string());

        informer.wrote(&version("c", "11"));
        assert!(json(&informer).is_some_and(|j| j.contains(r#""rv":"11""#)));
        let announced = changes.try_recv().expect("the write is announced");
        assert_eq!(
            announced.object.metadata().resource_version.as_deref(),
            Some("11")
        );
        assert_eq!(
            announced
                .before
                .as_ref()
                .and_then(|b| b.metadata().resource_version.as_deref()),
            Some("9"),
            "the version it replaced is announced with it"
        );
        assert!(
            announced.own_write,
            "announced as this host's: the writer's own owned inputs are not requeued by it"
        );

        // The watch's event of version 10 (written before) comes late: not cached, not news.
        let late = Arc::new(WorkerObject::new(&version("c", "10"), &kind.kind, None));
        assert!(matches!(
            informer.cache.insert_unless_older(late),
            Inserted::NotNewer
        ));
        // The watch's event of version 11 itself: no news either.
        let same = Arc::new(WorkerObject::new(&version("c", "11"), &kind.kind, None));
        assert!(matches!(
            informer.cache.insert_unless_older(same),
            Inserted::NotNewer
        ));
        assert!(json(&informer).is_some_and(|j| j.contains(r#""rv":"11""#)));
        let later = Arc::new(WorkerObject::new(&version("c", "12"), &kind.kind, None));
        assert!(matches!(
            informer.cache.insert_unless_older(later),
            Inserted::Replaced(_)
        ));

        informer.deleted(Some("a"), "c");
        assert!(json(&informer).is_none());
        assert!(
            changes.try_recv().is_err(),
            "a deletion is announced by its watch event"
        );
    }

    /// A watch event that brings the host's own write ahead of the write's answer is announced
    /// as the host's own (which wakes no reconcile of its writer), once the answer shows it;
    /// another writer's change held meanwhile, or one whose write failed, is announced as usual.
    #[tokio::test]
    async fn a_watch_event_ahead_of_the_hosts_own_write_is_told_apart_by_its_answer() {
        let kind = config_maps();
        let kind_ref = kind.kind.clone();
        let worker_object = {
            let kind = kind_ref.clone();
            move |o: &DynamicObject| WorkerObject::new(o, &kind, None)
        };
        let informer = Informer::holding(
            &kind,
            vec![worker_object(&version("c", "9"))],
            Arc::new(worker_object.clone()),
        );
        let mut changes = informer.changes.subscribe();
        // As the watch task does with an event.
        let event = |rv: &str| {
            if let Some(change) = watched(
                &informer.cache,
                &informer.in_flight,
                Arc::new(worker_object(&version("c", rv))),
            ) {
                let _ = informer.changes.send(change);
            }
        };
        let rv = |c: &Change<WorkerObject>| c.object.metadata().resource_version.clone();
        let cached = || {
            informer
                .cache
                .get(Some("a"), "c")
                .and_then(|o| o.metadata().resource_version.clone())
        };

        // The host's write of version 11: its watch event comes before its answer.
        let write = informer.writing(Some("a"), "c");
        event("11");
        assert_eq!(
            cached().as_deref(),
            Some("11"),
            "cached at once all the same"
        );
        assert!(changes.try_recv().is_err(), "held until the answer comes");
        informer.wrote(&version("c", "11"));
        drop(write);
        let own = changes.try_recv().expect("announced once answered");
        assert!(own.own_write, "announced as this host's own write");
        assert_eq!(rv(&own).as_deref(), Some("11"));
        assert_eq!(
            own.before
                .as_ref()
                .and_then(|b| b.metadata().resource_version.clone())
                .as_deref(),
            Some("9"),
            "with the version it replaced"
        );
        assert!(changes.try_recv().is_err(), "announced once");

        // Another writer's version 12 arrives while the host's write of 13 is in flight.
        let write = informer.writing(Some("a"), "c");
        event("12");
        assert!(changes.try_recv().is_err());
        informer.wrote(&version("c", "13"));
        drop(write);
        let theirs = changes.try_recv().expect("the other writer's change");
        assert!(!theirs.own_write, "another writer's change is news");
        assert_eq!(rv(&theirs).as_deref(), Some("12"));
        let own = changes.try_recv().expect("then the host's own");
        assert!(own.own_write);
        assert_eq!(rv(&own).as_deref(), Some("13"));

        // A write that fails (no answer): the change held is announced as usual.
        let write = informer.writing(Some("a"), "c");
        event("14");
        assert!(changes.try_recv().is_err());
        drop(write);
        let theirs = changes.try_recv().expect("announced when the write ends");
        assert!(!theirs.own_write);
        assert_eq!(rv(&theirs).as_deref(), Some("14"));

        // With no write in flight, an event is announced at once.
        event("15");
        let theirs = changes.try_recv().expect("announced at once");
        assert!(!theirs.own_write);
        assert_eq!(rv(&theirs).as_deref(), Some("15"));
    }

    /// Output metadata: the host's own write, whose watch event came first, is not announced
    /// at all (it would requeue the resource that applied it).
    #[tokio::test]
    async fn own_output_writes_ahead_of_their_answer_wake_nothing() {
        let kind = config_maps();
        let informer: MetadataInformer =
            Informer::holding(&kind, Vec::new(), Arc::new(metadata_of));
        let mut changes = informer.changes.subscribe();
        let write = informer.writing(Some("a"), "c");
        if let Some(change) = watched(
            &informer.cache,
            &informer.in_flight,
            Arc::new(metadata_of(&version("c", "3"))),
        ) {
            let _ = informer.changes.send(change);
        }
        informer.wrote(&version("c", "3"));
        drop(write);
        assert!(
            changes.try_recv().is_err(),
            "the host's own output write woke a reconcile"
        );
        assert!(informer.cache.get(Some("a"), "c").is_some());
    }

    #[test]
    fn versions_that_are_not_numbers_are_newer_when_they_differ() {
        let meta = |rv: Option<&str>| ObjectMeta {
            resource_version: rv.map(str::to_string),
            ..Default::default()
        };
        assert!(is_newer(&meta(Some("12")), &meta(Some("9"))));
        assert!(!is_newer(&meta(Some("9")), &meta(Some("12"))));
        assert!(!is_newer(&meta(Some("9")), &meta(Some("9"))));
        assert!(is_newer(&meta(Some("b")), &meta(Some("a"))));
        assert!(!is_newer(&meta(Some("a")), &meta(Some("a"))));
        assert!(is_newer(&meta(None), &meta(None)));
    }
}
