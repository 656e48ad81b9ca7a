//! Which of an operator's resources select an input object: each resource's selectors parsed
//! once per change of what they are read from, filed by namespace and a required label value,
//! so an input change costs what it may match rather than the number of resources.

use crate::crd::InputSpec;
use crate::pipeline::inputs::{self, Reader, Selection};
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use wasmpilot_selection::field_at;

/// A resource of the operator's kind: its namespace (`None`: cluster-scoped) and name.
type ResourceKey = Arc<(Option<String>, String)>;

type Labels = BTreeMap<String, String>;

/// The resources of the operator's kind that select objects of one input kind (every input of
/// that kind selects by labels), kept current from the resource kind's watch events
/// ([`SelectorIndex::observe`]).
pub struct SelectorIndex {
    /// The (non-owned) inputs of the kind: a resource selects an object when any of their
    /// selectors for it matches.
    specs: Vec<InputSpec>,
    resource: ApiResource,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: HashMap<ResourceKey, Entry>,
    /// Per namespace of the resources (`""`: cluster-scoped resources, which read every
    /// namespace).
    namespaces: HashMap<String, Filed>,
    /// During a relist, the resources listed so far: the others are gone once it ends.
    relisting: Option<HashSet<ResourceKey>>,
}

/// The resources of one namespace, by what their selectors require.
#[derive(Default)]
struct Filed {
    /// label key → value → the resources each of whose selectors requires that label to have
    /// one of some values (filed under each of them).
    by_label: HashMap<String, HashMap<String, HashSet<ResourceKey>>>,
    /// Resources with a selector that requires no label value, or cannot be evaluated: looked at
    /// on every change in the namespace.
    always: HashSet<ResourceKey>,
}

/// One resource's selections, and what they were read from.
struct Entry {
    /// Per input, the values at the fields it reads its selection from (`selectorFrom`, …).
    sources: Vec<Vec<Option<Value>>>,
    /// Per input, what it selects for this resource (`None`: it cannot be evaluated; the
    /// resource is requeued to report why).
    selections: Vec<Option<Selection>>,
    /// The namespace it is filed under: the one every selection narrows to, else `""`
    /// (looked at for changes in every namespace).
    filed_in: String,
}

impl Entry {
    fn of(specs: &[InputSpec], obj: &DynamicObject, sources: Vec<Vec<Option<Value>>>) -> Self {
        let reader = Reader::of(obj);
        let selections: Vec<Option<Selection>> = specs
            .iter()
            .map(|spec| inputs::input_selection(spec, reader).ok())
            .collect();
        let mut namespaces = selections
            .iter()
            .map(|s| s.as_ref().and_then(|s| s.namespace.as_deref()));
        let first = namespaces.next().flatten();
        let filed_in = match first {
            Some(ns) if !ns.is_empty() && namespaces.all(|n| n == Some(ns)) => ns.to_string(),
            _ => String::new(),
        };
        Entry {
            sources,
            selections,
            filed_in,
        }
    }

    /// Where the resource is filed: each label value its selectors all require one of, or
    /// `None` (always looked at).
    fn filing(&self) -> Option<Vec<(&str, &str)>> {
        let mut filed = Vec::new();
        for selection in &self.selections {
            let (key, values) = selection.as_ref()?.selector.required_values()?;
            filed.extend(values.iter().map(|v| (key, v.as_str())));
        }
        Some(filed)
    }

    fn matches(&self, object: &ObjectAt<'_>) -> bool {
        self.selections.iter().any(|s| match s {
            Some(selection) => {
                selection.selects_at(object.namespace, object.name, object.labels)
                    || object
                        .labels_before
                        .is_some_and(|old| selection.selects_at(object.namespace, object.name, old))
            }
            None => true,
        })
    }
}

/// An input object that changed, as the index reads it: where it is, its name, its labels now
/// and before the change (`None`: not seen before; a `Some(None)` object had no labels).
#[derive(Clone, Copy, Debug)]
pub struct ObjectAt<'a> {
    /// `None`: cluster-scoped.
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub labels: Option<&'a Labels>,
    pub labels_before: Option<Option<&'a Labels>>,
}

impl SelectorIndex {
    pub fn new(resource: ApiResource, specs: Vec<InputSpec>) -> Self {
        SelectorIndex {
            specs,
            resource,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A watch event of the resource kind: files what changed (selectors parsed again only when
    /// a `selectorFrom` field changed), forgets what went.
    pub fn observe(&self, event: &watcher::Event<DynamicObject>) {
        let mut state = self.lock();
        match event {
            watcher::Event::Apply(obj) => {
                self.file(&mut state, obj);
            }
            watcher::Event::Delete(obj) => state.forget(&key_of(obj)),
            watcher::Event::Init => state.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                let key = self.file(&mut state, obj);
                if let Some(listed) = &mut state.relisting {
                    listed.insert(key);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = state.relisting.take() {
                    let gone: Vec<ResourceKey> = state
                        .entries
                        .keys()
                        .filter(|k| !listed.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        state.forget(&key);
                    }
                }
            }
        }
    }

    /// Files `obj` (again, if its selectors' sources changed); its key.
    fn file(&self, state: &mut State, obj: &DynamicObject) -> ResourceKey {
        let sources: Vec<Vec<Option<Value>>> = self
            .specs
            .iter()
            .map(|spec| {
                inputs::selection_paths(spec)
                    .map(|path| field_at(&obj.data, path).cloned())
                    .collect()
            })
            .collect();
        let key = key_of(obj);
        if let Some((key, entry)) = state.entries.get_key_value(&key) {
            if entry.sources == sources {
                return key.clone();
            }
        }
        state.forget(&key);
        let entry = Entry::of(&self.specs, obj, sources);
        let filed = state.namespaces.entry(entry.filed_in.clone()).or_default();
        match entry.filing() {
            Some(values) => {
                for (label, value) in values {
                    filed
                        .by_label
                        .entry(label.to_string())
                        .or_default()
                        .entry(value.to_string())
                        .or_default()
                        .insert(key.clone());
                }
            }
            None => {
                filed.always.insert(key.clone());
            }
        }
        state.entries.insert(key.clone(), entry);
        key
    }

    /// The resources whose selection matches `object` now or before its change — or cannot be
    /// evaluated, so the resource reports why. Costs the resources filed under the object's
    /// namespace and labels (and those always looked at), not the namespace's; a cluster-scoped
    /// object looks at every resource.
    pub fn selecting(&self, object: &ObjectAt<'_>) -> Vec<ObjectRef<DynamicObject>> {
        let state = self.lock();
        let matching = |key: &&ResourceKey| {
            state
                .entries
                .get(*key)
                .is_some_and(|entry| entry.matches(object))
        };
        let found: Vec<&ResourceKey> = match object.namespace {
            None => state.entries.keys().filter(matching).collect(),
            Some(ns) => {
                let mut candidates: HashSet<&ResourceKey> = HashSet::new();
                for filed in [ns, ""].iter().filter_map(|n| state.namespaces.get(*n)) {
                    candidates.extend(filed.always.iter());
                    for labels in [object.labels, object.labels_before.flatten()]
                        .into_iter()
                        .flatten()
                    {
                        for (label, value) in labels {
                            if let Some(keys) = filed.by_label.get(label).and_then(|v| v.get(value))
                            {
                                candidates.extend(keys.iter());
                            }
                        }
                    }
                }
                candidates.into_iter().filter(matching).collect()
            }
        };
        found
            .into_iter()
            .map(|key| {
                let reference = ObjectRef::new_with(&key.1, self.resource.clone());
                match &key.0 {
                    Some(ns) => reference.within(ns),
                    None => reference,
                }
            })
            .collect()
    }

    /// How many resources are filed (for tests and benchmarks).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl State {
    /// Unfiles the resource `key`, if filed.
    fn forget(&mut self, key: &ResourceKey) {
        let Some(entry) = self.entries.remove(key) else {
            return;
        };
        let ns = entry.filed_in.clone();
        let Some(filed) = self.namespaces.get_mut(&ns) else {
            return;
        };
        match entry.filing() {
            Some(values) => {
                for (label, value) in values {
                    if let Some(by_value) = filed.by_label.get_mut(label) {
                        if let Some(keys) = by_value.get_mut(value) {
                            keys.remove(key);
                            if keys.is_empty() {
                                by_value.remove(value);
                            }
                        }
                        if by_value.is_empty() {
                            filed.by_label.remove(label);
                        }
                    }
                }
            }
            None => {
                filed.always.remove(key);
            }
        }
        if filed.by_label.is_empty() && filed.always.is_empty() {
            self.namespaces.remove(&ns);
        }
    }
}

fn key_of(obj: &DynamicObject) -> ResourceKey {
    Arc::new((
        obj.metadata.namespace.clone(),
        obj.metadata.name.clone().unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(selector_from: Option<&str>, match_labels: &[(&str, &str)]) -> InputSpec {
        serde_json::from_value(json!({
            "name": "deployments", "apiVersion": "apps/v1", "kind": "Deployment",
            "selectorFrom": selector_from,
            "matchLabels": match_labels.iter().cloned().collect::<BTreeMap<_, _>>(),
        }))
        .expect("an input")
    }

    /// The resources `index` requeues for a change of an object in `namespace` (named `x`).
    fn selecting(
        index: &SelectorIndex,
        namespace: Option<&str>,
        new: Option<&Labels>,
        old: Option<Option<&Labels>>,
    ) -> Vec<ObjectRef<DynamicObject>> {
        index.selecting(&ObjectAt {
            namespace,
            name: Some("x"),
            labels: new,
            labels_before: old,
        })
    }

    /// Inputs narrowed by the resource's fields to another namespace, a name and a label map:
    /// a resource is filed where it reads, and only a change there, to that name, with those
    /// labels, requeues it.
    #[test]
    fn a_narrowed_input_requeues_only_the_resources_reading_that_object() {
        let spec: InputSpec = serde_json::from_value(json!({
            "name": "sources", "apiVersion": "v1", "kind": "ConfigMap", "allNamespaces": true,
            "namespaceFrom": "spec.sourceNamespace", "nameFrom": "spec.sourceName",
            "matchLabelsFrom": "spec.sourceLabels",
        }))
        .expect("an input");
        let resource = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("examples.io", "v1", "List"),
            "lists",
        );
        let index = SelectorIndex::new(resource, vec![spec]);
        let list = |ns: &str, name: &str, spec: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "examples.io/v1", "kind": "List",
                "metadata": {"name": name, "namespace": ns}, "spec": spec,
            }))
            .expect("a resource")
        };
        let source = json!({"sourceNamespace": "src", "sourceName": "settings", "sourceLabels": {"app": "web"}});
        index.observe(&watcher::Event::Apply(list(
            "a",
            "reads-src",
            source.clone(),
        )));
        index.observe(&watcher::Event::Apply(list(
            "b",
            "reads-other",
            json!({"sourceNamespace": "other", "sourceName": "settings", "sourceLabels": {}}),
        )));
        index.observe(&watcher::Event::Apply(list("c", "broken", json!({}))));
        fn at<'a>(namespace: &'a str, name: &'a str, labels: &'a Labels) -> ObjectAt<'a> {
            ObjectAt {
                namespace: Some(namespace),
                name: Some(name),
                labels: Some(labels),
                labels_before: None,
            }
        }
        let (web, none) = (&labels(&[("app", "web")]), &Labels::new());
        assert_eq!(
            names(index.selecting(&at("src", "settings", web))),
            ["a/reads-src", "c/broken"],
            "the one reading src/settings, and the one that cannot be evaluated"
        );
        assert_eq!(
            names(index.selecting(&at("src", "settings", none))),
            ["c/broken"]
        );
        assert_eq!(
            names(index.selecting(&at("src", "other", web))),
            ["c/broken"]
        );
        assert_eq!(
            names(index.selecting(&at("other", "settings", none))),
            ["b/reads-other", "c/broken"],
            "filed in the namespace it reads, not its own"
        );
        assert_eq!(
            names(index.selecting(&at("a", "settings", web))),
            ["c/broken"]
        );
    }

    fn route(ns: &str, name: &str, selector: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"deploymentSelector": selector},
        }))
        .expect("a route")
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn names(found: Vec<ObjectRef<DynamicObject>>) -> Vec<String> {
        let mut names: Vec<String> = found
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        names.sort();
        names
    }

    fn index() -> SelectorIndex {
        let resource = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("examples.io", "v1", "AutoRoute"),
            "autoroutes",
        );
        SelectorIndex::new(resource, vec![spec(Some("spec.deploymentSelector"), &[])])
    }

    #[test]
    fn a_change_finds_the_resources_whose_selector_matches_before_or_after() {
        let index = index();
        let apply = |obj| index.observe(&watcher::Event::Apply(obj));
        apply(route("a", "web", json!({"matchLabels": {"app": "web"}})));
        apply(route(
            "a",
            "api",
            json!({"matchLabels": {"app": "api", "tier": "be"}}),
        ));
        apply(route("b", "web", json!({"matchLabels": {"app": "web"}})));
        apply(route(
            "a",
            "not-db",
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}),
        ));
        apply(route("a", "broken", json!({"matchLabels": "nope"})));
        apply(route(
            "a",
            "either",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}),
        ));
        let web = labels(&[("app", "web")]);
        let api = labels(&[("app", "api"), ("tier", "be")]);
        assert_eq!(
            names(selecting(&index, Some("a"), Some(&web), None)),
            ["a/broken", "a/either", "a/not-db", "a/web"],
            "matching in its namespace, the NotIn one, and the one that cannot be evaluated"
        );
        assert_eq!(
            names(selecting(&index, Some("a"), Some(&api), Some(Some(&web)))),
            ["a/api", "a/broken", "a/either", "a/not-db", "a/web"],
            "the labels before the change count too"
        );
        assert_eq!(
            names(selecting(
                &index,
                Some("a"),
                Some(&labels(&[("app", "db")])),
                None
            )),
            ["a/broken"]
        );
        assert_eq!(
            names(selecting(&index, None, Some(&web), None)),
            ["a/broken", "a/either", "a/not-db", "a/web", "b/web"],
            "a cluster-scoped object: every namespace"
        );
    }

    #[test]
    fn a_selector_edited_or_a_resource_gone_is_filed_again() {
        let index = index();
        index.observe(&watcher::Event::Apply(route(
            "a",
            "r",
            json!({"matchLabels": {"app": "web"}}),
        )));
        let web = labels(&[("app", "web")]);
        let api = labels(&[("app", "api")]);
        assert_eq!(
            names(selecting(&index, Some("a"), Some(&web), None)),
            ["a/r"]
        );
        index.observe(&watcher::Event::Apply(route(
            "a",
            "r",
            json!({"matchLabels": {"app": "api"}}),
        )));
        assert!(selecting(&index, Some("a"), Some(&web), None).is_empty());
        assert_eq!(
            names(selecting(&index, Some("a"), Some(&api), None)),
            ["a/r"]
        );
        // A relist that no longer lists it forgets it.
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(route(
            "a",
            "s",
            json!({"matchLabels": {"app": "api"}}),
        )));
        assert_eq!(index.len(), 2, "the old state stays until the relist ends");
        index.observe(&watcher::Event::InitDone);
        assert_eq!(
            names(selecting(&index, Some("a"), Some(&api), None)),
            ["a/s"]
        );
        index.observe(&watcher::Event::Delete(route("a", "s", json!({}))));
        assert!(index.is_empty());
        assert!(index.lock().namespaces.is_empty(), "nothing left filed");
    }
}
