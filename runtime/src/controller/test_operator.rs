//! A test operator on a mock API server: the controller's context for a definition whose every
//! phase (and finalizer) is the scripted test component, its ConfigMap caches holding given
//! objects as the watches would.

use crate::controller::context::{InputCaches, OperatorContext, OutputCaches};
use crate::controller::informers::{metadata_of, Informer};
use crate::crd::KindRef;
use crate::definition::OperatorDefinition;
use crate::kinds::ResolvedKind;
use crate::pipeline::inputs::WorkerObject;
use crate::sandbox::{PhaseModule, Sandbox};
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use std::collections::HashMap;
use std::sync::Arc;

pub fn configmaps() -> ResolvedKind {
    ResolvedKind {
        kind: KindRef::new("v1", "ConfigMap"),
        api: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
        namespaced: true,
    }
}

pub fn widgets() -> ResolvedKind {
    ResolvedKind {
        kind: KindRef::new("examples.io/v1", "Widget"),
        api: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("examples.io", "v1", "Widget"),
            "widgets",
        ),
        namespaced: true,
    }
}

/// The controller's context for `def` on `client`: every phase the scripted component, the
/// ConfigMap caches holding `objects`, as the watches would.
pub fn operator_context(
    def: &OperatorDefinition,
    client: &kube::Client,
    sandbox: &Arc<Sandbox>,
    module: &PhaseModule,
    objects: &[DynamicObject],
) -> OperatorContext {
    let configmaps = configmaps();
    let kind = configmaps.kind.clone();
    let mut inputs = InputCaches::new(true, Default::default());
    inputs.add(kind.clone(), &[], false, || {
        let view = {
            let kind = kind.clone();
            move |o: &DynamicObject| WorkerObject::new(o, &kind, None)
        };
        let held = objects
            .iter()
            .map(|o| WorkerObject::new(o, &kind, None))
            .collect();
        Arc::new(Informer::holding(&configmaps, held, Arc::new(view)))
    });
    let held = objects.iter().map(metadata_of).collect();
    let outputs = OutputCaches(HashMap::from([(
        kind.clone(),
        Arc::new(Informer::holding(&configmaps, held, Arc::new(metadata_of))),
    )]));
    let reporter = kube::runtime::events::Reporter {
        controller: "wasmpilot".into(),
        instance: None,
    };
    let workers = def
        .phases
        .iter()
        .filter(|p| !p.is_final)
        .map(|p| (p.name.clone(), module.clone()))
        .collect();
    OperatorContext {
        definition: def.clone(),
        as_operator: client.clone(),
        host_client: client.clone(),
        grants: crate::controller::grants::OperatorGrants::granted_everywhere(
            "system:serviceaccount:wasmpilot-system:op-widgets",
            client.clone(),
        ),
        host_recorder: kube::runtime::events::Recorder::new(client.clone(), reporter.clone()),
        resource: widgets(),
        workers,
        finalizer: None,
        kinds: HashMap::from([(kind.clone(), configmaps.clone())]),
        namespaced: HashMap::from([(kind, true)]),
        inputs,
        outputs,
        sandbox: sandbox.clone(),
        recorder: kube::runtime::events::Recorder::new(client.clone(), reporter),
        backoff: Default::default(),
        metrics_source: Default::default(),
        finalized: Default::default(),
        record_sink: None,
        shadows: None,
        input_requeue: Default::default(),
        own_writes: Default::default(),
        reserved_namespaces: Default::default(),
        grant: None,
        writes: Default::default(),
        resources: Default::default(),
        shard: None,
        resource_watch: Default::default(),
    }
}
