//! Builds and runs one operator's controller: watches the resource kind and subscribes to the
//! shared informers of its input kinds (a change requeues the namespace's resources whose
//! selector matches the object's old or new labels — all of them for inputs without a selector
//! — or only the controlling resource for `owned` inputs) and output kinds (the owner).

use crate::controller::context::{InputRequeue, OperatorContext};
use crate::controller::reconcile;
use crate::controller::selector_index::{ObjectAt, SelectorIndex};
use crate::crd::{InputSpec, KindRef};
use crate::pipeline::inputs;
use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::api::{DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, ResourceExt};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;

/// Runs the operator's controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    ctx: Arc<OperatorContext>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.host_client.clone();
    let resource = ctx.resource.api.clone();
    let main_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    // The resource's watch, as `Controller::new_with` builds it, but an event that is this
    // host's own status write (see `OwnWrites`) updates the store and reconciles nothing.
    let writer = kube::runtime::reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let owners = writer.as_reader();
    // A second controller run of the same context (never today) keeps the first store.
    let _ = ctx.resources.set(owners.clone());
    // Per input kind every (non-owned) input of which selects by labels: the resources filed by
    // what their selectors require, kept current from the resource's own watch events.
    let indexes: HashMap<KindRef, Arc<SelectorIndex>> =
        if ctx.input_requeue == InputRequeue::Selected {
            ctx.inputs
                .kinds()
                .filter(|kind| !only_owned(&ctx.definition, kind))
                .filter_map(|kind| {
                    let specs = not_owned_inputs(&ctx.definition, kind);
                    specs.iter().all(inputs::selects).then(|| {
                        let index = SelectorIndex::new(resource.clone(), specs);
                        (kind.clone(), Arc::new(index))
                    })
                })
                .collect()
        } else {
            HashMap::new()
        };
    let filing: Vec<Arc<SelectorIndex>> = indexes.values().cloned().collect();
    let health = ctx.resource_watch.clone();
    // Only the resources the operator's `resourceSelector` selects: the API server filters, and
    // a resource relabelled out of it arrives as deleted.
    let mut config = watcher::Config::default();
    if let Some(selector) = &ctx.definition.resource_selector {
        config = config.labels(&selector.to_query());
    }
    let events = watcher(main_api, config)
        .inspect(move |event| match event {
            Ok(_) => health.works(),
            Err(e) => health.failed(&crate::error_report::Brief(e)),
        })
        .map_ok(move |event| {
            for index in &filing {
                index.observe(&event);
            }
            event
        });
    let own = ctx.clone();
    let changes = kube::runtime::reflector(writer, events)
        .applied_objects()
        .try_filter(move |o| {
            let own = own.clone();
            let (uid, rv) = (o.metadata.uid.clone(), o.metadata.resource_version.clone());
            async move { !own.own_writes.is_own(uid, rv).await }
        });
    let mut controller = Controller::for_stream_with(changes, owners.clone(), resource.clone());
    if let Some(shard) = &ctx.shard {
        // A bucket gained: reconcile what this replica watches (those of buckets it does not
        // hold return at once).
        shard.attach_store(owners.clone());
        controller = controller.reconcile_all_on(shard.gains());
    }

    let input_kinds: BTreeSet<KindRef> = ctx.inputs.kinds().cloned().collect();
    // Every informer of a kind (one per projection): a change one projection hides, another
    // may show; the controller's queue merges the requeues.
    for (kind, informer) in ctx.inputs.all() {
        controller = if let Some(index) = indexes.get(kind) {
            // Selecting inputs: the resources whose selector matches the object's labels now or
            // before the change (the informer hands over the version it replaced).
            let changes = informer.subscribe().map(|change| {
                Arc::new(InputChange {
                    metadata: change.object.meta.metadata.clone(),
                    labels_before: change
                        .before
                        .as_ref()
                        .map(|b| b.meta.metadata.labels.clone()),
                    own_write: change.own_write,
                })
            });
            let mapper = requeue_selected(index.clone(), resource.clone(), ctx.resource.namespaced);
            controller.watches_shared_stream_with(changes, mapper, informer.api.clone())
        } else {
            // A kind read only as `owned` inputs concerns only the resource controlling the
            // object. An output this host applied concerns no one then: the reconcile of the
            // resource controlling it applied it and read it from the cache it entered.
            if only_owned(&ctx.definition, kind) {
                let changes = informer
                    .subscribe()
                    .filter(|c| std::future::ready(!c.own_write))
                    .map(|c| c.object.meta.clone());
                let mapper = requeue_owner(resource.clone(), ctx.resource.namespaced);
                controller.watches_shared_stream_with(changes, mapper, informer.api.clone())
            } else {
                let changes = informer.subscribe().map(|c| c.object.meta.clone());
                let every_namespace = not_owned_inputs(&ctx.definition, kind)
                    .iter()
                    .any(|i| i.all_namespaces);
                let mapper = requeue_namespace(owners.clone(), resource.clone(), every_namespace);
                controller.watches_shared_stream_with(changes, mapper, informer.api.clone())
            }
        };
    }
    for informer in ctx.outputs.0.values() {
        let mapper = requeue_owner(resource.clone(), ctx.resource.namespaced);
        controller = controller.watches_shared_stream_with(
            informer.subscribe().map(|c| c.object),
            mapper,
            informer.api.clone(),
        );
    }
    tracing::info!(
        operator = %ctx.definition.name,
        resource = %ctx.definition.resource,
        inputs = ?input_kinds.iter().map(ToString::to_string).collect::<Vec<_>>(),
        outputs = ?ctx.definition.output_kinds().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "controller started"
    );
    let name = ctx.definition.name.clone();
    let gauges = tokio::spawn(crate::controller::phase_gauges::run(
        ctx.definition.clone(),
        owners.clone(),
    ));
    let definition = ctx.definition.clone();
    let shutdown = shutdown.boxed().shared();
    let running = controller
        .with_config(kube::runtime::controller::Config::default().concurrency(16))
        .trigger_backoff(crate::controller::schedule::watch_backoff())
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %crate::error_report::Brief(&e), "controller event");
            }
        });
    // kube's runner holds every reconcile until the resource's first listing is in the store,
    // and a graceful shutdown stops that listing: stopped before it ended, the controller would
    // wait for it for ever (a swap or a refusal right after a start waited out the drain's
    // grace). Nothing has run then, so it ends at once. The store changes only while `running`
    // is polled, after this check.
    let stopped_before_listing = async {
        shutdown.await;
        if owners.wait_until_ready().now_or_never().is_some() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        () = stopped_before_listing => {
            tracing::debug!(operator = %name, "stopped before its first listing ended: nothing ran");
        }
        () = running => {}
    }
    gauges.abort();
    crate::controller::phase_gauges::forget(&definition);
    tracing::info!(operator = %name, "controller stopped");
}

/// Whether every input of `kind` (in any phase) is `owned`: then a change of one of its objects
/// concerns only the resource that controls it.
fn only_owned(def: &crate::definition::OperatorDefinition, kind: &KindRef) -> bool {
    def.all_inputs()
        .filter(|i| i.api_version == kind.api_version && i.kind == kind.kind)
        .all(|i| i.owned)
}

/// An input object changed: requeue every resource of the operator that reads its namespace:
/// those in it, the cluster-scoped ones (they read every namespace), and all of them for a
/// cluster-scoped object or when an input of its kind reads `every_namespace`.
fn requeue_namespace(
    owners: Store<DynamicObject>,
    resource: ApiResource,
    every_namespace: bool,
) -> impl Fn(Arc<PartialObjectMeta<DynamicObject>>) -> Vec<ObjectRef<DynamicObject>>
       + Send
       + Sync
       + 'static {
    move |input: Arc<PartialObjectMeta<DynamicObject>>| {
        let ns = input.metadata.namespace.clone();
        owners
            .state()
            .iter()
            .filter(|o| {
                every_namespace || ns.is_none() || o.namespace().is_none() || o.namespace() == ns
            })
            .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
            .collect()
    }
}

/// The (non-owned) inputs of `kind`, in any phase.
fn not_owned_inputs(def: &crate::definition::OperatorDefinition, kind: &KindRef) -> Vec<InputSpec> {
    def.all_inputs()
        .filter(|i| i.api_version == kind.api_version && i.kind == kind.kind && !i.owned)
        .cloned()
        .collect()
}

/// An input object's change as a selecting requeue reads it: its metadata now, and its labels
/// before (`None`: unknown, the object new to the cache; `Some(None)`: it had none). A resource
/// of the input's kind for the controller, so the reconcile it causes names it.
#[derive(Clone, Debug, serde::Deserialize)]
struct InputChange {
    metadata: ObjectMeta,
    #[serde(skip)]
    labels_before: Option<Option<BTreeMap<String, String>>>,
    /// An output this host applied (see [`crate::controller::informers::Change::own_write`]).
    #[serde(skip)]
    own_write: bool,
}

impl kube::Resource for InputChange {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// An input object changed, of a kind every (non-owned) input of which selects by labels:
/// requeue only the resources whose selector for it (declared, or read from the resource)
/// matches its labels before or after the change — or cannot be evaluated, so that resource
/// reports why ([`SelectorIndex::selecting`]).
/// An output this host applied requeues the others it concerns, not the resource controlling
/// it, whose reconcile applied it.
fn requeue_selected(
    index: Arc<SelectorIndex>,
    resource: ApiResource,
    namespaced: bool,
) -> impl Fn(Arc<InputChange>) -> Vec<ObjectRef<DynamicObject>> + Send + Sync + 'static {
    move |change: Arc<InputChange>| {
        let meta = &change.metadata;
        let mut selected = index.selecting(&ObjectAt {
            namespace: meta.namespace.as_deref(),
            name: meta.name.as_deref(),
            labels: meta.labels.as_ref(),
            labels_before: change.labels_before.as_ref().map(Option::as_ref),
        });
        if let Some(writer) = change
            .own_write
            .then(|| controller_ref(meta, &resource, namespaced))
            .flatten()
        {
            selected.retain(|r| (&r.name, &r.namespace) != (&writer.name, &writer.namespace));
        }
        selected
    }
}

/// The resource of kind `resource` controlling `meta`'s object (its controller reference;
/// there is at most one), within the object's namespace when `resource` is namespaced.
fn controller_ref(
    meta: &ObjectMeta,
    resource: &ApiResource,
    namespaced: bool,
) -> Option<ObjectRef<DynamicObject>> {
    let o = meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true)
            && o.kind == resource.kind
            && o.api_version == resource.api_version
    })?;
    let owner = ObjectRef::new_with(&o.name, resource.clone());
    Some(match (&meta.namespace, namespaced) {
        (Some(ns), true) => owner.within(ns),
        _ => owner,
    })
}

/// An output changed or disappeared: requeue the resource that controls it.
fn requeue_owner(
    resource: ApiResource,
    namespaced: bool,
) -> impl Fn(Arc<PartialObjectMeta<DynamicObject>>) -> Vec<ObjectRef<DynamicObject>>
       + Send
       + Sync
       + 'static {
    move |output: Arc<PartialObjectMeta<DynamicObject>>| {
        controller_ref(&output.metadata, &resource, namespaced)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;
    use serde_json::json;

    /// An output this host applied, selected by its own controller's selector and another
    /// resource's: only the other is requeued (the writer's reconcile applied it); the same
    /// change from someone else requeues both.
    #[test]
    fn an_own_write_requeues_the_others_it_concerns_not_its_writer() {
        let resource = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("examples.io", "v1", "AutoRoute"),
            "autoroutes",
        );
        let input: InputSpec = serde_json::from_value(json!({
            "name": "services", "apiVersion": "v1", "kind": "Service",
            "selectorFrom": "spec.serviceSelector"
        }))
        .expect("an input");
        let index = Arc::new(SelectorIndex::new(resource.clone(), vec![input]));
        for name in ["writer", "reader"] {
            let route: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "examples.io/v1", "kind": "AutoRoute",
                "metadata": {"name": name, "namespace": "a"},
                "spec": {"serviceSelector": {"matchLabels": {"app": "web"}}},
            }))
            .expect("a route");
            index.observe(&watcher::Event::Apply(route));
        }
        let metadata: ObjectMeta = serde_json::from_value(json!({
            "name": "web", "namespace": "a", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "examples.io/v1", "kind": "AutoRoute",
                "name": "writer", "uid": "u1", "controller": true}],
        }))
        .expect("metadata");
        let requeue = requeue_selected(index, resource, true);
        let names = |own_write: bool| {
            let mut names: Vec<String> = requeue(Arc::new(InputChange {
                metadata: metadata.clone(),
                labels_before: None,
                own_write,
            }))
            .into_iter()
            .map(|r| r.name)
            .collect();
            names.sort();
            names
        };
        assert_eq!(names(true), ["reader"]);
        assert_eq!(names(false), ["reader", "writer"]);
    }
}
