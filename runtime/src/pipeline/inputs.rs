//! Gathers a phase's declared inputs: objects of each input kind in the resource's namespace
//! (or every namespace), narrowed by the input's label selector, namespace and name (declared,
//! or read from the resource), stripped of
//! bookkeeping (managedFields, kubectl's last-applied annotation), cut to the input's declared
//! `fields` if any, and serialized as JSON.

use crate::crd::{InputSpec, KindRef};
use crate::sandbox::NamedObjects;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta, TypeMeta};
use std::collections::BTreeMap;
use std::sync::Arc;
use wasmpilot_selection::Projection;
use wasmpilot_selection::{field_at, LabelSelector, SelectorError};

/// Where input objects come from: the watch caches on a cluster, files offline.
pub trait ObjectSource {
    /// The objects of `input`'s kind as its worker sees them (cut to its `fields`, if it
    /// declares any): at least those `wanted` names, in no particular order. A source may return
    /// more (the whole namespace); [`gather`] keeps only what the resource may see. The watch
    /// caches read their indexes, so the cost follows the objects selected, not the namespace.
    fn worker_objects(&self, input: &InputSpec, wanted: &Wanted<'_>) -> Vec<Arc<WorkerObject>>;
}

/// Which objects a reader wants: those of a namespace (`None`: every namespace), controlled by a
/// uid (owned inputs; pruning), matching a selector. An index narrows the objects to a superset
/// of these; the reader still filters each one.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    pub namespace: Option<&'a str>,
    pub controller: Option<&'a str>,
    pub selector: Option<&'a LabelSelector>,
}

/// An object as workers see it — serialized once, when it enters the cache — with the metadata
/// the host selects and sorts by. The watch caches hold only this: a fraction of the memory of
/// the parsed object.
#[derive(Debug)]
pub struct WorkerObject {
    /// Name, namespace, labels, uid and resourceVersion (the rest is in `json`).
    pub meta: Arc<PartialObjectMeta<DynamicObject>>,
    /// See [`to_worker_json`].
    pub json: Arc<str>,
}

impl WorkerObject {
    pub fn new(o: &DynamicObject, kind: &KindRef, projection: Option<&Projection>) -> Self {
        let m = &o.metadata;
        // The controller reference only (for `owned` inputs), not the whole list.
        let controller = m
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .cloned();
        let metadata = ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            labels: m.labels.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            owner_references: controller.map(|c| vec![c]),
            ..ObjectMeta::default()
        };
        WorkerObject {
            meta: Arc::new(PartialObjectMeta {
                types: None,
                metadata,
                _phantom: std::marker::PhantomData,
            }),
            json: Arc::from(projected_json(o, kind, projection)),
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        &self.meta.metadata
    }

    /// Whether a worker could tell `self` from `other`: the same JSON (as projected), labels
    /// and controller. (Without a projection the JSON holds the resourceVersion, so any change
    /// of the object differs.)
    pub fn same_for_workers(&self, other: &WorkerObject) -> bool {
        let (a, b) = (self.metadata(), other.metadata());
        self.json == other.json && a.labels == b.labels && a.owner_references == b.owner_references
    }
}

/// The projection an input declares (`fields`), if any. Definitions are validated before they
/// run (`OperatorDefinition::validate` refuses malformed paths naming the field).
pub fn projection(input: &InputSpec) -> Option<Projection> {
    if input.fields.is_empty() {
        return None;
    }
    Projection::new(&input.fields).ok()
}

/// Objects standing in for the watch caches, grouped by kind: the offline commands' objects
/// from files, and a deleted operator's finalizer inputs listed from the API server.
#[derive(Clone, Default)]
pub struct ObjectsByKind(pub std::collections::HashMap<KindRef, Vec<Arc<DynamicObject>>>);

impl ObjectsByKind {
    /// Groups Kubernetes objects (JSON) by apiVersion and kind.
    pub fn from_values(docs: impl IntoIterator<Item = serde_json::Value>) -> anyhow::Result<Self> {
        let mut objects: std::collections::HashMap<KindRef, Vec<Arc<DynamicObject>>> =
            std::collections::HashMap::new();
        for doc in docs {
            let o: DynamicObject = serde_json::from_value(doc).map_err(|e| {
                anyhow::Error::new(e).context("an object is not a Kubernetes object")
            })?;
            let types = o.types.clone().ok_or_else(|| {
                anyhow::anyhow!("object {:?} has no apiVersion/kind", o.metadata.name)
            })?;
            objects
                .entry(KindRef::new(types.api_version, types.kind))
                .or_default()
                .push(Arc::new(o));
        }
        Ok(ObjectsByKind(objects))
    }
}

impl ObjectSource for ObjectsByKind {
    fn worker_objects(&self, input: &InputSpec, wanted: &Wanted<'_>) -> Vec<Arc<WorkerObject>> {
        self.0
            .get(&KindRef::new(&input.api_version, &input.kind))
            .map(|objects| worker_objects_of(objects, input, wanted.namespace))
            .unwrap_or_default()
    }
}

/// Objects of one kind held in memory (offline runs, tests): filtered and serialized per call.
pub fn worker_objects_of(
    objects: &[Arc<DynamicObject>],
    input: &InputSpec,
    namespace: Option<&str>,
) -> Vec<Arc<WorkerObject>> {
    let kind = KindRef::new(&input.api_version, &input.kind);
    let projection = projection(input);
    objects
        .iter()
        .filter(|o| match (namespace, o.metadata.namespace.as_deref()) {
            (Some(ns), Some(ons)) => ns == ons,
            _ => true,
        })
        .map(|o| Arc::new(WorkerObject::new(o, &kind, projection.as_ref())))
        .collect()
}

/// The resource whose inputs are gathered: where it is, its uid (for `owned` inputs) and its
/// fields (for `selectorFrom`).
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    /// Its namespace (`None`: a cluster-scoped resource sees all namespaces).
    pub namespace: Option<&'a str>,
    pub uid: &'a str,
    /// Its spec, status and other fields besides metadata.
    pub data: &'a serde_json::Value,
}

impl<'a> Reader<'a> {
    pub fn of(resource: &'a DynamicObject) -> Self {
        Reader {
            namespace: resource.metadata.namespace.as_deref(),
            uid: resource.metadata.uid.as_deref().unwrap_or_default(),
            data: &resource.data,
        }
    }
}

/// What an input selects for one resource: a label selector, and where narrowed, one
/// namespace and one name. Built from the input's declaration and the resource's fields
/// ([`input_selection`]); the same for the gathering and for the requeue index.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub selector: LabelSelector,
    /// The only namespace it reads (`None`: every namespace it may read).
    pub namespace: Option<String>,
    /// The only object name it reads.
    pub name: Option<String>,
    /// Only objects the resource controls (`owned`).
    pub controller: Option<String>,
}

impl Selection {
    /// Whether the object with metadata `o` is selected (cluster-scoped objects have no
    /// namespace: a namespace narrows only namespaced ones).
    pub fn selects(&self, o: &ObjectMeta) -> bool {
        self.selects_at(o.namespace.as_deref(), o.name.as_deref(), o.labels.as_ref())
            && self
                .controller
                .as_deref()
                .is_none_or(|uid| controlled_by(o, uid))
    }

    /// Whether an object at `namespace`/`name` with `labels` is selected, its controller aside.
    pub fn selects_at(
        &self,
        namespace: Option<&str>,
        name: Option<&str>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if let (Some(ns), Some(ons)) = (self.namespace.as_deref(), namespace) {
            if ns != ons {
                return false;
            }
        }
        if let Some(wanted) = self.name.as_deref() {
            if name != Some(wanted) {
                return false;
            }
        }
        self.selector.matches(labels)
    }
}

/// The label selector of an input for the resource `reader`: its `matchLabels` and
/// `matchExpressions`, the selector at its `selectorFrom` field and the label map at its
/// `matchLabelsFrom` field of the resource.
pub fn input_selector(
    input: &InputSpec,
    reader: Reader<'_>,
) -> Result<LabelSelector, SelectorError> {
    let mut selector =
        LabelSelector::from_parts(&input.match_labels, &input.match_expressions, "")?;
    if let Some(path) = &input.selector_from {
        let value = required_field(input, reader, path, "selects by the label selector there")?;
        selector = selector.and(LabelSelector::from_json(value, path)?);
    }
    if let Some(path) = &input.match_labels_from {
        let value = required_field(input, reader, path, "selects by the labels there")?;
        let labels: BTreeMap<String, String> =
            serde_json::from_value(value.clone()).map_err(|_| SelectorError {
                field: path.clone(),
                problem: "is not a map of label names to values".to_string(),
            })?;
        selector = selector.and(LabelSelector::from_parts(&labels, &[], path)?);
    }
    Ok(selector)
}

/// The field at `path` of the resource, which `input` needs.
fn required_field<'r>(
    input: &InputSpec,
    reader: Reader<'r>,
    path: &str,
    why: &str,
) -> Result<&'r serde_json::Value, SelectorError> {
    field_at(reader.data, path).ok_or_else(|| SelectorError {
        field: path.to_string(),
        problem: format!("is not set: input {} {why}", input.name),
    })
}

/// A name or namespace the resource holds at `path`: a string that is a Kubernetes object name.
fn name_at(
    input: &InputSpec,
    reader: Reader<'_>,
    path: &str,
    why: &str,
) -> Result<Option<String>, SelectorError> {
    let Some(value) = field_at(reader.data, path) else {
        return Ok(None);
    };
    match value.as_str() {
        Some(name) if crate::object_names::is_dns_subdomain(name) => Ok(Some(name.to_string())),
        _ => Err(SelectorError {
            field: path.to_string(),
            problem: format!(
                "holds {}, not an object name: input {} {why}",
                crate::worker_text::bounded(&value.to_string(), 80),
                input.name
            ),
        }),
    }
}

/// What `input` selects for the resource `reader`; fails when a field it reads there
/// (`selectorFrom`, `matchLabelsFrom`, `nameFrom`; `namespaceFrom` when set) is missing or
/// invalid.
pub fn input_selection(input: &InputSpec, reader: Reader<'_>) -> Result<Selection, SelectorError> {
    let selector = input_selector(input, reader)?;
    let scope = if input.all_namespaces {
        None
    } else {
        reader.namespace.map(str::to_string)
    };
    let from = match &input.namespace_from {
        Some(path) => name_at(input, reader, path, "reads the namespace named there")?,
        None => None,
    };
    let namespace = match (scope, from) {
        // Narrowed to another namespace than the only one it may read: a name no namespace
        // has, so only cluster-scoped objects (which a namespace does not narrow) remain.
        (Some(own), Some(other)) if own != other => Some(String::new()),
        (scope, from) => from.or(scope),
    };
    let name = match &input.name_from {
        Some(path) => Some(
            name_at(input, reader, path, "reads the object named there")?.ok_or_else(|| {
                SelectorError {
                    field: path.clone(),
                    problem: format!(
                        "is not set: input {} reads the object named there",
                        input.name
                    ),
                }
            })?,
        ),
        None => None,
    };
    Ok(Selection {
        selector,
        namespace,
        name,
        controller: input.owned.then(|| reader.uid.to_string()),
    })
}

/// The declared `inputs` (a phase's or the finalizer's) for the resource `reader`; fails when
/// a field the resource holds for them (`selectorFrom`, …) is missing or invalid.
pub fn gather(
    inputs: &[InputSpec],
    reader: Reader<'_>,
    source: &impl ObjectSource,
) -> Result<Vec<NamedObjects>, SelectorError> {
    inputs
        .iter()
        .map(|input| {
            let mut selected = selected_objects(input, reader, source)?;
            selected.sort_by(|a, b| {
                let (a, b) = (a.metadata(), b.metadata());
                (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name))
            });
            Ok(NamedObjects {
                name: input.name.clone(),
                objects: selected.iter().map(|o| o.json.to_string()).collect(),
            })
        })
        .collect()
}

/// The objects `input` selects for the resource `reader`, in no particular order.
fn selected_objects(
    input: &InputSpec,
    reader: Reader<'_>,
    source: &impl ObjectSource,
) -> Result<Vec<Arc<WorkerObject>>, SelectorError> {
    let selection = input_selection(input, reader)?;
    let wanted = Wanted {
        namespace: selection.namespace.as_deref(),
        controller: selection.controller.as_deref(),
        selector: Some(&selection.selector),
    };
    Ok(source
        .worker_objects(input, &wanted)
        .into_iter()
        .filter(|o| selection.selects(o.metadata()))
        .collect())
}

/// Whether an object the declared `inputs` select for the resource `reader` was written after
/// `resource_version` (the resource's own): its last decision may not have seen it. Kubernetes
/// resource versions are etcd revisions, ordered across kinds of one API server; one that is not
/// a number, or a selector that fails, counts as a change (deciding again is the safe side). An
/// object deleted since leaves nothing to compare: that is not seen here.
pub fn selected_changed_after(
    inputs: &[InputSpec],
    reader: Reader<'_>,
    source: &impl ObjectSource,
    resource_version: Option<&str>,
) -> bool {
    let Some(since) = resource_version.and_then(|v| v.parse::<u64>().ok()) else {
        return true;
    };
    inputs
        .iter()
        .any(|input| match selected_objects(input, reader, source) {
            Ok(objects) => objects.iter().any(|o| {
                o.metadata()
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_none_or(|v| v > since)
            }),
            Err(_) => true,
        })
}

/// Whether an input narrows what it reads by labels, name or namespace read from the
/// resource (else it takes every object of its kind in its namespaces).
pub fn selects(input: &InputSpec) -> bool {
    !input.match_labels.is_empty()
        || !input.match_expressions.is_empty()
        || input.selector_from.is_some()
        || input.match_labels_from.is_some()
        || input.name_from.is_some()
        || input.namespace_from.is_some()
}

/// Every field path of the resource an input reads its selection from.
pub fn selection_paths(input: &InputSpec) -> impl Iterator<Item = &str> {
    [
        &input.selector_from,
        &input.match_labels_from,
        &input.name_from,
        &input.namespace_from,
    ]
    .into_iter()
    .filter_map(|p| p.as_deref())
}

/// Whether the object's controller is the resource with `uid`.
pub fn controlled_by(o: &ObjectMeta, uid: &str) -> bool {
    !uid.is_empty()
        && o.owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Annotation `kubectl apply` writes: a copy of the whole applied object, never worker input.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes what no worker decision should depend on and what makes cached objects large:
/// managedFields and kubectl's last-applied annotation (together 40–60 % of a typical
/// Deployment). Applied to input objects as they enter the watch cache.
pub fn strip_bookkeeping(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    if let Some(annotations) = o.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            o.metadata.annotations = None;
        }
    }
}

/// Serializes an object the way workers see it: apiVersion and kind set (list items lack them),
/// bookkeeping removed ([`strip_bookkeeping`]).
pub fn to_worker_json(o: &DynamicObject, kind: &KindRef) -> String {
    projected_json(o, kind, None)
}

/// An input object as its worker sees it: [`to_worker_json`], cut to the input's projection.
pub fn projected_json(
    o: &DynamicObject,
    kind: &KindRef,
    projection: Option<&Projection>,
) -> String {
    let mut o = o.clone();
    strip_bookkeeping(&mut o);
    if o.types.is_none() {
        o.types = Some(TypeMeta {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
        });
    }
    // Serializing a DynamicObject (a map of JSON values) cannot fail.
    match projection {
        None => serde_json::to_string(&o).unwrap_or_else(|_| "{}".to_string()),
        Some(projection) => {
            let whole = serde_json::to_value(&o).unwrap_or_default();
            projection.apply(&whole).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::PhaseDefinition;
    use std::collections::BTreeMap;

    struct Fixed(Vec<Arc<DynamicObject>>);
    impl ObjectSource for Fixed {
        fn worker_objects(&self, input: &InputSpec, _: &Wanted<'_>) -> Vec<Arc<WorkerObject>> {
            // All namespaces on purpose: gather itself must scope them.
            worker_objects_of(&self.0, input, None)
        }
    }

    /// An input of the Deployments labelled `tier: web`.
    fn web_deployments() -> InputSpec {
        InputSpec {
            name: "deployments".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            match_labels: BTreeMap::from([("tier".to_string(), "web".to_string())]),
            match_expressions: Vec::new(),
            selector_from: None,
            owned: false,
            fields: Vec::new(),
            ..Default::default()
        }
    }

    fn deployment(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<DynamicObject> {
        let mut o: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "managedFields": [{"manager": "kubectl"}],
                         "annotations": {LAST_APPLIED: "{}", "keep": "me"}},
            "spec": {"replicas": 1}
        }))
        .unwrap();
        o.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        Arc::new(o)
    }

    #[test]
    fn only_a_selected_input_written_after_the_resource_counts_as_a_change() {
        let input = web_deployments();
        let at = |o: Arc<DynamicObject>, rv: &str| {
            let mut o = (*o).clone();
            o.metadata.resource_version = Some(rv.into());
            Arc::new(o)
        };
        let source = Fixed(vec![
            at(deployment("b", "web", &[("tier", "web")]), "100"),
            // Newer, but neither selected nor in the resource's namespace.
            at(deployment("b", "db", &[("tier", "db")]), "900"),
            at(deployment("a", "web", &[("tier", "web")]), "900"),
        ]);
        let data = serde_json::Value::Null;
        let reader = Reader {
            namespace: Some("b"),
            uid: "u-1",
            data: &data,
        };
        let inputs = std::slice::from_ref(&input);
        assert!(!selected_changed_after(
            inputs,
            reader,
            &source,
            Some("100")
        ));
        assert!(!selected_changed_after(
            inputs,
            reader,
            &source,
            Some("150")
        ));
        assert!(selected_changed_after(inputs, reader, &source, Some("99")));
        // Not comparable: decide again.
        assert!(selected_changed_after(inputs, reader, &source, Some("x")));
        assert!(selected_changed_after(inputs, reader, &source, None));
        let odd = Fixed(vec![at(deployment("b", "web", &[("tier", "web")]), "v2")]);
        assert!(selected_changed_after(inputs, reader, &odd, Some("150")));
    }

    #[test]
    fn namespace_and_labels_scope_inputs_and_managed_fields_are_stripped() {
        let phase = PhaseDefinition {
            name: "Syncing".into(),
            ready: false,
            is_final: false,
            module: None,
            inputs: vec![web_deployments()],
            outputs: vec![],
            update_strategies: Default::default(),
            next: vec![],
            limits: Default::default(),
            queries: vec![],
            randomness: Default::default(),
            shadow: None,
        };
        let source = Fixed(vec![
            deployment("b", "z", &[("tier", "web")]),
            deployment("a", "other-ns", &[("tier", "web")]),
            deployment("b", "a", &[("tier", "web")]),
            deployment("b", "db", &[("tier", "db")]),
        ]);
        let data = serde_json::Value::Null;
        let reader = Reader {
            namespace: Some("b"),
            uid: "u-1",
            data: &data,
        };
        let got = gather(&phase.inputs, reader, &source).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "deployments");
        let objs: Vec<serde_json::Value> = got[0]
            .objects
            .iter()
            .map(|s| serde_json::from_str(s).unwrap())
            .collect();
        let names: Vec<_> = objs
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "z"]);
        assert_eq!(objs[0]["kind"], "Deployment");
        assert_eq!(objs[0]["apiVersion"], "apps/v1");
        assert!(objs[0]["metadata"].get("managedFields").is_none());
        assert_eq!(
            objs[0]["metadata"]["annotations"],
            serde_json::json!({"keep": "me"}),
            "only kubectl's last-applied annotation is dropped"
        );
    }

    #[test]
    fn declared_fields_cut_objects_and_hide_changes_to_other_fields() {
        let input = InputSpec {
            fields: vec!["spec.replicas".into()],
            ..web_deployments()
        };
        let mut o = (*deployment("b", "web", &[("tier", "web")])).clone();
        o.data["status"] = serde_json::json!({"readyReplicas": 1});
        let objects = worker_objects_of(&[Arc::new(o.clone())], &input, None);
        let seen: serde_json::Value = serde_json::from_str(&objects[0].json).unwrap();
        assert_eq!(
            seen,
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "b"}, "spec": {"replicas": 1}})
        );
        assert_eq!(
            objects[0]
                .metadata()
                .labels
                .as_ref()
                .map(|l| l["tier"].as_str()),
            Some("web"),
            "the host still selects by the labels the worker does not get"
        );

        let mut status_changed = o.clone();
        status_changed.data["status"]["readyReplicas"] = 2.into();
        status_changed.metadata.resource_version = Some("2".into());
        let again = worker_objects_of(&[Arc::new(status_changed.clone())], &input, None);
        assert!(
            again[0].same_for_workers(&objects[0]),
            "status is not projected"
        );

        let mut relabelled = o.clone();
        relabelled.metadata.labels = Some(BTreeMap::from([("tier".into(), "db".into())]));
        let relabelled = worker_objects_of(&[Arc::new(relabelled)], &input, None);
        assert!(
            !relabelled[0].same_for_workers(&objects[0]),
            "labels select"
        );

        let mut scaled = o.clone();
        scaled.data["spec"]["replicas"] = 3.into();
        let scaled = worker_objects_of(&[Arc::new(scaled)], &input, None);
        assert!(
            !scaled[0].same_for_workers(&objects[0]),
            "spec.replicas is read"
        );

        let whole = InputSpec {
            fields: Vec::new(),
            ..input
        };
        let (before, after) = (
            worker_objects_of(&[Arc::new(o)], &whole, None),
            worker_objects_of(&[Arc::new(status_changed)], &whole, None),
        );
        assert!(
            !after[0].same_for_workers(&before[0]),
            "whole objects: every change counts"
        );
    }

    #[test]
    fn owned_inputs_are_the_objects_the_resource_controls() {
        let owned_by = |uid: &str, controller: bool| {
            let mut o = (*deployment("b", &format!("{uid}-{controller}"), &[])).clone();
            o.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    uid: uid.into(),
                    controller: Some(controller),
                    ..Default::default()
                },
            ]);
            Arc::new(o)
        };
        let phase = PhaseDefinition {
            name: "Ready".into(),
            ready: false,
            is_final: false,
            module: None,
            inputs: vec![InputSpec {
                name: "mine".into(),
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                match_labels: BTreeMap::new(),
                match_expressions: Vec::new(),
                selector_from: None,
                owned: true,
                fields: Vec::new(),
                ..Default::default()
            }],
            outputs: vec![],
            update_strategies: Default::default(),
            next: vec![],
            limits: Default::default(),
            queries: vec![],
            randomness: Default::default(),
            shadow: None,
        };
        let source = Fixed(vec![
            owned_by("u-1", true),
            owned_by("u-1", false),
            owned_by("u-2", true),
            deployment("b", "nobody", &[]),
        ]);
        let data = serde_json::Value::Null;
        let got = gather(
            &phase.inputs,
            Reader {
                namespace: Some("b"),
                uid: "u-1",
                data: &data,
            },
            &source,
        )
        .unwrap();
        assert_eq!(got[0].objects.len(), 1);
        assert!(
            got[0].objects[0].contains("\"u-1-true\""),
            "{}",
            got[0].objects[0]
        );
    }

    /// Related objects chosen per resource: in every namespace, narrowed to the namespace, name
    /// and labels its fields hold; without `allNamespaces` another namespace gives nothing; a
    /// missing name is an error naming the field.
    #[test]
    fn inputs_narrowed_by_the_resources_fields() {
        let related: InputSpec = serde_json::from_value(serde_json::json!({
            "name": "sources", "apiVersion": "apps/v1", "kind": "Deployment",
            "allNamespaces": true, "namespaceFrom": "spec.sourceNamespace",
            "matchLabelsFrom": "spec.sourceLabels",
        }))
        .unwrap();
        let source = Fixed(vec![
            deployment("src", "a", &[("app", "web")]),
            deployment("src", "b", &[("app", "db")]),
            deployment("other", "c", &[("app", "web")]),
            deployment("own", "d", &[("app", "web")]),
        ]);
        let names = |inputs: &[InputSpec], data: &serde_json::Value| -> Vec<String> {
            let reader = Reader {
                namespace: Some("own"),
                uid: "u-1",
                data,
            };
            gather(inputs, reader, &source).unwrap()[0]
                .objects
                .iter()
                .map(|o| {
                    let o: serde_json::Value = serde_json::from_str(o).unwrap();
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap(),
                        o["metadata"]["name"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let data =
            serde_json::json!({"spec": {"sourceNamespace": "src", "sourceLabels": {"app": "web"}}});
        assert_eq!(names(std::slice::from_ref(&related), &data), ["src/a"]);
        let unset = serde_json::json!({"spec": {"sourceLabels": {"app": "web"}}});
        assert_eq!(
            names(std::slice::from_ref(&related), &unset),
            ["other/c", "own/d", "src/a"],
            "no namespace named: every namespace"
        );
        let own_only = InputSpec {
            all_namespaces: false,
            ..related.clone()
        };
        assert!(names(std::slice::from_ref(&own_only), &data).is_empty());
        assert_eq!(names(std::slice::from_ref(&own_only), &unset), ["own/d"]);
        let by_name = InputSpec {
            name_from: Some("spec.sourceName".into()),
            ..related.clone()
        };
        let named = serde_json::json!({"spec": {"sourceNamespace": "src", "sourceName": "a", "sourceLabels": {}}});
        assert_eq!(names(std::slice::from_ref(&by_name), &named), ["src/a"]);
        let reader = Reader {
            namespace: Some("own"),
            uid: "u-1",
            data: &data,
        };
        let e = gather(std::slice::from_ref(&by_name), reader, &source).unwrap_err();
        assert_eq!(e.field, "spec.sourceName");
        let bad = serde_json::json!({"spec": {"sourceNamespace": "src", "sourceName": "a", "sourceLabels": "app=web"}});
        let reader = Reader {
            namespace: Some("own"),
            uid: "u-1",
            data: &bad,
        };
        let e = gather(std::slice::from_ref(&by_name), reader, &source).unwrap_err();
        assert_eq!(e.field, "spec.sourceLabels");
    }
}
