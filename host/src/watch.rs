//! Builds and runs one operator's controller: watches the resource kind, every input kind
//! (into caches; a change requeues that namespace's resources) and every output kind (by owner).

use crate::crd::KindRef;
use crate::kinds::ResolvedKind;
use crate::reconcile::{self, InputCaches, OperatorContext, OutputCaches};
use futures::StreamExt;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;

/// Caches before their watches run: the readers go into the context, the writers to `run`.
pub struct CacheWatches {
    inputs: Vec<(ResolvedKind, reflector::store::Writer<DynamicObject>)>,
    outputs: Vec<(
        ResolvedKind,
        reflector::store::Writer<PartialObjectMeta<DynamicObject>>,
    )>,
}

/// Creates one object cache per input kind and one metadata cache per output kind.
pub fn caches(
    inputs: &[ResolvedKind],
    outputs: &[ResolvedKind],
) -> (InputCaches, OutputCaches, CacheWatches) {
    let mut input_readers = HashMap::new();
    let mut watches = CacheWatches {
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    for k in inputs {
        let writer = reflector::store::Writer::new(k.api.clone());
        input_readers.insert(k.kind.clone(), writer.as_reader());
        watches.inputs.push((k.clone(), writer));
    }
    let mut output_readers = HashMap::new();
    for k in outputs {
        let writer = reflector::store::Writer::new(k.api.clone());
        output_readers.insert(k.kind.clone(), writer.as_reader());
        watches.outputs.push((k.clone(), writer));
    }
    (
        InputCaches(input_readers, Default::default()),
        OutputCaches(output_readers),
        watches,
    )
}

/// Runs the operator's controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    ctx: Arc<OperatorContext>,
    watches: CacheWatches,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let resource = ctx.resource.api.clone();
    let main_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut controller =
        Controller::new_with(main_api, watcher::Config::default(), resource.clone());
    let owners = controller.store();

    let input_kinds: BTreeSet<KindRef> =
        watches.inputs.iter().map(|(k, _)| k.kind.clone()).collect();
    for (kind, writer) in watches.inputs {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api);
        let stream = watcher(api, watcher::Config::default())
            .backoff(crate::schedule::watch_backoff())
            .reflect(writer)
            .touched_objects();
        let mapper = requeue_namespace(owners.clone(), resource.clone());
        controller = controller.watches_stream_with(stream, mapper, kind.api.clone());
    }
    for (kind, writer) in watches.outputs {
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &kind.api);
        let stream = watcher(api, watcher::Config::default())
            .backoff(crate::schedule::watch_backoff())
            .reflect(writer)
            .touched_objects();
        controller = controller.owns_stream_with(stream, kind.api.clone());
    }
    tracing::info!(
        operator = %ctx.definition.name,
        resource = %ctx.definition.resource,
        inputs = ?input_kinds.iter().map(ToString::to_string).collect::<Vec<_>>(),
        outputs = ?ctx.definition.output_kinds().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "controller started"
    );
    let name = ctx.definition.name.clone();
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(16))
        .trigger_backoff(crate::schedule::watch_backoff())
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    tracing::info!(operator = %name, "controller stopped");
}

/// An input object changed: requeue every resource of the operator in its namespace
/// (all of them for a cluster-scoped input).
fn requeue_namespace(
    owners: Store<DynamicObject>,
    resource: kube::discovery::ApiResource,
) -> impl Fn(DynamicObject) -> Vec<ObjectRef<DynamicObject>> + Send + Sync + 'static {
    move |input: DynamicObject| {
        let ns = input.namespace();
        owners
            .state()
            .iter()
            .filter(|o| ns.is_none() || o.namespace() == ns)
            .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
            .collect()
    }
}
