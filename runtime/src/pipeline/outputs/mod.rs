//! Checks a worker's outputs against the phase declaration (all or nothing), then server-side
//! applies them with the operator's field manager and a controller ownerReference to the resource;
//! what apply alone cannot converge in an object the resource controls is converged by `drift`.

pub mod drift;

use crate::crd::{KindRef, UpdateStrategy};
use crate::definition::PhaseDefinition;
use crate::kinds::ResolvedKind;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use tracing::Instrument;

/// One output that passed the checks, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedOutput {
    pub kind: KindRef,
    pub name: String,
    pub namespace: Option<String>,
    pub object: Value,
    /// How an existing object is changed (its kind's `updateStrategy`).
    pub update: UpdateStrategy,
}

/// Identifies an output object: kind, namespace, name.
pub type ObjectKey = (KindRef, Option<String>, String);

impl CheckedOutput {
    pub fn key(&self) -> ObjectKey {
        (self.kind.clone(), self.namespace.clone(), self.name.clone())
    }

    pub fn describe(&self) -> String {
        describe(&self.key())
    }
}

/// `Service ns/name`, or `ClusterRole name`: an object in messages.
pub fn describe((kind, namespace, name): &ObjectKey) -> String {
    match namespace {
        Some(ns) => format!("{} {ns}/{name}", kind.kind),
        None => format!("{} {name}", kind.kind),
    }
}

/// Why a worker's outputs were refused. Nothing of that result is applied.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("output #{index} is not a JSON object: {problem}")]
    NotAnObject { index: usize, problem: String },
    #[error("output #{index} has no {field}")]
    MissingField { index: usize, field: &'static str },
    #[error("output #{index} ({kind} {name}): {kind} is not a declared output of phase {phase} (declared: {declared})")]
    UndeclaredKind {
        index: usize,
        kind: String,
        name: String,
        phase: String,
        declared: String,
    },
    #[error("output #{index} ({kind} {name}): namespace {namespace:?} differs from the resource's namespace {expected:?}")]
    WrongNamespace {
        index: usize,
        kind: String,
        name: String,
        namespace: String,
        expected: String,
    },
    #[error("output #{index} ({kind} {name}): cluster-scoped outputs of a namespaced resource are not allowed")]
    ClusterScoped {
        index: usize,
        kind: String,
        name: String,
    },
    #[error("output #{index}: {name:?} is not a valid object name (lowercase alphanumerics, '-' and '.', at most 253)")]
    InvalidName { index: usize, name: String },
    #[error("output #{index} ({kind} {name}) sets ownerReferences; the host sets them")]
    OwnerReferences {
        index: usize,
        kind: String,
        name: String,
    },
    #[error("output #{index} ({kind} {name}) sets finalizers {finalizers}: nothing would remove them once the resource is gone, and its deletion (and its namespace's) would hang; an operator cleans up through spec.finalizer")]
    Finalizers {
        index: usize,
        kind: String,
        name: String,
        finalizers: String,
    },
    #[error("output #{index} ({kind} {name}) is returned twice")]
    Duplicate {
        index: usize,
        kind: String,
        name: String,
    },
    #[error("{object}: namespace {namespace} is the host's own (its replicas, their Leases or the operators' accounts live there); no operator's output goes there")]
    ReservedNamespace { object: String, namespace: String },
    #[error("{object}: namespace {namespace} is not one its WasmOperatorGrant lists in spec.outputNamespaces (a cluster-scoped resource's outputs go only where the admin allows)")]
    NamespaceNotGranted { object: String, namespace: String },
    #[error("{object} already exists and {holder}; the host does not take over objects it did not create for this resource: delete or rename it, or have the worker return another name")]
    NotOurs { object: String, holder: String },
    #[error("could not delete {object}, which the worker no longer returns: {}", crate::error_report::api_text(.source))]
    PruneFailed {
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("could not apply {object}: {}", crate::error_report::api_text(.source))]
    ApplyFailed {
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{object} differs in what server-side apply cannot change; {step} failed: {}", crate::error_report::api_text(.source))]
    ConvergeFailed {
        object: String,
        step: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl OutputError {
    /// The API server refused the object itself (invalid), as opposed to a transient failure.
    pub fn is_fatal(&self) -> bool {
        match self {
            OutputError::ApplyFailed {
                source: kube::Error::Api(s),
                ..
            } => (400..500).contains(&s.code) && s.code != 409 && s.code != 429,
            // Retried with backoff: the conflict goes away when the other object does.
            OutputError::ApplyFailed { .. }
            | OutputError::ConvergeFailed { .. }
            | OutputError::PruneFailed { .. }
            | OutputError::NotOurs { .. } => false,
            _ => true,
        }
    }
}

/// The resource the outputs will be owned by.
pub struct Owner<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub namespace: Option<&'a str>,
}

/// Checks every output; `namespaced` says which kinds are namespaced (unknown kinds are assumed
/// so). The worker's text in an error has `redactor`'s Secret values replaced before its cut.
pub fn check(
    phase: &PhaseDefinition,
    owner: &Owner<'_>,
    namespaced: &HashMap<KindRef, bool>,
    outputs: &[String],
    redactor: &crate::redaction::Redactor,
) -> Result<Vec<CheckedOutput>, OutputError> {
    let shown = |text: &str| shown(&redactor.text(text));
    let mut seen = BTreeSet::new();
    let mut checked = Vec::with_capacity(outputs.len());
    for (index, raw) in outputs.iter().enumerate() {
        let mut object: Value =
            serde_json::from_str(raw).map_err(|e| OutputError::NotAnObject {
                index,
                problem: shown(&e.to_string()),
            })?;
        if !object.is_object() {
            return Err(OutputError::NotAnObject {
                index,
                problem: "not an object".into(),
            });
        }
        let api_version = object["apiVersion"]
            .as_str()
            .ok_or(OutputError::MissingField {
                index,
                field: "apiVersion",
            })?
            .to_string();
        let kind_name = object["kind"]
            .as_str()
            .ok_or(OutputError::MissingField {
                index,
                field: "kind",
            })?
            .to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .ok_or(OutputError::MissingField {
                index,
                field: "metadata.name",
            })?
            .to_string();
        let kind = KindRef::new(&api_version, &kind_name);
        if !phase.outputs.contains(&kind) {
            return Err(OutputError::UndeclaredKind {
                index,
                kind: shown(&format!("{api_version} {kind_name}")),
                name: shown(&name),
                phase: phase.name.clone(),
                declared: phase
                    .outputs
                    .iter()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if !crate::object_names::is_dns_subdomain(&name) {
            return Err(OutputError::InvalidName {
                index,
                name: shown(&name),
            });
        }
        if object["metadata"]
            .get("ownerReferences")
            .is_some_and(|o| !o.is_null())
        {
            return Err(OutputError::OwnerReferences {
                index,
                kind: kind_name,
                name,
            });
        }
        let custom = without_server_set_metadata(&mut object["metadata"]);
        if !custom.is_empty() {
            return Err(OutputError::Finalizers {
                index,
                kind: kind_name,
                name,
                finalizers: shown(&custom.join(", ")),
            });
        }
        let is_namespaced = namespaced.get(&kind).copied().unwrap_or(true);
        let namespace = match (is_namespaced, owner.namespace) {
            (true, Some(expected)) => {
                match object["metadata"]["namespace"].as_str() {
                    Some(ns) if ns != expected => {
                        return Err(OutputError::WrongNamespace {
                            index,
                            kind: kind_name,
                            name,
                            namespace: shown(ns),
                            expected: expected.to_string(),
                        })
                    }
                    _ => {}
                }
                object["metadata"]["namespace"] = json!(expected);
                Some(expected.to_string())
            }
            (true, None) => object["metadata"]["namespace"].as_str().map(str::to_string),
            (false, Some(_)) => {
                return Err(OutputError::ClusterScoped {
                    index,
                    kind: kind_name,
                    name,
                })
            }
            (false, None) => None,
        };
        if !seen.insert((kind.clone(), namespace.clone(), name.clone())) {
            return Err(OutputError::Duplicate {
                index,
                kind: kind_name,
                name,
            });
        }
        object["metadata"]["ownerReferences"] = json!([{
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
        let update = phase
            .update_strategies
            .get(&kind)
            .copied()
            .unwrap_or_default();
        checked.push(CheckedOutput {
            kind,
            name,
            namespace,
            object,
            update,
        });
    }
    Ok(checked)
}

/// Metadata the API server sets. A worker's copy of an object it read carries them; applied,
/// they would be preconditions (`uid`, `resourceVersion`) that fail on every later apply.
const SERVER_SET_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Whether Kubernetes itself removes `finalizer` (`kubernetes`, `orphan`, `foregroundDeletion`,
/// `*kubernetes.io/…`): one a worker's copy of a live object may carry.
fn is_system_finalizer(finalizer: &str) -> bool {
    matches!(finalizer, "kubernetes" | "orphan" | "foregroundDeletion")
        || finalizer.split_once('/').is_some_and(|(domain, _)| {
            domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")
        })
}

/// Drops from an output's `metadata` what the API server sets, and the finalizers Kubernetes
/// removes itself; returns the other finalizers it sets (which nothing would remove).
fn without_server_set_metadata(metadata: &mut Value) -> Vec<String> {
    let Some(metadata) = metadata.as_object_mut() else {
        return Vec::new();
    };
    for field in SERVER_SET_METADATA {
        metadata.remove(*field);
    }
    let finalizers = match metadata.remove("finalizers") {
        Some(Value::Array(list)) => list,
        Some(Value::Null) | None => return Vec::new(),
        Some(other) => return vec![other.to_string()],
    };
    finalizers
        .iter()
        .map(|f| f.as_str().map_or_else(|| f.to_string(), str::to_string))
        .filter(|f| !is_system_finalizer(f))
        .collect()
}

/// A worker-supplied name or kind as it may appear in a message: bounded.
fn shown(text: &str) -> String {
    crate::worker_text::bounded(text, crate::worker_text::NAME_BYTES).into_owned()
}

/// Labels an output with the operator and the phase that returned it: how pruning (and
/// `wasmpilot simulate` / `plan`) recognise what the host created.
pub fn label(object: &mut Value, operator: &str, phase: &str) {
    object["metadata"]["labels"][crate::OPERATOR_LABEL] = json!(operator);
    object["metadata"]["labels"][crate::PHASE_LABEL] = json!(phase);
}

/// The outputs that name an object which exists (in the output watch cache) without this
/// resource's controller reference: applying would adopt it, and pruning or garbage collection
/// could later delete an object the host never created. They are not applied (the rest are).
pub fn refused_takeovers(
    outputs: &[CheckedOutput],
    owner_uid: &str,
    existing: &impl ExistingObjects,
) -> Vec<(usize, OutputError)> {
    let mut refused = Vec::new();
    for (index, out) in outputs.iter().enumerate() {
        if let Some(found) = existing.get(&out.kind, out.namespace.as_deref(), &out.name) {
            if let Err(e) = refuse_takeover(out, owner_uid, &found) {
                refused.push((index, e));
            }
        }
    }
    refused
}

/// The objects of the output kinds that exist (the controller's metadata caches): what
/// takeovers and pruning are checked against.
pub trait ExistingObjects {
    /// The metadata of the object `kind` `namespace/name`, if it exists.
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<kube::api::ObjectMeta>;
    /// Visits the metadata of the objects of `kind` in `namespace` (all, for `None`) whose
    /// controller may be `controller` (a uid): at least every one it is. A source without an
    /// index by controller visits the whole namespace; callers check each object.
    fn each_maybe_controlled_by(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        controller: &str,
        visit: &mut dyn FnMut(&kube::api::ObjectMeta),
    );
}

/// One output against the object of that name that exists already (`wasmpilot plan` passes
/// the live object): refused unless the resource is its controller.
pub fn refuse_takeover(
    out: &CheckedOutput,
    owner_uid: &str,
    existing: &kube::api::ObjectMeta,
) -> Result<(), OutputError> {
    let controller = existing
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let holder = match controller {
        Some(o) if o.uid == owner_uid => return Ok(()),
        Some(o) => format!("is controlled by {} {}", o.kind, o.name),
        None => "has no controller".to_string(),
    };
    Err(OutputError::NotOurs {
        object: out.describe(),
        holder,
    })
}

/// How an output was made to match the worker's decision.
#[derive(Clone, Debug, PartialEq)]
pub enum Convergence {
    /// Server-side apply alone.
    Applied,
    /// Lists holding entries of other field managers (e.g. a hand-edited Service port) were
    /// replaced with the worker's, then applied.
    Replaced {
        lists: Vec<String>,
        managers: BTreeSet<String>,
    },
    /// A field server-side apply may not change (immutable) differed, or a field the operator
    /// sets in an object of a `Recreate` kind: the object was deleted and created again from
    /// the worker's decision.
    Recreated { reason: String },
    /// An object of an `OnDelete` kind exists: left as it is.
    Kept,
}

/// What applying one result did: per object, and what failed (each failure on its own object).
#[derive(Debug, Default)]
pub struct ApplyReport {
    pub applied: usize,
    /// Each applied object as the API server answered its last write (a watch cache may not
    /// hold it yet: see [`crate::pipeline::inputs::JustWritten`]).
    pub written: Vec<(KindRef, DynamicObject)>,
    /// Objects that needed more than a server-side apply, and what was done.
    pub converged: Vec<(String, Convergence)>,
    pub failed: Vec<OutputError>,
}

/// Server-side applies checked outputs, labelled with the operator, forcing ownership of their
/// fields; an output controlled by the resource that apply cannot converge is converged another
/// way ([`Convergence`]). One output that fails does not stop the others.
pub async fn apply_outputs(
    client: &Client,
    operator: &str,
    phase: &str,
    owner_uid: &str,
    kinds: &HashMap<KindRef, ResolvedKind>,
    outputs: Vec<CheckedOutput>,
) -> ApplyReport {
    let manager = crate::field_manager(operator);
    let mut report = ApplyReport::default();
    for (index, mut out) in outputs.into_iter().enumerate() {
        let Some(resolved) = kinds.get(&out.kind) else {
            // check() only passes declared kinds, and every declared kind was resolved at load.
            report.failed.push(OutputError::UndeclaredKind {
                index,
                kind: out.kind.to_string(),
                name: out.name,
                phase: phase.to_string(),
                declared: "(kind not resolved)".into(),
            });
            continue;
        };
        label(&mut out.object, operator, phase);
        let api = resolved.api(client, out.namespace.as_deref());
        // A span for traces only (free unless spans are exported: see trace_export).
        let span = tracing::info_span!(
            target: crate::trace_export::TRACE_TARGET,
            "apply",
            kind = %out.kind,
            namespace = out.namespace.as_deref().unwrap_or(""),
            name = %out.name,
            otel.status_code = tracing::field::Empty,
        );
        let applied = apply_one(&api, &out, &manager, owner_uid)
            .instrument(span.clone())
            .await;
        if applied.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        match applied {
            Ok((how, written)) => {
                tracing::debug!(object = %out.describe(), ?how, "applied output");
                report.applied += 1;
                report.written.push((out.kind.clone(), written));
                if !matches!(how, Convergence::Applied | Convergence::Kept) {
                    report.converged.push((out.describe(), how));
                }
            }
            Err(e) => {
                tracing::debug!(object = %out.describe(), error = %e, "output not applied");
                report.failed.push(e);
            }
        }
    }
    report
}

/// Applies one output; converges it another way when apply alone cannot (see [`Convergence`]).
/// Also the object as the API server answered the last write.
async fn apply_one(
    api: &Api<DynamicObject>,
    out: &CheckedOutput,
    manager: &str,
    owner_uid: &str,
) -> Result<(Convergence, DynamicObject), OutputError> {
    let failed = |source| OutputError::ApplyFailed {
        object: out.describe(),
        source,
    };
    match out.update {
        UpdateStrategy::InPlace => {}
        UpdateStrategy::OnDelete => {
            if let Some(live) = api.get_opt(&out.name).await.map_err(failed)? {
                return Ok((Convergence::Kept, live));
            }
        }
        UpdateStrategy::Recreate => {
            if let Some(changed) = recreate_if_changed(api, out, manager, owner_uid).await? {
                return Ok(changed);
            }
        }
    }
    let live = match server_side_apply(api, out, manager).await {
        Ok(applied) => applied,
        Err(kube::Error::Api(s)) if s.code == 422 => {
            // The merged object is invalid: if foreign entries or an immutable field are the
            // cause and the object is ours, converge it; else the worker's object is at fault.
            let refused = kube::Error::Api(s);
            let Some(live) = api.get_opt(&out.name).await.map_err(failed)? else {
                return Err(failed(refused));
            };
            let live =
                serde_json::to_value(&live).map_err(|e| failed(kube::Error::SerdeError(e)))?;
            if !controlled_by(&live, owner_uid) {
                return Err(failed(refused));
            }
            let foreign = drift::foreign_lists(&live, &out.object, manager);
            if !foreign.is_empty() {
                return replace_lists(api, out, manager, &live, foreign).await;
            }
            if is_immutable(&refused) {
                return recreate(api, out, manager, &live, &refused).await;
            }
            return Err(failed(refused));
        }
        Err(source) => return Err(failed(source)),
    };
    let live_json = serde_json::to_value(&live).map_err(|e| failed(kube::Error::SerdeError(e)))?;
    let foreign = drift::foreign_lists(&live_json, &out.object, manager);
    if foreign.is_empty() || !controlled_by(&live_json, owner_uid) {
        return Ok((Convergence::Applied, live));
    }
    replace_lists(api, out, manager, &live_json, foreign).await
}

async fn server_side_apply(
    api: &Api<DynamicObject>,
    out: &CheckedOutput,
    manager: &str,
) -> Result<DynamicObject, kube::Error> {
    let params = PatchParams::apply(manager).force();
    api.patch(&out.name, &params, &Patch::Apply(&out.object))
        .await
}

/// Replaces the lists holding other managers' entries with the worker's (only if the object is
/// still the one read), then applies again so the host's apply owns them.
async fn replace_lists(
    api: &Api<DynamicObject>,
    out: &CheckedOutput,
    manager: &str,
    live: &Value,
    foreign: Vec<drift::ForeignList>,
) -> Result<(Convergence, DynamicObject), OutputError> {
    let converge_failed = |step: &'static str, source| OutputError::ConvergeFailed {
        object: out.describe(),
        step,
        source,
    };
    let rv = live["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let patch: json_patch::Patch =
        serde_json::from_value(drift::replacement_patch(rv, &foreign))
            .map_err(|e| converge_failed("building the replacement", kube::Error::SerdeError(e)))?;
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    };
    api.patch(&out.name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(|e| converge_failed("replacing lists held by other field managers", e))?;
    let written = server_side_apply(api, out, manager)
        .await
        .map_err(|e| converge_failed("applying after the replacement", e))?;
    let mut managers = BTreeSet::new();
    let lists = foreign
        .into_iter()
        .map(|f| {
            managers.extend(f.managers.iter().cloned());
            f.path()
        })
        .collect();
    Ok((Convergence::Replaced { lists, managers }, written))
}

/// For an output of a `Recreate` kind: when the object exists, is the resource's, and a
/// server-side apply would change it (a dry run, so fields other managers set count for
/// nothing), it is deleted and created from the worker's decision; `None` otherwise (applied
/// as usual).
async fn recreate_if_changed(
    api: &Api<DynamicObject>,
    out: &CheckedOutput,
    manager: &str,
    owner_uid: &str,
) -> Result<Option<(Convergence, DynamicObject)>, OutputError> {
    let failed = |source| OutputError::ApplyFailed {
        object: out.describe(),
        source,
    };
    let Some(live) = api.get_opt(&out.name).await.map_err(failed)? else {
        return Ok(None);
    };
    let live = serde_json::to_value(&live).map_err(|e| failed(kube::Error::SerdeError(e)))?;
    if !controlled_by(&live, owner_uid) {
        return Ok(None);
    }
    let params = PatchParams::apply(manager).force().dry_run();
    let planned = match api
        .patch(&out.name, &params, &Patch::Apply(&out.object))
        .await
    {
        Ok(planned) => {
            serde_json::to_value(&planned).map_err(|e| failed(kube::Error::SerdeError(e)))?
        }
        // Refused (an immutable field, say): recreating is what converges it.
        Err(kube::Error::Api(s)) if s.code == 422 => Value::Null,
        Err(source) => return Err(failed(source)),
    };
    let changed = changed_fields(&live, &planned);
    if changed.is_empty() {
        return Ok(None);
    }
    let refused = kube::Error::Service(
        format!(
            "updateStrategy Recreate: {} would change",
            changed.join(", ")
        )
        .into(),
    );
    recreate(api, out, manager, &live, &refused).await.map(Some)
}

/// The top-level fields (and `metadata.labels`, `metadata.annotations`) in which `planned`
/// differs from `live`, bookkeeping aside; every field when nothing was planned.
pub fn changed_fields(live: &Value, planned: &Value) -> Vec<String> {
    let Some(planned) = planned.as_object() else {
        return vec!["the object".to_string()];
    };
    let mut changed: Vec<String> = planned
        .iter()
        .chain(live.as_object().into_iter().flatten())
        .map(|(key, _)| key.as_str())
        .filter(|key| !matches!(*key, "metadata" | "status"))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|key| live.get(*key) != planned.get(*key))
        .map(str::to_string)
        .collect();
    for key in ["labels", "annotations"] {
        if live["metadata"].get(key) != planned.get("metadata").and_then(|m| m.get(key)) {
            changed.push(format!("metadata.{key}"));
        }
    }
    changed
}

/// Deletes the object (only this one: uid precondition) and creates it from the worker's decision.
async fn recreate(
    api: &Api<DynamicObject>,
    out: &CheckedOutput,
    manager: &str,
    live: &Value,
    refused: &kube::Error,
) -> Result<(Convergence, DynamicObject), OutputError> {
    let converge_failed = |step: &'static str, source| OutputError::ConvergeFailed {
        object: out.describe(),
        step,
        source,
    };
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: live["metadata"]["uid"].as_str().map(str::to_string),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&out.name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(converge_failed("deleting it to recreate it", e)),
    }
    let written = server_side_apply(api, out, manager)
        .await
        .map_err(|e| converge_failed("creating it again", e))?;
    let reason = match refused {
        kube::Error::Api(s) => crate::worker_text::bound_owned(s.message.clone(), 512),
        other => crate::worker_text::bound_owned(other.to_string(), 512),
    };
    Ok((Convergence::Recreated { reason }, written))
}

/// Whether the resource with `uid` is the object's controller.
pub fn controlled_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["controller"] == true && o["uid"] == uid)
}

/// The API server refused a change of a field that cannot change once set.
fn is_immutable(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.message.contains("immutable"))
}

/// Whose outputs to prune: one phase's outputs owned by one resource.
pub struct Owned<'a> {
    pub operator: &'a str,
    pub phase: &'a PhaseDefinition,
    pub owner_uid: &'a str,
    pub namespace: Option<&'a str>,
}

impl Owned<'_> {
    /// Applied by this operator's phase, controlled by this resource: created by the host for it.
    pub fn created(&self, meta: &kube::api::ObjectMeta) -> bool {
        let labels = meta.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        label(crate::OPERATOR_LABEL) == Some(self.operator)
            && label(crate::PHASE_LABEL) == Some(self.phase.name.as_str())
            && meta.namespace.as_deref() == self.namespace.or(meta.namespace.as_deref())
            && meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == self.owner_uid && o.controller == Some(true))
    }
}

/// The objects this phase applied for this resource before and no longer returns (read from
/// the output watch caches): what [`prune_outputs`] deletes.
pub fn prunable(
    owned: &Owned<'_>,
    existing: &impl ExistingObjects,
    keep: &BTreeSet<ObjectKey>,
) -> Vec<(KindRef, kube::api::ObjectMeta)> {
    let mut found = Vec::new();
    for kind in &owned.phase.outputs {
        existing.each_maybe_controlled_by(kind, owned.namespace, owned.owner_uid, &mut |m| {
            let name = m.name.clone().unwrap_or_default();
            if owned.created(m) && !keep.contains(&(kind.clone(), m.namespace.clone(), name)) {
                found.push((kind.clone(), m.clone()));
            }
        });
    }
    found
}

/// Deletes objects this phase applied for this resource before and no longer returns (as
/// [`prunable`] found them). Objects the host did not create are never touched: they lack
/// the operator/phase labels or the controller reference to the resource, which workers cannot
/// set. Each delete is preconditioned on the cached uid. Returns how many were deleted;
/// `gone` is told of each object that is gone now (deleted, or found already deleted).
pub async fn prune_outputs(
    client: &Client,
    kinds: &HashMap<KindRef, ResolvedKind>,
    prunable: Vec<(KindRef, kube::api::ObjectMeta)>,
    mut gone: impl FnMut(&KindRef, &kube::api::ObjectMeta),
) -> Result<usize, (usize, OutputError)> {
    let mut deleted = 0;
    for (kind, m) in prunable {
        let Some(resolved) = kinds.get(&kind) else {
            continue;
        };
        {
            let name = m.name.clone().unwrap_or_default();
            let api = resolved.api(client, m.namespace.as_deref());
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: m.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let describe = format!(
                "{} {}/{name}",
                kind.kind,
                m.namespace.clone().unwrap_or_default()
            );
            match api.delete(&name, &params).await {
                Ok(_) => {
                    tracing::debug!(object = %describe, "pruned output");
                    deleted += 1;
                    gone(&kind, &m);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => gone(&kind, &m),
                // Another object of that name now (the uid precondition): not ours to drop.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(source) => {
                    return Err((
                        deleted,
                        OutputError::PruneFailed {
                            object: describe,
                            source,
                        },
                    ))
                }
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase() -> PhaseDefinition {
        PhaseDefinition {
            name: "Syncing".into(),
            is_final: false,
            ready: false,
            module: None,
            inputs: vec![],
            outputs: vec![
                KindRef::new("v1", "Service"),
                KindRef::new("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ],
            update_strategies: Default::default(),
            next: vec![],
            limits: Default::default(),
            queries: vec![],
            randomness: Default::default(),
            shadow: None,
        }
    }

    fn owner() -> Owner<'static> {
        Owner {
            api_version: "examples.io/v1",
            kind: "AutoRoute",
            name: "r",
            uid: "u-1",
            namespace: Some("ns"),
        }
    }

    fn svc(extra: Value) -> String {
        let mut v = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}});
        if let (Some(m), Some(e)) = (v["metadata"].as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        v.to_string()
    }

    fn namespaced() -> HashMap<KindRef, bool> {
        HashMap::from([
            (KindRef::new("v1", "Service"), true),
            (
                KindRef::new("rbac.authorization.k8s.io/v1", "ClusterRole"),
                false,
            ),
        ])
    }

    #[test]
    fn accepted_outputs_get_namespace_and_controller_owner() {
        let out = check(
            &phase(),
            &owner(),
            &namespaced(),
            &[svc(json!({}))],
            &Default::default(),
        )
        .unwrap();
        assert_eq!(out[0].namespace.as_deref(), Some("ns"));
        let refs = &out[0].object["metadata"]["ownerReferences"][0];
        assert_eq!(refs["uid"], "u-1");
        assert_eq!(refs["controller"], true);
    }

    /// A worker may return a modified copy of an object it read: what the API server set is
    /// dropped rather than sent as a precondition that fails, and so are the finalizers
    /// Kubernetes removes itself.
    #[test]
    fn server_set_metadata_is_dropped() {
        let copy = svc(json!({
            "uid": "0000-1111", "resourceVersion": "1", "generation": 42,
            "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "x"}],
            "finalizers": ["kubernetes.io/pvc-protection", "foregroundDeletion"],
            "labels": {"a": "b"},
        }));
        let out = check(
            &phase(),
            &owner(),
            &namespaced(),
            &[copy],
            &Default::default(),
        )
        .unwrap();
        let meta = out[0].object["metadata"].as_object().unwrap();
        let mut fields: Vec<&str> = meta.keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["labels", "name", "namespace", "ownerReferences"]);
    }

    #[test]
    fn every_rule_refuses() {
        let n = namespaced();
        let p = phase();
        let o = owner();
        let err = |outs: &[String]| check(&p, &o, &n, outs, &Default::default()).unwrap_err();
        assert!(matches!(
            err(&["[1]".into()]),
            OutputError::NotAnObject { .. }
        ));
        assert!(matches!(
            err(&["{not json".into()]),
            OutputError::NotAnObject { .. }
        ));
        assert!(matches!(
            err(&[json!({"kind": "Service", "metadata": {"name": "a"}}).to_string()]),
            OutputError::MissingField {
                field: "apiVersion",
                ..
            }
        ));
        assert!(matches!(
            err(&[
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}})
                    .to_string()
            ]),
            OutputError::UndeclaredKind { .. }
        ));
        assert!(matches!(
            err(&[svc(json!({"namespace": "kube-system"}))]),
            OutputError::WrongNamespace { .. }
        ));
        assert!(matches!(
            err(&[svc(json!({"name": "Bad_Name"}))]),
            OutputError::InvalidName { .. }
        ));
        assert!(matches!(
            err(&[svc(json!({"ownerReferences": [{"uid": "x"}]}))]),
            OutputError::OwnerReferences { .. }
        ));
        assert!(matches!(
            err(&[svc(json!({})), svc(json!({}))]),
            OutputError::Duplicate { .. }
        ));
        let held = err(&[svc(
            json!({"finalizers": ["kubernetes.io/pvc-protection", "example.org/hold"]}),
        )]);
        assert!(
            held.to_string()
                .contains("sets finalizers example.org/hold: nothing would remove them"),
            "{held}"
        );
        assert!(matches!(
            err(&[json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "a"}}).to_string()]),
            OutputError::ClusterScoped { .. }
        ));
        let msg = err(&[
            svc(json!({})),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}})
                .to_string(),
        ])
        .to_string();
        assert!(
            msg.contains("apps/v1 Deployment is not a declared output of phase Syncing"),
            "{msg}"
        );
    }

    /// What a `Recreate` kind compares: the live object and the dry run of the worker's, other
    /// managers' fields being in both; bookkeeping and status aside.
    #[test]
    fn changed_fields_are_the_operators_own() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "resourceVersion": "7", "labels": {"a": "1"}},
            "data": {"value": "v1", "side-effect": "injected"}});
        let mut same = live.clone();
        same["metadata"]["resourceVersion"] = json!("8");
        same["metadata"]["managedFields"] = json!([{"manager": "wasmpilot-x"}]);
        assert!(changed_fields(&live, &same).is_empty());
        let mut changed = live.clone();
        changed["data"]["value"] = json!("v2");
        changed["metadata"]["labels"]["a"] = json!("2");
        assert_eq!(changed_fields(&live, &changed), ["data", "metadata.labels"]);
        assert_eq!(changed_fields(&live, &Value::Null), ["the object"]);
    }
}
