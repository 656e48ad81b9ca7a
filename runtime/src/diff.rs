//! Field-level differences between two JSON documents (a live object and what applying would
//! make of it, or a recorded decision and a candidate's), as `path: old → new` lines.

use serde_json::Value;
use std::fmt;

/// Metadata the API server maintains; a change there is not a change anyone asked for.
pub const IGNORED_METADATA: [&str; 6] = [
    "managedFields",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
];

/// One changed leaf.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Added {
        path: String,
        value: Value,
    },
    Removed {
        path: String,
        value: Value,
    },
    Changed {
        path: String,
        old: Value,
        new: Value,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Added { path, value } => write!(f, "+ {path}: {value}"),
            Change::Removed { path, value } => write!(f, "- {path}: {value}"),
            Change::Changed { path, old, new } => write!(f, "~ {path}: {old} → {new}"),
        }
    }
}

impl Change {
    /// The changed field, e.g. `spec.ports[0].port`.
    pub fn path(&self) -> &str {
        match self {
            Change::Added { path, .. }
            | Change::Removed { path, .. }
            | Change::Changed { path, .. } => path,
        }
    }
}

/// The object without the fields in [`IGNORED_METADATA`].
pub fn without_bookkeeping(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in IGNORED_METADATA {
            meta.remove(k);
        }
    }
    o
}

/// Leaf-level changes from `old` to `new`, in path order (object keys sorted, array indexes
/// ascending). `Value::Null` on one side means the document is absent.
pub fn diff(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk("", old, new, &mut out);
    out
}

fn walk(path: &str, old: &Value, new: &Value, out: &mut Vec<Change>) {
    match (old, new) {
        (a, b) if a == b => {}
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = join_key(path, k);
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => walk(&p, x, y, out),
                    (Some(x), None) => leaves(&p, x, out, false),
                    (None, Some(y)) => leaves(&p, y, out, true),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let p = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => walk(&p, x, y, out),
                    (Some(x), None) => leaves(&p, x, out, false),
                    (None, Some(y)) => leaves(&p, y, out, true),
                    (None, None) => {}
                }
            }
        }
        (Value::Null, b) => leaves(path, b, out, true),
        (a, Value::Null) => leaves(path, a, out, false),
        (a, b) => out.push(Change::Changed {
            path: display_path(path),
            old: a.clone(),
            new: b.clone(),
        }),
    }
}

/// Every leaf of `v` as added (or removed); empty objects and arrays are leaves.
fn leaves(path: &str, v: &Value, out: &mut Vec<Change>, added: bool) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                leaves(&join_key(path, k), &m[k], out, added);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                leaves(&format!("{path}[{i}]"), x, out, added);
            }
        }
        _ => {
            let path = display_path(path);
            out.push(if added {
                Change::Added {
                    path,
                    value: v.clone(),
                }
            } else {
                Change::Removed {
                    path,
                    value: v.clone(),
                }
            })
        }
    }
}

/// `a.b`, or `a["x.y/z"]` for keys that are not plain identifiers (label keys, annotations).
fn join_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key:?}]"),
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        ".".into()
    } else {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_are_leaf_paths_in_order() {
        let old = json!({
            "metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web"}, "resourceVersion": "1"},
            "spec": {"selector": {"app": "old"}, "ports": [{"port": 80}]},
        });
        let new = json!({
            "metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}, "resourceVersion": "2"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}, {"port": 443, "name": "tls"}], "type": "ClusterIP"},
        });
        let lines: Vec<String> = diff(&without_bookkeeping(&old), &without_bookkeeping(&new))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "+ metadata.labels.tier: \"front\"",
                "+ spec.ports[1].name: \"tls\"",
                "+ spec.ports[1].port: 443",
                "~ spec.selector.app: \"old\" → \"web\"",
                "+ spec.type: \"ClusterIP\"",
            ]
        );
    }

    #[test]
    fn absent_documents_list_every_leaf() {
        let obj = json!({"a": {"b": 1, "c": []}, "d": "x.y", "e": {"k.io/x": true}});
        let added: Vec<String> = diff(&Value::Null, &obj)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            added,
            [
                "+ a.b: 1",
                "+ a.c: []",
                "+ d: \"x.y\"",
                "+ e[\"k.io/x\"]: true"
            ]
        );
        assert!(diff(&obj, &Value::Null)
            .iter()
            .all(|c| matches!(c, Change::Removed { .. })));
        assert!(diff(&obj, &obj).is_empty());
    }
}
