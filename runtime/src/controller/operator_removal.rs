//! Removing an operator: a WasmOperator whose definition puts a finalizer on its resources also
//! carries the host's own, so deleting it first releases every resource it holds.
//!
//! Without it, deleting the WasmOperator stopped its controller and left `wasmpilot.io/<op>` on
//! its resources, which then could never be deleted. Now its deletion waits until the host has
//! removed that finalizer from every resource of the kind (each gets a `FinalizerReleased`
//! Event), then lets the WasmOperator go. The finalizer worker does not run, unless the
//! definition says `onOperatorDeletion: runFinalizer`: then it runs once per resource first
//! (within its deadline, its inputs listed from the API server as the operator's own account),
//! and the finalizer is removed whatever it answers. The definition that runs is the last one
//! this host ran for the operator (loaded, validated and its grants checked), not the spec as
//! the deletion found it: a Secret input added just before the deletion is never listed.

use crate::controller::finalizer;
use crate::crd::{KindRef, WasmOperator};
use crate::definition::OperatorDefinition;
use crate::kinds;
use crate::pipeline::inputs::ObjectsByKind;
use crate::pipeline::status;
use crate::pipeline::ReconcileError;
use crate::sandbox::{FinalizerModule, Sandbox};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::events::Recorder;
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;

/// The host's finalizer on a WasmOperator whose resources carry the operator's finalizer.
pub const RELEASE_FINALIZER: &str = "wasmpilot.io/release-resources";

/// Resources listed per page while releasing.
const PAGE: u32 = 500;

/// Why releasing a deleted operator's resources did not finish (tried again with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("listing the {kind} resources to release: {}", crate::error_report::api_text(.source))]
    List {
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("releasing {resource}: {source}")]
    Resource {
        resource: String,
        #[source]
        source: ReconcileError,
    },
    #[error("removing {RELEASE_FINALIZER} from the WasmOperator: {0}")]
    Operator(#[source] ReconcileError),
    #[error("a client acting as the operator's account: {}", crate::error_report::api_text(.0))]
    Identity(#[source] kube::Error),
}

/// Whether `op` should carry the release finalizer and does not yet.
pub fn lacks_release_finalizer(op: &WasmOperator) -> bool {
    op.spec.finalizer.is_some()
        && op.metadata.deletion_timestamp.is_none()
        && !op.finalizers().iter().any(|f| f == RELEASE_FINALIZER)
}

/// Whether `op` is being deleted and still holds the release finalizer.
pub fn releasing(op: &WasmOperator) -> bool {
    op.metadata.deletion_timestamp.is_some()
        && op.finalizers().iter().any(|f| f == RELEASE_FINALIZER)
}

fn as_dynamic(client: &Client, op: &WasmOperator) -> (Api<DynamicObject>, DynamicObject) {
    let api = Api::all_with(client.clone(), &ApiResource::erase::<WasmOperator>(&()));
    let mut object = DynamicObject::new(&op.name_any(), &ApiResource::erase::<WasmOperator>(&()));
    object.metadata = op.metadata.clone();
    (api, object)
}

/// Adds the release finalizer to `op`.
pub async fn add_release_finalizer(
    client: &Client,
    op: &WasmOperator,
) -> Result<(), ReconcileError> {
    let (api, object) = as_dynamic(client, op);
    finalizer::add(&api, &object, RELEASE_FINALIZER).await
}

/// The finalizer worker to run on each resource before it is released, when the definition
/// asks for it.
pub struct FinalizeOnRemoval<'a> {
    pub sandbox: &'a Sandbox,
    pub definition: &'a OperatorDefinition,
    pub module: &'a FinalizerModule,
}

impl FinalizeOnRemoval<'_> {
    /// Runs the finalizer worker for `resource`, its inputs listed by `as_operator` (the
    /// operator's own account: what its grant does not allow, the worker is not handed); says
    /// what it answered, for the Event.
    async fn run(&self, client: &Client, as_operator: &Client, resource: &DynamicObject) -> String {
        let mut listed = HashMap::new();
        for input in &self.definition.finalizer_inputs {
            let kind = KindRef::new(&input.api_version, &input.kind);
            if listed.contains_key(&kind) {
                continue;
            }
            let Ok(resolved) = kinds::resolve(client, &kind, "spec.finalizer.inputs").await else {
                continue;
            };
            // Every namespace when an input of the kind reads across them (the gathering
            // narrows the listing as the caches' would be).
            let namespaced = resource.namespace().is_some();
            let across = self
                .definition
                .finalizer_inputs
                .iter()
                .filter(|i| i.api_version == input.api_version && i.kind == input.kind)
                .any(|i| i.reads_other_namespaces(namespaced));
            let namespace = resource.namespace().filter(|_| !across);
            let api: Api<DynamicObject> = resolved.api(as_operator, namespace.as_deref());
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    listed.insert(kind, list.items.into_iter().map(Arc::new).collect());
                }
                Err(e) => {
                    // Refused (not granted) or failing: the worker does not run on a partial view.
                    return crate::worker_text::bound_owned(
                        format!(
                            "its finalizer worker did not run: listing its input {} {} as the operator failed: {}",
                            kind.api_version,
                            kind.kind,
                            crate::error_report::api_text(&e)
                        ),
                        crate::worker_text::MESSAGE_BYTES,
                    );
                }
            }
        }
        let decided = crate::pipeline::finalize::decide(
            self.sandbox,
            self.definition,
            self.module,
            resource,
            // Listed now: the operator's caches are gone with its controller.
            &ObjectsByKind(listed),
            crate::pipeline::step::now_rfc3339(),
        )
        .await;
        match decided {
            Ok(d) if d.done => "its finalizer worker ran and reported done".to_string(),
            Ok(_) => "its finalizer worker ran and was not done".to_string(),
            Err(e) => crate::worker_text::bound_owned(
                format!("its finalizer worker ran and failed: {e}"),
                crate::worker_text::MESSAGE_BYTES,
            ),
        }
    }
}

/// Removes the operator's finalizer from every resource of its kind that carries it (listed as
/// the host, patched and reported as the operator: `as_operator` and its `recorder`), running
/// the finalizer worker first when `finalize` is given, then the release finalizer from the
/// WasmOperator. Returns how many resources were released.
pub async fn release(
    client: &Client,
    as_operator: &Client,
    recorder: &Recorder,
    op: &WasmOperator,
    finalize: Option<FinalizeOnRemoval<'_>>,
) -> Result<usize, ReleaseError> {
    let operator = op.name_any();
    let name = crate::finalizer_name(&operator);
    let mut released = 0;
    // A kind no longer served (its CRD deleted first) has no resources left to release.
    if let Ok(kind) = kinds::resolve(client, &op.spec.resource, "spec.resource").await {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api);
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = all
                .list(&params)
                .await
                .map_err(|source| ReleaseError::List {
                    kind: kind.kind.to_string(),
                    source,
                })?;
            for resource in page.items.iter().filter(|r| finalizer::has(r, &name)) {
                let ran = match &finalize {
                    Some(f) => f.run(client, as_operator, resource).await,
                    None => "without running the finalizer worker".to_string(),
                };
                let api = kind.api(as_operator, resource.namespace().as_deref());
                finalizer::remove(&api, resource, &name)
                    .await
                    .map_err(|source| ReleaseError::Resource {
                        resource: format!(
                            "{}/{}",
                            resource.namespace().unwrap_or_default(),
                            resource.name_any()
                        ),
                        source,
                    })?;
                released += 1;
                let reference = resource.object_ref(&kind.api);
                status::publish_event(
                    recorder,
                    &reference,
                    true,
                    "FinalizerReleased",
                    "Release",
                    format!(
                        "WasmOperator {operator} was deleted: its finalizer {name} was removed ({ran})"
                    ),
                )
                .await;
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
    }
    let (api, object) = as_dynamic(client, op);
    finalizer::remove(&api, &object, RELEASE_FINALIZER)
        .await
        .map_err(ReleaseError::Operator)?;
    Ok(released)
}
