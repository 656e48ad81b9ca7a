//! What server-side apply cannot converge in an output the resource controls: entries that other
//! field managers own in lists the worker sets (a hand-edited list-map key, e.g. a Service port).
//! Forced apply takes over fields, never another manager's list entries, so they stay next to the
//! worker's (or make the object invalid); the host replaces those lists with the worker's.

use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// A list in the live object that holds entries of other field managers the worker did not return.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignList {
    /// JSON pointer of the list in the live object, e.g. `/spec/ports`.
    pub pointer: String,
    /// The list as the worker returned it.
    pub desired: Value,
    /// The field managers owning entries the worker did not return.
    pub managers: BTreeSet<String>,
}

impl ForeignList {
    /// `spec.ports`: the list's path for messages.
    pub fn path(&self) -> String {
        self.pointer
            .trim_start_matches('/')
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// The lists of `live` (an object as the API server returns it, with managedFields) in which a
/// field manager other than `ours` owns entries that `desired` (the worker's object) lacks.
/// Only the object's own fields count (the status subresource is the host's and others' own).
pub fn foreign_lists(live: &Value, desired: &Value, ours: &str) -> Vec<ForeignList> {
    let mut found: Vec<ForeignList> = Vec::new();
    let entries = live["metadata"]["managedFields"].as_array();
    for entry in entries.into_iter().flatten() {
        let manager = entry["manager"].as_str().unwrap_or("(unnamed)");
        let subresource = entry["subresource"].as_str().unwrap_or("");
        if manager == ours || !subresource.is_empty() {
            continue;
        }
        let Some(fields) = entry["fieldsV1"].as_object() else {
            continue;
        };
        let mut lists = Vec::new();
        walk(fields, desired, live, String::new(), &mut lists);
        for (pointer, list) in lists {
            match found.iter_mut().find(|f| f.pointer == pointer) {
                Some(f) => {
                    f.managers.insert(manager.to_string());
                }
                None => found.push(ForeignList {
                    pointer,
                    desired: list,
                    managers: BTreeSet::from([manager.to_string()]),
                }),
            }
        }
    }
    // A list inside another list being replaced is replaced with it.
    let outer: Vec<String> = found.iter().map(|f| f.pointer.clone()).collect();
    found.retain(|f| {
        !outer
            .iter()
            .any(|o| o != &f.pointer && f.pointer.starts_with(&format!("{o}/")))
    });
    found
}

/// Walks one manager's field set alongside the worker's object and the live object; records
/// (pointer, desired list) for lists where the manager owns an entry the worker does not return.
fn walk(
    fields: &Map<String, Value>,
    desired: &Value,
    live: &Value,
    pointer: String,
    out: &mut Vec<(String, Value)>,
) {
    for (key, sub) in fields {
        let sub = sub.as_object();
        if let Some(name) = key.strip_prefix("f:") {
            // A field the worker does not set is the other manager's to keep.
            let (Some(d), Some(l)) = (desired.get(name), live.get(name)) else {
                continue;
            };
            if let Some(sub) = sub {
                walk(sub, d, l, format!("{pointer}/{}", escape(name)), out);
            }
        } else if let Some(key_json) = key.strip_prefix("k:") {
            let (Some(d_list), Some(l_list)) = (desired.as_array(), live.as_array()) else {
                continue;
            };
            let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(key_json) else {
                continue;
            };
            match d_list.iter().find(|d| key_matches(d, &keys)) {
                Some(d) => {
                    let index = l_list.iter().position(|l| key_matches(l, &keys));
                    if let (Some(i), Some(sub)) = (index, sub) {
                        walk(sub, d, &l_list[i], format!("{pointer}/{i}"), out);
                    }
                }
                None => record(out, &pointer, desired),
            }
        } else if let Some(value_json) = key.strip_prefix("v:") {
            let Some(d_list) = desired.as_array() else {
                continue;
            };
            let Ok(value) = serde_json::from_str::<Value>(value_json) else {
                continue;
            };
            if !d_list.contains(&value) {
                record(out, &pointer, desired);
            }
        }
    }
}

fn record(out: &mut Vec<(String, Value)>, pointer: &str, desired: &Value) {
    if !out.iter().any(|(p, _)| p == pointer) {
        out.push((pointer.to_string(), desired.clone()));
    }
}

/// An entry matches a list-map key when every key field it sets has the key's value; a key
/// field it leaves out (defaulted by the API server, e.g. a port's protocol) matches any value.
fn key_matches(entry: &Value, keys: &Map<String, Value>) -> bool {
    keys.iter().all(|(k, v)| match entry.get(k) {
        Some(e) => e == v,
        None => true,
    })
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that replaces each list with the worker's, only if the object is still at
/// `resource_version` (the API server answers 409/422 otherwise).
pub fn replacement_patch(resource_version: &str, lists: &[ForeignList]) -> Value {
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})];
    for list in lists {
        ops.push(json!({"op": "replace", "path": list.pointer, "value": list.desired}));
    }
    Value::Array(ops)
}

/// `object` with each list replaced by the worker's: what the replacement makes of it (before
/// the API server's defaults), for `wasmpilot plan`.
pub fn with_lists_replaced(object: &Value, lists: &[ForeignList]) -> Value {
    let mut replaced = object.clone();
    for list in lists {
        if let Some(slot) = replaced.pointer_mut(&list.pointer) {
            *slot = list.desired.clone();
        }
    }
    replaced
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Service after `kubectl patch … replace /spec/ports/0/port 9999`: the edit's manager owns
    /// the 9999 entry, the host's manager no port entry at all.
    fn hand_edited_service() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "42", "managedFields": [
                {"manager": "wasmpilot-autoroute", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:selector": {}, "f:ports": {}}}},
                {"manager": "kubectl-patch", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:ports": {"k:{\"port\":9999,\"protocol\":\"TCP\"}": {
                     ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:loadBalancer": {}}}}
            ]},
            "spec": {"ports": [{"name": "http", "port": 9999, "protocol": "TCP", "targetPort": 8080}],
                     "selector": {"app": "web"}, "clusterIP": "10.0.0.7"}
        })
    }

    fn desired_service() -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "selector": {"app": "web"}}})
    }

    #[test]
    fn a_hand_edited_list_key_is_found_with_its_manager() {
        let found = foreign_lists(
            &hand_edited_service(),
            &desired_service(),
            "wasmpilot-autoroute",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pointer, "/spec/ports");
        assert_eq!(found[0].path(), "spec.ports");
        assert_eq!(found[0].desired, desired_service()["spec"]["ports"]);
        assert_eq!(
            found[0].managers.iter().collect::<Vec<_>>(),
            ["kubectl-patch"]
        );
        let patch = replacement_patch("42", &found);
        assert_eq!(patch[0]["op"], "test");
        assert_eq!(patch[0]["value"], "42");
        assert_eq!(patch[1]["path"], "/spec/ports");
    }

    #[test]
    fn entries_the_worker_returns_and_fields_it_does_not_set_are_left_alone() {
        // The other manager owns the worker's own entry (matched by key, protocol defaulted),
        // and a label the worker does not set: forced apply handles the one, the other is theirs.
        let mut live = hand_edited_service();
        live["spec"]["ports"][0]["port"] = json!(8080);
        live["metadata"]["managedFields"][1]["fieldsV1"] = json!({
            "f:metadata": {"f:labels": {"f:team": {}}},
            "f:spec": {"f:ports": {"k:{\"port\":8080,\"protocol\":\"TCP\"}": {"f:targetPort": {}}}}});
        let mut desired = desired_service();
        desired["spec"]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("protocol");
        assert!(foreign_lists(&live, &desired, "wasmpilot-autoroute").is_empty());
    }

    #[test]
    fn nested_lists_and_sets_are_found() {
        // An extra container port added by hand to the worker's container.
        let live = json!({"metadata": {"resourceVersion": "7", "managedFields": [
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"shell\"}": {"f:ports": {
                    "k:{\"containerPort\":9999,\"protocol\":\"TCP\"}": {".": {}}}}}}}}}},
            {"manager": "other", "operation": "Update", "fieldsV1": {"f:spec": {"f:finalizers": {"v:\"x\"": {}}}}}
        ]}, "spec": {"finalizers": ["kubernetes", "x"], "template": {"spec": {"containers": [
            {"name": "sidecar"}, {"name": "shell", "ports": [{"containerPort": 8080}, {"containerPort": 9999}]}]}}}});
        let desired = json!({"spec": {"finalizers": ["kubernetes"], "template": {"spec": {"containers": [
            {"name": "shell", "ports": [{"containerPort": 8080}]}]}}}});
        let found = foreign_lists(&live, &desired, "wasmpilot-x");
        let pointers: Vec<&str> = found.iter().map(|f| f.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            ["/spec/template/spec/containers/1/ports", "/spec/finalizers"]
        );
    }
}
