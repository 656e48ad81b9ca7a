//! The baseline: a hand-written kube-rs controller with the same AutoRoute logic (the example's
//! selection rule from `autoroute-types`, the same Service/VirtualService/Gateway shapes), no
//! phases and no Wasm: one reconcile applies the outputs and writes `Ready`.

use autoroute_types::{deployment_names, routable_deployments, AutoRoute, RoutableDeployment};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{reflector, watcher, Controller, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use wasmpilot_guest::selector::Selector;

const MANAGER: &str = "native-autoroute";

struct Ctx {
    client: Client,
    deployments: Store<Deployment>,
    gateway: ApiResource,
    virtual_service: ApiResource,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Error(String);

fn outputs(route: &AutoRoute, routable: &[RoutableDeployment<'_>]) -> Vec<(String, Value)> {
    let name = route.name_any();
    let ns = route.namespace();
    let owner = route
        .controller_owner_ref(&())
        .map(|o| json!([o]))
        .unwrap_or(json!([]));
    let mut out = vec![(
        "Gateway".to_string(),
        json!({"apiVersion": "networking.istio.io/v1alpha3", "kind": "Gateway",
               "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
               "spec": {"selector": {"istio": "ingressgateway"},
                        "servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": [format!("*.{name}")]}]}}),
    )];
    for d in routable {
        let host = format!("{}.{name}", d.name);
        out.push((
            "Service".into(),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": d.name, "namespace": ns, "ownerReferences": owner},
                   "spec": {"ports": [{"name": "http", "port": d.port, "protocol": "TCP"}], "selector": d.pod_labels}}),
        ));
        out.push((
            "VirtualService".into(),
            json!({"apiVersion": "networking.istio.io/v1alpha3", "kind": "VirtualService",
                   "metadata": {"name": host, "namespace": ns, "ownerReferences": owner},
                   "spec": {"hosts": [host], "gateways": [name],
                            "http": [{"match": [{"uri": {"prefix": "/"}}], "route": [{"destination": {"host": d.name, "port": {"number": d.port}}}]}]}}),
        ));
    }
    out
}

async fn reconcile(route: Arc<AutoRoute>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = route.namespace().unwrap_or_default();
    let selector =
        Selector::new(&route.spec.deployment_selector).map_err(|e| Error(e.to_string()))?;
    let deployments: Vec<Deployment> = ctx
        .deployments
        .state()
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|d| selector.selects(&d.metadata))
        .map(|d| (**d).clone())
        .collect();
    let routable = routable_deployments(&deployments);
    let names = deployment_names(&deployments);
    let status = route.status.as_ref();
    if status
        .is_some_and(|s| s.host.phase.as_deref() == Some("Ready") && s.synced_deployments == names)
    {
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    let params = PatchParams::apply(MANAGER).force();
    for (kind, obj) in outputs(&route, &routable) {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let result = match kind.as_str() {
            "Service" => {
                Api::<k8s_openapi::api::core::v1::Service>::namespaced(ctx.client.clone(), &ns)
                    .patch(&name, &params, &Patch::Apply(&obj))
                    .await
                    .map(|_| ())
            }
            "Gateway" => {
                Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &ctx.gateway)
                    .patch(&name, &params, &Patch::Apply(&obj))
                    .await
                    .map(|_| ())
            }
            _ => {
                Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &ctx.virtual_service)
                    .patch(&name, &params, &Patch::Apply(&obj))
                    .await
                    .map(|_| ())
            }
        };
        result.map_err(|e| Error(format!("apply {kind} {name}: {e}")))?;
    }
    let api: Api<AutoRoute> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"status": {"phase": "Ready", "syncedDeployments": names, "observedGeneration": route.metadata.generation}});
    api.patch_status(
        &route.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| Error(format!("status: {e}")))?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_: Arc<AutoRoute>, _: &Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(500))
}

/// Runs the native controller until the process is killed; `nodelay`: on wasmpilot's API client
/// (kube's stack with TCP_NODELAY), else kube's default client, as a hand-written one would.
pub async fn run(nodelay: bool) -> anyhow::Result<()> {
    let client = if nodelay {
        wasmpilot::api_client::connect().await?
    } else {
        Client::try_default().await?
    };
    let (deployments, writer) = reflector::store::<Deployment>();
    let deployment_stream = watcher(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let routes: Api<AutoRoute> = Api::all(client.clone());
    let controller = Controller::new(routes, watcher::Config::default());
    let owners = controller.store();
    let gvk =
        |kind: &str| kube::core::GroupVersionKind::gvk("networking.istio.io", "v1alpha3", kind);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        deployments,
        gateway: ApiResource::from_gvk(&gvk("Gateway")),
        virtual_service: ApiResource::from_gvk(&gvk("VirtualService")),
    });
    controller
        .watches_stream(deployment_stream, move |d: Deployment| {
            let ns = d.namespace();
            owners
                .state()
                .iter()
                .filter(|r| r.namespace() == ns)
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .owns(
            Api::<k8s_openapi::api::core::v1::Service>::all(client.clone()),
            watcher::Config::default(),
        )
        .with_config(kube::runtime::controller::Config::default().concurrency(16))
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
    Ok(())
}
