//! Gathers a phase's declared inputs: objects of each input kind in the resource's namespace,
//! filtered by the input's labels, stripped of bookkeeping (managedFields, kubectl's
//! last-applied annotation) and serialized as JSON.

use crate::crd::{InputSpec, KindRef};
use crate::definition::PhaseDefinition;
use crate::sandbox::NamedObjects;
use kube::api::{DynamicObject, TypeMeta};
use std::sync::Arc;

/// Where input objects come from: the watch caches on a cluster, files offline.
pub trait ObjectSource {
    /// Every known object of a kind, in any namespace.
    fn objects(&self, kind: &KindRef) -> Vec<Arc<DynamicObject>>;

    /// The objects of a kind in `namespace` (`None`: in any); sources with an index override it.
    fn objects_in(&self, kind: &KindRef, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
        let mut all = self.objects(kind);
        if let Some(ns) = namespace {
            all.retain(|o| o.metadata.namespace.as_deref().is_none_or(|o| o == ns));
        }
        all
    }

    /// The object as workers see it (see [`to_worker_json`]); sources may cache this.
    fn worker_json(&self, kind: &KindRef, object: &DynamicObject) -> Arc<str> {
        Arc::from(to_worker_json(object, kind))
    }
}

/// Worker JSON of cached objects, kept per uid and resourceVersion: an object is serialized
/// once per change, not once per reconcile of every resource that reads it.
#[derive(Default)]
pub struct JsonCache {
    entries: std::sync::Mutex<std::collections::HashMap<String, (String, Arc<str>)>>,
    inserts_since_sweep: std::sync::atomic::AtomicUsize,
}

impl JsonCache {
    /// Cached JSON for an object at its current resourceVersion, serializing on a miss.
    pub fn get(&self, kind: &KindRef, object: &DynamicObject) -> Arc<str> {
        let (Some(uid), Some(rv)) = (&object.metadata.uid, &object.metadata.resource_version)
        else {
            return Arc::from(to_worker_json(object, kind));
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((cached_rv, json)) = entries.get(uid) {
            if cached_rv == rv {
                return json.clone();
            }
        }
        let json: Arc<str> = Arc::from(to_worker_json(object, kind));
        entries.insert(uid.clone(), (rv.clone(), json.clone()));
        self.inserts_since_sweep
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        json
    }

    /// Whether enough entries changed since the last sweep to look for deleted objects.
    pub fn needs_sweep(&self) -> bool {
        self.inserts_since_sweep
            .load(std::sync::atomic::Ordering::Relaxed)
            > 1024
    }

    /// Drops entries of objects no longer cached (call with the uids still present).
    pub fn retain(&self, live: &std::collections::HashSet<&str>) {
        self.inserts_since_sweep
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|uid, _| live.contains(uid.as_str()));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The inputs of `phase` for a resource in `namespace` (`None`: a cluster-scoped resource sees all).
pub fn gather(
    phase: &PhaseDefinition,
    namespace: Option<&str>,
    source: &impl ObjectSource,
) -> Vec<NamedObjects> {
    phase
        .inputs
        .iter()
        .map(|input| {
            let kind = KindRef::new(&input.api_version, &input.kind);
            let mut selected: Vec<Arc<DynamicObject>> = source
                .objects_in(&kind, namespace)
                .into_iter()
                .filter(|o| visible(o, input, namespace))
                .collect();
            selected.sort_by(|a, b| {
                (&a.metadata.namespace, &a.metadata.name)
                    .cmp(&(&b.metadata.namespace, &b.metadata.name))
            });
            NamedObjects {
                name: input.name.clone(),
                objects: selected
                    .iter()
                    .map(|o| source.worker_json(&kind, o).to_string())
                    .collect(),
            }
        })
        .collect()
}

fn visible(o: &DynamicObject, input: &InputSpec, namespace: Option<&str>) -> bool {
    if let (Some(ns), Some(ons)) = (namespace, o.metadata.namespace.as_deref()) {
        if ns != ons {
            return false;
        }
    }
    let labels = o.metadata.labels.as_ref();
    input
        .match_labels
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
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
    let mut o = o.clone();
    strip_bookkeeping(&mut o);
    if o.types.is_none() {
        o.types = Some(TypeMeta {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
        });
    }
    // Serializing a DynamicObject (a map of JSON values) cannot fail.
    serde_json::to_string(&o).unwrap_or_else(|_| "{}".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Fixed(Vec<Arc<DynamicObject>>);
    impl ObjectSource for Fixed {
        fn objects(&self, _kind: &KindRef) -> Vec<Arc<DynamicObject>> {
            self.0.clone()
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
    fn json_cache_serializes_once_per_resource_version() {
        let cache = JsonCache::default();
        let kind = KindRef::new("apps/v1", "Deployment");
        let mut o = (*deployment("a", "d", &[])).clone();
        o.metadata.uid = Some("u1".into());
        o.metadata.resource_version = Some("1".into());
        let first = cache.get(&kind, &o);
        assert!(
            Arc::ptr_eq(&first, &cache.get(&kind, &o)),
            "same rv: cached"
        );
        o.metadata.resource_version = Some("2".into());
        o.data["spec"]["replicas"] = serde_json::json!(3);
        let second = cache.get(&kind, &o);
        assert!(
            !Arc::ptr_eq(&first, &second) && second.contains("\"replicas\":3"),
            "new rv: re-serialized"
        );
        cache.retain(&std::collections::HashSet::new());
        assert!(cache.is_empty());
    }

    #[test]
    fn namespace_and_labels_scope_inputs_and_managed_fields_are_stripped() {
        let phase = PhaseDefinition {
            name: "Syncing".into(),
            is_final: false,
            module: None,
            inputs: vec![InputSpec {
                name: "deployments".into(),
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                match_labels: BTreeMap::from([("tier".to_string(), "web".to_string())]),
            }],
            outputs: vec![],
            next: vec![],
            limits: Default::default(),
            queries: vec![],
        };
        let source = Fixed(vec![
            deployment("b", "z", &[("tier", "web")]),
            deployment("a", "other-ns", &[("tier", "web")]),
            deployment("b", "a", &[("tier", "web")]),
            deployment("b", "db", &[("tier", "db")]),
        ]);
        let got = gather(&phase, Some("b"), &source);
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
}
