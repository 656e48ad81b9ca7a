//! One watch and cache per kind, shared by every operator that reads or writes it: input kinds
//! as whole objects (bookkeeping stripped), output kinds as metadata; stopped with its last user.
//!
//! Ten operators reading Deployments cost one list+watch and one copy of each Deployment, as with
//! controller-runtime's shared informers; the cache is indexed by namespace, so a reconcile
//! reads its namespace's objects only. Each operator's controller subscribes to the changes;
//! one that falls more than [`EVENT_BUFFER`] changes behind is handed the whole cache once
//! (its queue de-duplicates) instead of missing a change.

use crate::crd::KindRef;
use crate::inputs::JsonCache;
use crate::kinds::ResolvedKind;
use futures::{Stream, StreamExt};
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock, Weak};
use tokio::sync::broadcast::{self, error::RecvError};

/// Changes a subscriber may fall behind before it is handed the whole cache instead.
pub const EVENT_BUFFER: usize = 256;

/// Whole objects of an input kind.
pub type ObjectInformer = Informer<DynamicObject>;
/// Metadata of an output kind (names, labels, owners, uids: what pruning and requeues read).
pub type MetadataInformer = Informer<PartialObjectMeta<DynamicObject>>;

/// A running watch of one kind across all namespaces, its cache, and its change feed.
pub struct Informer<K: Resource<DynamicType = ApiResource> + Clone + 'static> {
    pub kind: KindRef,
    pub api: ApiResource,
    pub cache: Arc<Cache<K>>,
    /// Objects as workers see them, serialized once per resourceVersion (inputs only).
    pub json: JsonCache,
    changes: broadcast::Sender<Arc<K>>,
    ready: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource<DynamicType = ApiResource> + Clone + 'static> Drop for Informer<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ApiResource>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    fn start(client: &Client, kind: &ResolvedKind, strip: fn(&mut K)) -> Self {
        let api: Api<K> = Api::all_with(client.clone(), &kind.api);
        let cache = Arc::new(Cache::default());
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (sender, writer, label) = (changes.clone(), cache.clone(), kind.kind.to_string());
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .backoff(crate::schedule::watch_backoff())
                .modify(strip)
                .boxed();
            // A (re)list is collected apart and replaces the cache when complete, as
            // kube-runtime's reflector does: readers never see a half-listed cache.
            let mut relist: Option<ByNamespace<K>> = None;
            while let Some(event) = events.next().await {
                let obj = match event {
                    Ok(watcher::Event::Apply(obj)) => {
                        let obj = Arc::new(obj);
                        writer.insert(obj.clone());
                        obj
                    }
                    Ok(watcher::Event::Delete(obj)) => {
                        writer.remove(&obj);
                        Arc::new(obj)
                    }
                    Ok(watcher::Event::Init) => {
                        relist = Some(ByNamespace::new());
                        continue;
                    }
                    Ok(watcher::Event::InitApply(obj)) => {
                        let obj = Arc::new(obj);
                        if let Some(listed) = relist.as_mut() {
                            insert_into(listed, obj.clone());
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
            json: JsonCache::default(),
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
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
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

impl ObjectInformer {
    /// Forgets serialized objects that left the cache (bounded memory under churn).
    pub fn sweep_json(&self) {
        if !self.json.needs_sweep() {
            return;
        }
        let state = self.cache.all();
        let live: std::collections::HashSet<&str> = state
            .iter()
            .filter_map(|o| o.metadata.uid.as_deref())
            .collect();
        self.json.retain(&live);
    }
}

/// Objects by namespace (`""`: cluster-scoped) and name.
type ByNamespace<K> = HashMap<String, BTreeMap<String, Arc<K>>>;

fn insert_into<K: Resource>(map: &mut ByNamespace<K>, obj: Arc<K>) {
    let meta = obj.meta();
    let (ns, name) = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    map.entry(ns).or_default().insert(name, obj);
}

/// An informer's objects, indexed by namespace: a reconcile reads its own namespace's objects,
/// not every object of the kind.
pub struct Cache<K> {
    objects: RwLock<ByNamespace<K>>,
}

impl<K> Default for Cache<K> {
    fn default() -> Self {
        Cache {
            objects: RwLock::new(HashMap::new()),
        }
    }
}

impl<K: Resource> Cache<K> {
    /// The objects in `namespace`, by name; `None`: every object of the kind.
    pub fn in_namespace(&self, namespace: Option<&str>) -> Vec<Arc<K>> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        match namespace {
            Some(ns) => objects
                .get(ns)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default(),
            None => objects.values().flat_map(|m| m.values().cloned()).collect(),
        }
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<K>> {
        self.in_namespace(None)
    }

    pub fn len(&self) -> usize {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        objects.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&self, obj: Arc<K>) {
        insert_into(
            &mut self.objects.write().unwrap_or_else(|p| p.into_inner()),
            obj,
        );
    }

    fn remove(&self, obj: &K) {
        let meta = obj.meta();
        let ns = meta.namespace.clone().unwrap_or_default();
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        if let Some(names) = objects.get_mut(&ns) {
            names.remove(meta.name.as_deref().unwrap_or_default());
            if names.is_empty() {
                objects.remove(&ns);
            }
        }
    }

    fn replace(&self, listed: ByNamespace<K>) {
        *self.objects.write().unwrap_or_else(|p| p.into_inner()) = listed;
    }
}

/// The host's informers, by kind; operators share them while any of them runs.
pub struct Informers {
    client: Client,
    objects: Mutex<HashMap<KindRef, Weak<ObjectInformer>>>,
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

    /// The whole-object informer of an input kind, started if no operator holds it yet.
    pub fn objects(&self, kind: &ResolvedKind) -> Arc<ObjectInformer> {
        shared(
            &self.objects,
            &self.client,
            kind,
            crate::inputs::strip_bookkeeping,
        )
    }

    /// The metadata informer of an output kind, started if no operator holds it yet.
    pub fn metadata(&self, kind: &ResolvedKind) -> Arc<MetadataInformer> {
        shared(&self.metadata, &self.client, kind, strip_metadata)
    }

    /// How many input and output kinds are watched right now.
    pub fn watched(&self) -> (usize, usize) {
        (live_count(&self.objects), live_count(&self.metadata))
    }
}

fn live_count<T>(map: &Mutex<HashMap<KindRef, Weak<T>>>) -> usize {
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|w| w.strong_count() > 0)
        .count()
}

fn shared<K>(
    map: &Mutex<HashMap<KindRef, Weak<Informer<K>>>>,
    client: &Client,
    kind: &ResolvedKind,
    strip: fn(&mut K),
) -> Arc<Informer<K>>
where
    K: Resource<DynamicType = ApiResource>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(informer) = map.get(&kind.kind).and_then(Weak::upgrade) {
        if informer.api == kind.api {
            tracing::debug!(kind = %kind.kind, "sharing the running watch");
            return informer;
        }
    }
    tracing::debug!(kind = %kind.kind, "starting a shared watch");
    let informer = Arc::new(Informer::start(client, kind, strip));
    map.retain(|_, w| w.strong_count() > 0);
    map.insert(kind.kind.clone(), Arc::downgrade(&informer));
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

    fn obj(ns: Option<&str>, name: &str) -> Arc<DynamicObject> {
        let mut o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
        }))
        .unwrap();
        o.metadata.namespace = ns.map(str::to_string);
        Arc::new(o)
    }

    fn names(objects: Vec<Arc<DynamicObject>>) -> Vec<String> {
        objects
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }

    #[test]
    fn cache_is_indexed_by_namespace() {
        let cache: Cache<DynamicObject> = Cache::default();
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
        cache.remove(&obj(Some("a"), "z"));
        cache.remove(&obj(Some("b"), "x"));
        assert_eq!(names(cache.in_namespace(Some("a"))), ["y"]);
        assert_eq!(cache.len(), 2);

        let mut listed = ByNamespace::new();
        insert_into(&mut listed, obj(Some("d"), "w"));
        cache.replace(listed);
        assert_eq!(names(cache.all()), ["w"]);
    }
}
