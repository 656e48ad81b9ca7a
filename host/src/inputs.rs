//! Gathers a phase's declared inputs: objects of each input kind in the resource's namespace,
//! filtered by the input's labels, stripped of bookkeeping (managedFields) and serialized as JSON.

use crate::crd::{InputSpec, KindRef};
use crate::definition::PhaseDefinition;
use crate::sandbox::NamedObjects;
use kube::api::{DynamicObject, TypeMeta};
use std::sync::Arc;

/// Where input objects come from: the watch caches on a cluster, files offline.
pub trait ObjectSource {
    /// Every known object of a kind, in any namespace.
    fn objects(&self, kind: &KindRef) -> Vec<Arc<DynamicObject>>;
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
                .objects(&kind)
                .into_iter()
                .filter(|o| visible(o, input, namespace))
                .collect();
            selected.sort_by(|a, b| {
                (&a.metadata.namespace, &a.metadata.name)
                    .cmp(&(&b.metadata.namespace, &b.metadata.name))
            });
            NamedObjects {
                name: input.name.clone(),
                objects: selected.iter().map(|o| to_worker_json(o, &kind)).collect(),
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

/// Serializes an object the way workers see it: apiVersion and kind set (list items lack them),
/// managedFields removed (they are large and no worker decision should depend on them).
pub fn to_worker_json(o: &DynamicObject, kind: &KindRef) -> String {
    let mut o = o.clone();
    o.metadata.managed_fields = None;
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
            "metadata": {"name": name, "namespace": ns, "managedFields": [{"manager": "kubectl"}]},
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
    }
}
