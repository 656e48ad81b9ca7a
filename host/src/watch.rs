//! Builds and runs one operator's controller: watches the resource kind, every input kind
//! (into caches; a change requeues that namespace's resources) and every output kind (by owner).

use crate::crd::KindRef;
use crate::kinds::ResolvedKind;
use crate::reconcile::{self, InputCaches, OperatorContext};
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;

/// Input caches before their watches run: the readers go into the context, the writers to `run`.
pub struct InputWatches {
    writers: Vec<(ResolvedKind, reflector::store::Writer<DynamicObject>)>,
}

/// Creates one cache per input kind.
pub fn input_caches(kinds: &[ResolvedKind]) -> (InputCaches, InputWatches) {
    let mut readers = HashMap::new();
    let mut writers = Vec::new();
    for k in kinds {
        let writer = reflector::store::Writer::new(k.api.clone());
        readers.insert(k.kind.clone(), writer.as_reader());
        writers.push((k.clone(), writer));
    }
    (InputCaches(readers), InputWatches { writers })
}

/// Runs the operator's controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    ctx: Arc<OperatorContext>,
    inputs: InputWatches,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let resource = ctx.resource.api.clone();
    let main_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut controller =
        Controller::new_with(main_api, watcher::Config::default(), resource.clone());
    let owners = controller.store();

    let input_kinds: BTreeSet<KindRef> =
        inputs.writers.iter().map(|(k, _)| k.kind.clone()).collect();
    for (kind, writer) in inputs.writers {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        let mapper = requeue_namespace(owners.clone(), resource.clone());
        controller = controller.watches_stream_with(stream, mapper, kind.api.clone());
    }
    for kind in ctx.definition.output_kinds() {
        let Some(resolved) = ctx.kinds.get(&kind) else {
            continue;
        };
        if kind == ctx.definition.resource {
            continue;
        }
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resolved.api);
        controller = controller.owns_with(api, resolved.api.clone(), watcher::Config::default());
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
