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
//! reads its namespace's objects only. Each operator's controller subscribes to the changes;
//! one that falls more than [`EVENT_BUFFER`] changes behind is handed the whole cache once
//! (its queue de-duplicates) instead of missing a change.

use crate::crd::KindRef;
use crate::kinds::ResolvedKind;
use crate::pipeline::inputs::WorkerObject;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
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
pub trait Cached: Send + Sync + 'static {
    fn meta(&self) -> &ObjectMeta;

    /// Whether an update from `previous` to `self` concerns no subscriber (then it is cached
    /// but not broadcast).
    fn unchanged_from(&self, previous: &Self) -> bool;
}

impl Cached for WorkerObject {
    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }

    fn unchanged_from(&self, previous: &Self) -> bool {
        self.same_for_workers(previous)
    }
}

impl Cached for PartialObjectMeta<DynamicObject> {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    /// Output metadata: every update is news (pruning and owner requeues read it).
    fn unchanged_from(&self, _previous: &Self) -> bool {
        false
    }
}

/// A running watch of one kind across all namespaces, its cache, and its change feed.
pub struct Informer<T: Cached> {
    pub kind: KindRef,
    pub api: ApiResource,
    pub cache: Arc<Cache<T>>,
    changes: broadcast::Sender<Arc<T>>,
    ready: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Cached> Drop for Informer<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<T: Cached> Informer<T> {
    /// Watches `W` objects of `kind` and keeps `keep(object)` of each.
    fn start<W>(
        client: &Client,
        kind: &ResolvedKind,
        keep: impl Fn(W) -> T + Send + 'static,
    ) -> Self
    where
        W: Resource<DynamicType = ApiResource> + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let api: Api<W> = Api::all_with(client.clone(), &kind.api);
        let cache = Arc::new(Cache::default());
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (sender, writer, label) = (changes.clone(), cache.clone(), kind.kind.to_string());
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default().page_size(LIST_PAGE_SIZE))
                .backoff(crate::controller::schedule::watch_backoff())
                .boxed();
            // A (re)list is collected apart and replaces the cache when complete, as
            // kube-runtime's reflector does: readers never see a half-listed cache.
            let mut relist: Option<ByNamespace<T>> = None;
            while let Some(event) = events.next().await {
                let obj = match event {
                    Ok(watcher::Event::Apply(obj)) => {
                        let obj = Arc::new(keep(obj));
                        let previous = writer.insert(obj.clone());
                        if previous.is_some_and(|p| obj.unchanged_from(&p)) {
                            continue;
                        }
                        obj
                    }
                    Ok(watcher::Event::Delete(obj)) => {
                        let obj = Arc::new(keep(obj));
                        writer.remove(obj.meta());
                        obj
                    }
                    Ok(watcher::Event::Init) => {
                        relist = Some(ByNamespace::new());
                        continue;
                    }
                    Ok(watcher::Event::InitApply(obj)) => {
                        let obj = Arc::new(keep(obj));
                        if let Some(listed) = relist.as_mut() {
                            insert_into(listed, obj.clone());
                        }
                        // A relist after a watch restart re-delivers every object: only
                        // those that changed meanwhile are news.
                        let meta = obj.meta();
                        let cached = writer.get(
                            meta.namespace.as_deref(),
                            meta.name.as_deref().unwrap_or_default(),
                        );
                        if cached.is_some_and(|c| obj.unchanged_from(&c)) {
                            continue;
                        }
                        obj
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listed) = relist.take() {
                            writer.replace(listed);
                        }
                        ready_tx.send_replace(true);
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(kind = %label, error = %e, "watch failed; retrying with backoff");
                        continue;
                    }
                };
                // Err: no operator subscribed right now.
                let _ = sender.send(obj);
            }
        });
        Informer {
            kind: kind.kind.clone(),
            api: kind.api.clone(),
            cache,
            changes,
            ready,
            task,
        }
    }

    /// Waits for the first complete list; `false` if the watch stopped before it.
    ///
    /// (Not `Store::wait_until_ready`: kube-runtime 5 wakes only the last of several tasks
    /// waiting on the same store, so a second waiter — a reconcile next to the readiness
    /// report — could hang forever.)
    pub async fn wait_until_ready(&self) -> bool {
        let mut ready = self.ready.clone();
        let synced = ready.wait_for(|r| *r).await.is_ok();
        synced
    }

    /// Changes from now on; after falling [`EVENT_BUFFER`] behind, every cached object once.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<T>> + Send + 'static {
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
                        Some((cache.all(), rx))
                    }
                    Err(RecvError::Closed) => None,
                }
            }
        })
        .flat_map(futures::stream::iter)
    }
}

#[cfg(test)]
impl<T: Cached> Informer<T> {
    /// An informer that holds `objects` and is synced, watching nothing: the caches of a
    /// reconcile run against a scripted API server.
    pub fn holding(kind: &ResolvedKind, objects: Vec<T>) -> Self {
        let cache = Arc::new(Cache::default());
        for obj in objects {
            cache.insert(Arc::new(obj));
        }
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (_, ready) = tokio::sync::watch::channel(true);
        Informer {
            kind: kind.kind.clone(),
            api: kind.api.clone(),
            cache,
            changes,
            ready,
            task: tokio::spawn(async {}),
        }
    }
}

/// Objects by namespace (`""`: cluster-scoped) and name.
type ByNamespace<T> = HashMap<String, BTreeMap<String, Arc<T>>>;

/// Caches `obj`, returning the object it replaces.
fn insert_into<T: Cached>(map: &mut ByNamespace<T>, obj: Arc<T>) -> Option<Arc<T>> {
    let meta = obj.meta();
    let (ns, name) = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    map.entry(ns).or_default().insert(name, obj)
}

/// An informer's objects, indexed by namespace: a reconcile reads its own namespace's objects,
/// not every object of the kind.
pub struct Cache<T> {
    objects: RwLock<ByNamespace<T>>,
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache {
            objects: RwLock::new(HashMap::new()),
        }
    }
}

impl<T: Cached> Cache<T> {
    /// The objects in `namespace`, by name; `None`: every object of the kind.
    pub fn in_namespace(&self, namespace: Option<&str>) -> Vec<Arc<T>> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        match namespace {
            Some(ns) => objects
                .get(ns)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default(),
            None => objects.values().flat_map(|m| m.values().cloned()).collect(),
        }
    }

    /// One object by namespace (`None`: cluster-scoped) and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<T>> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        objects
            .get(namespace.unwrap_or_default())?
            .get(name)
            .cloned()
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<T>> {
        self.in_namespace(None)
    }

    pub fn len(&self) -> usize {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        objects.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&self, obj: Arc<T>) -> Option<Arc<T>> {
        insert_into(
            &mut self.objects.write().unwrap_or_else(|p| p.into_inner()),
            obj,
        )
    }

    fn remove(&self, meta: &ObjectMeta) {
        let ns = meta.namespace.clone().unwrap_or_default();
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        if let Some(names) = objects.get_mut(&ns) {
            names.remove(meta.name.as_deref().unwrap_or_default());
            if names.is_empty() {
                objects.remove(&ns);
            }
        }
    }

    fn replace(&self, listed: ByNamespace<T>) {
        *self.objects.write().unwrap_or_else(|p| p.into_inner()) = listed;
    }
}

/// What tells input watches apart: the kind, and the projection its objects are cut to.
type InputWatch = (KindRef, Option<Projection>);

/// The host's informers, by kind (and projection, for inputs); operators share them while any
/// of them runs.
pub struct Informers {
    client: Client,
    objects: Mutex<HashMap<InputWatch, Weak<ObjectInformer>>>,
    metadata: Mutex<HashMap<KindRef, Weak<MetadataInformer>>>,
}

impl Informers {
    pub fn new(client: Client) -> Self {
        Informers {
            client,
            objects: Mutex::default(),
            metadata: Mutex::default(),
        }
    }

    /// The informer of an input kind cut to `projection` (objects as workers see them),
    /// started if no operator holds one yet.
    pub fn objects(
        &self,
        kind: &ResolvedKind,
        projection: Option<Projection>,
    ) -> Arc<ObjectInformer> {
        let kind_ref = kind.kind.clone();
        let key = (kind.kind.clone(), projection.clone());
        shared(&self.objects, key, kind, || {
            Informer::start(&self.client, kind, move |o: DynamicObject| {
                WorkerObject::new(&o, &kind_ref, projection.as_ref())
            })
        })
    }

    /// The metadata informer of an output kind, started if no operator holds it yet.
    pub fn metadata(&self, kind: &ResolvedKind) -> Arc<MetadataInformer> {
        shared(&self.metadata, kind.kind.clone(), kind, || {
            Informer::start(
                &self.client,
                kind,
                |mut m: PartialObjectMeta<DynamicObject>| {
                    strip_metadata(&mut m);
                    m
                },
            )
        })
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

        let mut listed = ByNamespace::new();
        insert_into(&mut listed, obj(Some("d"), "w"));
        cache.replace(listed);
        assert_eq!(names(cache.all()), ["w"]);
    }
}
