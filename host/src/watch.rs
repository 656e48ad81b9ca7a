//! Builds and runs one operator's controller: watches the resource kind and subscribes to the
//! shared informers of its input kinds (a change requeues that namespace's resources, or only
//! the controlling resource for `owned` inputs) and output kinds (a change requeues the owner).

use crate::crd::KindRef;
use crate::reconcile::{self, OperatorContext};
use futures::StreamExt;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, Controller};
use kube::{Api, ResourceExt};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

/// Runs the operator's controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    ctx: Arc<OperatorContext>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let resource = ctx.resource.api.clone();
    let main_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut controller =
        Controller::new_with(main_api, watcher::Config::default(), resource.clone());
    let owners = controller.store();

    let input_kinds: BTreeSet<KindRef> = ctx.inputs.0.keys().cloned().collect();
    for (kind, informer) in &ctx.inputs.0 {
        let changes = informer.subscribe().map(|o| o.meta.clone());
        // A kind read only as `owned` inputs concerns only the resource controlling the object.
        controller = if only_owned(&ctx.definition, kind) {
            let mapper = requeue_owner(resource.clone(), ctx.resource.namespaced);
            controller.watches_shared_stream_with(changes, mapper, informer.api.clone())
        } else {
            let mapper = requeue_namespace(owners.clone(), resource.clone());
            controller.watches_shared_stream_with(changes, mapper, informer.api.clone())
        };
    }
    for informer in ctx.outputs.0.values() {
        let mapper = requeue_owner(resource.clone(), ctx.resource.namespaced);
        controller = controller.watches_shared_stream_with(
            informer.subscribe(),
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

/// Whether every input of `kind` (in any phase) is `owned`: then a change of one of its objects
/// concerns only the resource that controls it.
fn only_owned(def: &crate::definition::OperatorDefinition, kind: &KindRef) -> bool {
    def.phases
        .iter()
        .flat_map(|p| &p.inputs)
        .filter(|i| i.api_version == kind.api_version && i.kind == kind.kind)
        .all(|i| i.owned)
}

/// An input object changed: requeue every resource of the operator in its namespace
/// (all of them for a cluster-scoped input).
fn requeue_namespace(
    owners: Store<DynamicObject>,
    resource: ApiResource,
) -> impl Fn(Arc<PartialObjectMeta<DynamicObject>>) -> Vec<ObjectRef<DynamicObject>>
       + Send
       + Sync
       + 'static {
    move |input: Arc<PartialObjectMeta<DynamicObject>>| {
        let ns = input.metadata.namespace.clone();
        owners
            .state()
            .iter()
            .filter(|o| ns.is_none() || o.namespace() == ns)
            .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
            .collect()
    }
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
        let ns = output.metadata.namespace.clone();
        output
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| {
                o.controller == Some(true)
                    && o.kind == resource.kind
                    && o.api_version == resource.api_version
            })
            .map(|o| {
                let owner = ObjectRef::new_with(&o.name, resource.clone());
                match (&ns, namespaced) {
                    (Some(ns), true) => owner.within(ns),
                    _ => owner,
                }
            })
            .collect()
    }
}
