//! One watch and cache per kind, shared by every operator that reads or writes it: input kinds
//! as whole objects (bookkeeping stripped), output kinds as metadata; stopped with its last user.
//!
//! Ten operators reading Deployments cost one list+watch and one copy of each Deployment, as with
//! controller-runtime's shared informers. Each operator's controller subscribes to the changes;
//! one that falls more than [`EVENT_BUFFER`] changes behind is handed the whole cache once
//! (its queue de-duplicates) instead of missing a change.

use crate::crd::KindRef;
use crate::inputs::JsonCache;
use crate::kinds::ResolvedKind;
use futures::{Stream, StreamExt};
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, Weak};
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
    pub store: Store<K>,
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
        let writer = reflector::store::Writer::new(kind.api.clone());
        let store = writer.as_reader();
        let (changes, _) = broadcast::channel(EVENT_BUFFER);
        let (sender, cache, dyntype, label) = (
            changes.clone(),
            store.clone(),
            kind.api.clone(),
            kind.kind.to_string(),
        );
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .backoff(crate::schedule::watch_backoff())
                .modify(strip)
                .reflect(writer)
                .boxed();
            while let Some(event) = events.next().await {
                let obj = match event {
                    Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                        // The cache's own copy: the feed holds no second copy.
                        let key = ObjectRef::from_obj_with(&obj, dyntype.clone());
                        cache.get(&key).unwrap_or_else(|| Arc::new(obj))
                    }
                    Ok(watcher::Event::Delete(obj)) => Arc::new(obj),
                    Ok(watcher::Event::InitDone) => {
                        ready_tx.send_replace(true);
                        continue;
                    }
                    Ok(watcher::Event::Init) => continue,
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
            store,
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
        let store = self.store.clone();
        futures::stream::unfold(self.changes.subscribe(), move |mut rx| {
            let store = store.clone();
            async move {
                match rx.recv().await {
                    Ok(obj) => Some((vec![obj], rx)),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(
                            missed,
                            "subscriber lagged: requeueing from the whole cache"
                        );
                        Some((store.state(), rx))
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
        let state = self.store.state();
        let live: std::collections::HashSet<&str> = state
            .iter()
            .filter_map(|o| o.metadata.uid.as_deref())
            .collect();
        self.json.retain(&live);
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
