//! The objects one informer caches, indexed by namespace and name, by controller (the owner uid)
//! and by label: gathering a resource's inputs reads the few objects an index names, not its namespace.

use crate::pipeline::inputs::Wanted;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// What an index needs of a cached object.
pub trait Indexed {
    fn meta(&self) -> &ObjectMeta;
}

/// Objects by namespace (`""`: cluster-scoped) and name, with the indexes above.
pub struct ObjectIndex<T> {
    namespaces: HashMap<Arc<str>, Namespace<T>>,
    /// Controller uid → every object it controls.
    controlled: HashMap<Arc<str>, Postings<Placed>>,
    /// Whether labels are indexed (input caches; output metadata is read by controller only).
    by_labels: bool,
    len: usize,
}

/// Where an object is: its namespace (`""`: cluster-scoped) and name.
type Placed = (Arc<str>, Arc<str>);

/// One namespace's objects by name, and their names by label key and value.
struct Namespace<T> {
    by_name: BTreeMap<Arc<str>, Arc<T>>,
    by_label: ByLabel,
}

/// Names by label key and value.
type ByLabel = HashMap<String, HashMap<Box<str>, Postings<Arc<str>>>>;

/// The objects one label value or one controller names: most name one (a Deployment's `app`,
/// a route's Service), held without an allocation of its own; a tree from the second on. (A
/// one-element tree costs a ~200-byte node: with three unique label values per Deployment, a
/// third of the label index's memory.)
#[derive(Debug)]
enum Postings<K> {
    One(K),
    Many(BTreeSet<K>),
}

impl<K: Ord> Postings<K> {
    fn insert(&mut self, key: K) {
        match self {
            Postings::One(one) if *one == key => {}
            Postings::One(_) => {
                let Postings::One(one) = std::mem::replace(self, Postings::Many(BTreeSet::new()))
                else {
                    return;
                };
                *self = Postings::Many(BTreeSet::from([one, key]));
            }
            Postings::Many(many) => {
                many.insert(key);
            }
        }
    }

    /// Keeps the keys `keep` accepts; `false` when none is left (the caller drops the entry).
    fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) -> bool {
        match self {
            Postings::One(one) => keep(one),
            Postings::Many(many) => {
                many.retain(|k| keep(k));
                if many.len() == 1 {
                    if let Some(last) = many.pop_first() {
                        *self = Postings::One(last);
                    }
                }
                !matches!(self, Postings::Many(m) if m.is_empty())
            }
        }
    }

    /// Drops `key`; `false` when none is left.
    fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.retain(|k| k.borrow() != key)
    }

    fn len(&self) -> usize {
        match self {
            Postings::One(_) => 1,
            Postings::Many(many) => many.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &K> {
        let (one, many) = match self {
            Postings::One(one) => (Some(one), None),
            Postings::Many(many) => (None, Some(many.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// Adds `key` to the postings of `at` in `map`, making them if new.
fn post<A: std::hash::Hash + Eq, K: Ord>(map: &mut HashMap<A, Postings<K>>, at: A, key: K) {
    match map.entry(at) {
        Entry::Occupied(e) => e.into_mut().insert(key),
        Entry::Vacant(e) => {
            e.insert(Postings::One(key));
        }
    }
}

impl<T> Default for Namespace<T> {
    fn default() -> Self {
        Namespace {
            by_name: BTreeMap::new(),
            by_label: HashMap::new(),
        }
    }
}

/// The uid of the object's controller (the owner reference marked `controller`), if any.
fn controller_of(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

impl<T> ObjectIndex<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Indexed> ObjectIndex<T> {
    /// An empty index; `by_labels`: whether labels are indexed too.
    pub fn new(by_labels: bool) -> Self {
        ObjectIndex {
            namespaces: HashMap::new(),
            controlled: HashMap::new(),
            by_labels,
            len: 0,
        }
    }

    /// An empty index indexing what this one does.
    pub fn empty_like(&self) -> Self {
        Self::new(self.by_labels)
    }

    /// Caches `obj`, returning the object it replaces.
    pub fn insert(&mut self, obj: Arc<T>) -> Option<Arc<T>> {
        let meta = obj.meta();
        let ns = meta.namespace.as_deref().unwrap_or_default();
        let name = meta.name.as_deref().unwrap_or_default();
        let ns_key = match self.namespaces.get_key_value(ns) {
            Some((key, _)) => key.clone(),
            None => Arc::from(ns),
        };
        let space = self.namespaces.entry(ns_key.clone()).or_default();
        let previous = match space.by_name.get_mut(name) {
            Some(slot) => Some(std::mem::replace(slot, obj.clone())),
            None => {
                space.by_name.insert(Arc::from(name), obj.clone());
                None
            }
        };
        let name_key = match space.by_name.get_key_value(name) {
            Some((key, _)) => key.clone(),
            None => return previous, // inserted just above
        };
        let (old_labels, old_controller) = match &previous {
            Some(p) => (p.meta().labels.as_ref(), controller_of(p.meta())),
            None => (None, None),
        };
        let (new_labels, new_controller) = (meta.labels.as_ref(), controller_of(meta));
        if self.by_labels && old_labels != new_labels {
            for (key, value) in old_labels.into_iter().flatten() {
                unindex_label(&mut space.by_label, key, value, name);
            }
            for (key, value) in new_labels.into_iter().flatten() {
                if !space.by_label.contains_key(key.as_str()) {
                    space.by_label.insert(key.clone(), HashMap::new());
                }
                if let Some(by_value) = space.by_label.get_mut(key.as_str()) {
                    post(by_value, value.as_str().into(), name_key.clone());
                }
            }
        }
        if old_controller != new_controller {
            if let Some(uid) = old_controller {
                self.uncontrol(uid, ns, name);
            }
            if let Some(uid) = new_controller {
                let uid_key = match self.controlled.get_key_value(uid) {
                    Some((key, _)) => key.clone(),
                    None => Arc::from(uid),
                };
                post(&mut self.controlled, uid_key, (ns_key, name_key));
            }
        }
        if previous.is_none() {
            self.len += 1;
        }
        previous
    }

    /// Drops the object `namespace/name` (`None`: cluster-scoped); returns it, if it was cached.
    pub fn remove(&mut self, namespace: Option<&str>, name: &str) -> Option<Arc<T>> {
        let ns = namespace.unwrap_or_default();
        let space = self.namespaces.get_mut(ns)?;
        let removed = space.by_name.remove(name)?;
        if self.by_labels {
            for (key, value) in removed.meta().labels.iter().flatten() {
                unindex_label(&mut space.by_label, key, value, name);
            }
        }
        if space.by_name.is_empty() {
            self.namespaces.remove(ns);
        }
        if let Some(uid) = controller_of(removed.meta()) {
            self.uncontrol(uid, ns, name);
        }
        self.len -= 1;
        Some(removed)
    }

    fn uncontrol(&mut self, uid: &str, ns: &str, name: &str) {
        if let Some(objects) = self.controlled.get_mut(uid) {
            if !objects.retain(|(n, o)| (&**n, &**o) != (ns, name)) {
                self.controlled.remove(uid);
            }
        }
    }

    /// Keeps only the namespaces `keep` accepts (`None`: cluster-scoped objects).
    pub fn retain_namespaces(&mut self, keep: impl Fn(Option<&str>) -> bool) {
        self.namespaces
            .retain(|ns, _| keep((!ns.is_empty()).then_some(&**ns)));
        let namespaces = &self.namespaces;
        self.controlled
            .retain(|_, objects| objects.retain(|(ns, _)| namespaces.contains_key(ns)));
        self.len = self.namespaces.values().map(|s| s.by_name.len()).sum();
    }

    /// One object by namespace (`None`: cluster-scoped) and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<&Arc<T>> {
        self.namespaces
            .get(namespace.unwrap_or_default())?
            .by_name
            .get(name)
    }

    /// The objects in `namespace`, by name; `None`: every object of the kind.
    pub fn in_namespace(&self, namespace: Option<&str>) -> Vec<Arc<T>> {
        match namespace {
            Some(ns) => self
                .namespaces
                .get(ns)
                .map(|s| s.by_name.values().cloned().collect())
                .unwrap_or_default(),
            None => self
                .namespaces
                .values()
                .flat_map(|s| s.by_name.values().cloned())
                .collect(),
        }
    }

    /// A superset of the objects `wanted` names, from the narrowest index that applies: the
    /// objects of its controller, or of one label value the selector requires (the fewest), or
    /// else the whole namespace. In no particular order.
    pub fn candidates(&self, wanted: &Wanted<'_>) -> Vec<Arc<T>> {
        let spaces: Vec<(&Arc<str>, &Namespace<T>)> = match wanted.namespace {
            Some(ns) => self.namespaces.get_key_value(ns).into_iter().collect(),
            None => self.namespaces.iter().collect(),
        };
        let whole: usize = spaces.iter().map(|(_, s)| s.by_name.len()).sum();
        let mut best = Narrowest::Namespace(whole);
        if let Some(uid) = wanted.controller {
            let controlled = self.controlled.get(uid);
            let count = controlled.map_or(0, |objects| match wanted.namespace {
                Some(ns) => objects.iter().filter(|(n, _)| &**n == ns).count(),
                None => objects.len(),
            });
            if count < best.count() {
                best = Narrowest::Controller(count);
            }
        }
        if self.by_labels {
            for (key, values) in wanted.selector.into_iter().flat_map(|s| s.required()) {
                let count: usize = spaces
                    .iter()
                    .map(|(_, s)| {
                        label_postings(s, key, values)
                            .map(Postings::len)
                            .sum::<usize>()
                    })
                    .sum();
                if count < best.count() {
                    best = Narrowest::Label(key, values, count);
                }
            }
        }
        match best {
            Narrowest::Namespace(_) => spaces
                .iter()
                .flat_map(|&(_, s)| s.by_name.values().cloned())
                .collect(),
            Narrowest::Controller(_) => self
                .controlled
                .get(wanted.controller.unwrap_or_default())
                .into_iter()
                .flat_map(Postings::iter)
                .filter(|(ns, _)| wanted.namespace.is_none_or(|w| &**ns == w))
                .filter_map(|(ns, name)| self.namespaces.get(ns)?.by_name.get(name).cloned())
                .collect(),
            Narrowest::Label(key, values, _) => spaces
                .iter()
                .flat_map(|&(_, s)| {
                    label_postings(s, key, values)
                        .flat_map(Postings::iter)
                        .filter_map(move |name| s.by_name.get(name).cloned())
                })
                .collect(),
        }
    }
}

/// The index [`ObjectIndex::candidates`] reads, with how many objects it names.
enum Narrowest<'a> {
    Namespace(usize),
    Controller(usize),
    Label(&'a str, &'a [String], usize),
}

impl Narrowest<'_> {
    fn count(&self) -> usize {
        match self {
            Narrowest::Namespace(n) | Narrowest::Controller(n) | Narrowest::Label(_, _, n) => *n,
        }
    }
}

/// The names in `space` labelled `key` with one of `values`, one set per value present.
fn label_postings<'s, T>(
    space: &'s Namespace<T>,
    key: &str,
    values: &'s [String],
) -> impl Iterator<Item = &'s Postings<Arc<str>>> + 's {
    let by_value = space.by_label.get(key);
    values
        .iter()
        .filter_map(move |v| by_value.and_then(|m| m.get(v.as_str())))
}

fn unindex_label(by_label: &mut ByLabel, key: &str, value: &str, name: &str) {
    let Some(by_value) = by_label.get_mut(key) else {
        return;
    };
    if let Some(names) = by_value.get_mut(value) {
        if !names.remove(name) {
            by_value.remove(value);
        }
    }
    if by_value.is_empty() {
        by_label.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use wasmpilot_selection::LabelSelector;

    struct Meta(ObjectMeta);
    impl Indexed for Meta {
        fn meta(&self) -> &ObjectMeta {
            &self.0
        }
    }

    fn obj(ns: &str, name: &str, labels: &[(&str, &str)], controller: Option<&str>) -> Arc<Meta> {
        Arc::new(Meta(ObjectMeta {
            namespace: (!ns.is_empty()).then(|| ns.to_string()),
            name: Some(name.to_string()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            owner_references: controller.map(|uid| {
                vec![OwnerReference {
                    uid: uid.to_string(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        }))
    }

    fn names(mut objects: Vec<Arc<Meta>>) -> Vec<String> {
        objects.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        objects.iter().filter_map(|o| o.0.name.clone()).collect()
    }

    fn selector(labels: &[(&str, &str)]) -> LabelSelector {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LabelSelector::from_parts(&labels, &[], "").unwrap()
    }

    fn wanted<'a>(
        ns: Option<&'a str>,
        controller: Option<&'a str>,
        selector: Option<&'a LabelSelector>,
    ) -> Wanted<'a> {
        Wanted {
            namespace: ns,
            controller,
            selector,
        }
    }

    #[test]
    fn a_selector_reads_the_smallest_label_posting_of_its_namespace() {
        let mut index = ObjectIndex::new(true);
        for i in 0..100 {
            let app = format!("app-{i}");
            index.insert(obj(
                "a",
                &format!("d{i}"),
                &[("tier", "web"), ("app", &app)],
                None,
            ));
        }
        index.insert(obj(
            "b",
            "other",
            &[("tier", "web"), ("app", "app-7")],
            None,
        ));
        let s = selector(&[("tier", "web"), ("app", "app-7")]);
        assert_eq!(
            names(index.candidates(&wanted(Some("a"), None, Some(&s)))),
            ["d7"]
        );
        assert_eq!(
            names(index.candidates(&wanted(None, None, Some(&s)))),
            ["d7", "other"],
            "every namespace"
        );
        let absent = selector(&[("app", "none")]);
        assert!(index
            .candidates(&wanted(Some("a"), None, Some(&absent)))
            .is_empty());
        // Only NotIn / Exists: no value to look up, the whole namespace.
        let exists = LabelSelector::from_parts(
            &BTreeMap::new(),
            &[
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "Exists".into(),
                    values: None,
                },
            ],
            "",
        )
        .unwrap();
        assert_eq!(
            index
                .candidates(&wanted(Some("a"), None, Some(&exists)))
                .len(),
            100
        );
    }

    /// Whatever the selector and controller, the candidates filtered are exactly the namespace
    /// filtered: an index only ever narrows to a superset.
    #[test]
    fn candidates_hold_every_object_the_filter_keeps() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let mut index = ObjectIndex::new(true);
        let (apps, tiers) = (["a", "b", "c"], ["web", "db"]);
        for i in 0..60usize {
            let ns = ["x", "y", ""][i % 3];
            let mut labels = vec![("app", apps[i % 3])];
            if i % 4 != 0 {
                labels.push(("tier", tiers[i % 2]));
            }
            let controller = ["u1", "u2"].get(i % 5).copied();
            index.insert(obj(ns, &format!("o{i}"), &labels, controller));
        }
        let expression = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        };
        let selectors = [
            LabelSelector::default(),
            selector(&[("app", "a")]),
            selector(&[("app", "b"), ("tier", "db")]),
            selector(&[("app", "none")]),
            LabelSelector::from_parts(
                &BTreeMap::new(),
                &[expression("tier", "In", &["web", "db"])],
                "",
            )
            .unwrap(),
            LabelSelector::from_parts(
                &BTreeMap::new(),
                &[
                    expression("app", "NotIn", &["a"]),
                    expression("tier", "Exists", &[]),
                ],
                "",
            )
            .unwrap(),
            LabelSelector::from_parts(
                &BTreeMap::from([("app".to_string(), "c".to_string())]),
                &[expression("tier", "DoesNotExist", &[])],
                "",
            )
            .unwrap(),
        ];
        let keeps = |o: &Meta, ns: Option<&str>, uid: Option<&str>, s: &LabelSelector| {
            ns.is_none_or(|ns| o.0.namespace.as_deref().unwrap_or_default() == ns)
                && uid.is_none_or(|uid| controller_of(&o.0) == Some(uid))
                && s.matches(o.0.labels.as_ref())
        };
        let mut checked = 0;
        for ns in [Some("x"), Some("y"), Some(""), Some("absent"), None] {
            for uid in [None, Some("u1"), Some("u2"), Some("nobody")] {
                for s in &selectors {
                    let filtered = |objects: Vec<Arc<Meta>>| {
                        names(
                            objects
                                .into_iter()
                                .filter(|o| keeps(o, ns, uid, s))
                                .collect(),
                        )
                    };
                    let expected = filtered(index.in_namespace(ns));
                    let got = filtered(index.candidates(&wanted(ns, uid, Some(s))));
                    assert_eq!(got, expected, "namespace {ns:?}, controller {uid:?}, {s:?}");
                    checked += usize::from(!expected.is_empty());
                }
            }
        }
        assert!(checked > 30, "the cases select something ({checked})");
    }

    #[test]
    fn postings_hold_one_key_inline_and_go_back_to_one() {
        let mut p = Postings::One(Arc::<str>::from("a"));
        p.insert("a".into());
        assert!(
            matches!(p, Postings::One(_)),
            "the same key again: still one"
        );
        p.insert("b".into());
        p.insert("c".into());
        assert_eq!(p.len(), 3);
        assert_eq!(p.iter().map(|k| &**k).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(p.remove("b") && p.remove("nothing"));
        assert!(p.remove("a"));
        assert!(matches!(&p, Postings::One(k) if &**k == "c"), "{p:?}");
        assert!(!p.remove("c"), "the last key gone: the entry is dropped");
        let mut many = Postings::Many(BTreeSet::from([1, 2, 3]));
        assert!(!many.retain(|_| false));
    }

    #[test]
    fn label_and_controller_postings_follow_updates_and_removals() {
        let mut index = ObjectIndex::new(true);
        index.insert(obj("a", "x", &[("app", "one")], Some("u1")));
        index.insert(obj("a", "y", &[("app", "one")], Some("u1")));
        assert!(index
            .insert(obj("a", "x", &[("app", "two")], Some("u2")))
            .is_some());
        let one = selector(&[("app", "one")]);
        let two = selector(&[("app", "two")]);
        assert_eq!(
            names(index.candidates(&wanted(Some("a"), None, Some(&one)))),
            ["y"]
        );
        assert_eq!(
            names(index.candidates(&wanted(Some("a"), None, Some(&two)))),
            ["x"]
        );
        assert_eq!(
            names(index.candidates(&wanted(Some("a"), Some("u1"), None))),
            ["y"]
        );
        assert_eq!(
            names(index.candidates(&wanted(Some("a"), Some("u2"), None))),
            ["x"]
        );
        assert_eq!(index.len(), 2);

        index.remove(Some("a"), "y");
        assert!(index
            .candidates(&wanted(Some("a"), Some("u1"), None))
            .is_empty());
        assert!(index
            .candidates(&wanted(Some("a"), None, Some(&one)))
            .is_empty());
        assert!(
            !index.controlled.contains_key("u1"),
            "empty postings dropped"
        );
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn controller_postings_are_scoped_to_the_namespace_asked_and_dropped_with_it() {
        let mut index = ObjectIndex::new(false);
        index.insert(obj("a", "x", &[("app", "one")], Some("u")));
        index.insert(obj("b", "y", &[], Some("u")));
        index.insert(obj("", "cluster", &[], Some("u")));
        assert_eq!(
            names(index.candidates(&wanted(Some("a"), Some("u"), None))),
            ["x"]
        );
        assert_eq!(
            names(index.candidates(&wanted(None, Some("u"), None))),
            ["cluster", "x", "y"]
        );
        // Labels not indexed: a selector reads the namespace.
        let one = selector(&[("app", "one")]);
        assert_eq!(
            index.candidates(&wanted(Some("b"), None, Some(&one))).len(),
            1
        );
        index.retain_namespaces(|ns| ns != Some("a"));
        assert_eq!(index.len(), 2);
        assert_eq!(
            names(index.candidates(&wanted(None, Some("u"), None))),
            ["cluster", "y"]
        );
        assert!(index.get(Some("a"), "x").is_none());
    }
}
