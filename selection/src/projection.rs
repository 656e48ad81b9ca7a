//! An input's field projection: the dotted field paths a worker reads (`spec.selector`,
//! `spec.template.spec.containers.ports`); every object is cut down to those before it is cached
//! and sent, which bounds both the host's memory per object and the bytes a call copies.
//!
//! Rules, the same in the host and the SDK's test harness:
//! - `apiVersion`, `kind`, `metadata.name` and `metadata.namespace` are always kept ([`ALWAYS_KEPT`]);
//! - a path keeps the whole value it ends at (`metadata.labels` keeps every label);
//! - a path through a list applies to each element (`spec.template.spec.containers.ports`
//!   keeps each container's `ports`; a container without ports stays as `{}`, so positions hold);
//! - a field the object does not have is left out (no `null` is invented), and so is an object
//!   none of whose listed fields exist;
//! - overlapping paths merge (`spec` and `spec.replicas` keep all of `spec`).

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// Kept whatever the projection lists: what names the object.
pub const ALWAYS_KEPT: &[&str] = &["apiVersion", "kind", "metadata.name", "metadata.namespace"];

/// Paths one projection may list, and segments one path may have: a definition is bounded.
pub const MAX_PATHS: usize = 64;
pub const MAX_SEGMENTS: usize = 16;
/// Bytes of one path.
pub const MAX_PATH_BYTES: usize = 256;

/// A path that cannot be a field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fields[{index}] {path:?}: {problem}")]
pub struct ProjectionError {
    /// Its position in the list of paths.
    pub index: usize,
    /// The path as written, cut to [`MAX_PATH_BYTES`].
    pub path: String,
    pub problem: String,
}

/// What to keep of a value: all of it, or some of its fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Keep {
    Whole,
    Fields(BTreeMap<String, Keep>),
}

/// The fields of an object a worker reads, validated once, applied to every object of the input.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Projection {
    root: Keep,
    /// The paths as listed (deduplicated, sorted), without [`ALWAYS_KEPT`].
    listed: Vec<String>,
}

impl Projection {
    /// The projection keeping `paths` (and [`ALWAYS_KEPT`]).
    ///
    /// # Errors
    /// An empty list, more than [`MAX_PATHS`] paths, or a path that is empty, has an empty
    /// segment (`spec..x`), more than [`MAX_SEGMENTS`] segments, more than [`MAX_PATH_BYTES`]
    /// bytes, whitespace, or a selector character (`[`, `]`, `*`).
    pub fn new<S: AsRef<str>>(paths: &[S]) -> Result<Self, ProjectionError> {
        let fail = |index: usize, path: &str, problem: String| ProjectionError {
            index,
            path: cut(path, MAX_PATH_BYTES).to_owned(),
            problem,
        };
        if paths.is_empty() {
            return Err(fail(
                0,
                "",
                "no field paths: leave `fields` out to send whole objects".into(),
            ));
        }
        if paths.len() > MAX_PATHS {
            return Err(fail(
                MAX_PATHS,
                paths[MAX_PATHS].as_ref(),
                format!("more than {MAX_PATHS} field paths"),
            ));
        }
        let mut root = Keep::Fields(BTreeMap::new());
        for path in ALWAYS_KEPT {
            insert(&mut root, path.split('.'));
        }
        let mut listed = Vec::with_capacity(paths.len());
        for (index, path) in paths.iter().enumerate() {
            let path = path.as_ref();
            if let Some(problem) = path_problem(path) {
                return Err(fail(index, path, problem));
            }
            insert(&mut root, path.split('.'));
            listed.push(path.to_owned());
        }
        listed.sort();
        listed.dedup();
        Ok(Projection { root, listed })
    }

    /// The paths listed (sorted, without duplicates), as written in the definition.
    pub fn paths(&self) -> &[String] {
        &self.listed
    }

    /// `object` cut down to the projection's fields (an object with none of them: `{}`).
    pub fn apply(&self, object: &Value) -> Value {
        keep(object, &self.root).unwrap_or_else(|| Value::Object(Map::new()))
    }
}

impl fmt::Display for Projection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.listed.join(", "))
    }
}

fn path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("is empty".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Some(format!("is longer than {MAX_PATH_BYTES} bytes"));
    }
    if let Some(c) = path
        .chars()
        .find(|c| c.is_whitespace() || matches!(c, '[' | ']' | '*'))
    {
        return Some(format!(
            "has {c:?}: a field path is dotted field names (a path through a list applies to each element)"
        ));
    }
    let segments = path.split('.').count();
    if path.split('.').any(str::is_empty) {
        return Some("has an empty segment".into());
    }
    if segments > MAX_SEGMENTS {
        return Some(format!("has more than {MAX_SEGMENTS} segments"));
    }
    None
}

fn insert<'a>(root: &mut Keep, segments: impl Iterator<Item = &'a str>) {
    let segments: Vec<&str> = segments.collect();
    let mut node = root;
    for segment in segments {
        let Keep::Fields(fields) = node else {
            return; // a shorter path keeps all of it already
        };
        node = fields
            .entry(segment.to_owned())
            .or_insert_with(|| Keep::Fields(BTreeMap::new()));
    }
    *node = Keep::Whole;
}

/// What `what` keeps of `value`; `None`: nothing of it.
fn keep(value: &Value, what: &Keep) -> Option<Value> {
    let Keep::Fields(fields) = what else {
        return Some(value.clone());
    };
    match value {
        Value::Object(object) => {
            let kept: Map<String, Value> = fields
                .iter()
                .filter_map(|(name, what)| Some((name.clone(), keep(object.get(name)?, what)?)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(elements) => Some(Value::Array(
            elements
                .iter()
                .filter(|e| e.is_object())
                .map(|e| keep(e, what).unwrap_or_else(|| Value::Object(Map::new())))
                .collect(),
        )),
        _ => None,
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                         "labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"pod": "web"}},
                "template": {
                    "metadata": {"labels": {"pod": "web"}},
                    "spec": {"containers": [
                        {"name": "app", "image": "web:1", "ports": [{"containerPort": 8080}]},
                        {"name": "sidecar", "image": "proxy:2"},
                    ]},
                },
            },
            "status": {"readyReplicas": 3},
        })
    }

    #[test]
    fn keeps_the_listed_fields_and_the_name_only() {
        let p = Projection::new(&[
            "spec.selector",
            "spec.template.spec.containers.name",
            "spec.template.spec.containers.ports",
        ])
        .unwrap();
        assert_eq!(
            p.apply(&deployment()),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {
                    "selector": {"matchLabels": {"pod": "web"}},
                    "template": {"spec": {"containers": [
                        {"name": "app", "ports": [{"containerPort": 8080}]},
                        {"name": "sidecar"},
                    ]}},
                },
            })
        );
    }

    #[test]
    fn missing_fields_are_left_out_and_list_positions_hold() {
        let p =
            Projection::new(&["status.conditions", "spec.template.spec.containers.ports"]).unwrap();
        let projected = p.apply(&deployment());
        assert!(
            projected.get("status").is_none(),
            "no invented status: {projected}"
        );
        assert_eq!(
            projected["spec"]["template"]["spec"]["containers"],
            json!([{"ports": [{"containerPort": 8080}]}, {}])
        );
        assert_eq!(p.apply(&json!("not an object")), json!({}));
    }

    #[test]
    fn overlapping_paths_keep_the_wider_one() {
        let narrow_first = Projection::new(&["spec.replicas", "spec"]).unwrap();
        let wide_first = Projection::new(&["spec", "spec.replicas"]).unwrap();
        assert_eq!(
            narrow_first.apply(&deployment())["spec"],
            deployment()["spec"]
        );
        assert_eq!(
            narrow_first.apply(&deployment()),
            wide_first.apply(&deployment())
        );
        let labels = Projection::new(&["metadata.labels"])
            .unwrap()
            .apply(&deployment());
        assert_eq!(
            labels["metadata"],
            json!({"name": "web", "namespace": "shop", "labels": {"app": "web"}})
        );
    }

    #[test]
    fn equal_lists_are_equal_projections() {
        let a = Projection::new(&["spec.b", "spec.a", "spec.a"]).unwrap();
        let b = Projection::new(&["spec.a", "spec.b"]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.paths(), ["spec.a", "spec.b"]);
        assert_eq!(a.to_string(), "spec.a, spec.b");
    }

    #[test]
    fn malformed_paths_are_refused_with_their_position() {
        for (paths, problem) in [
            (vec!["spec.ok", ""], "is empty"),
            (vec!["spec..x"], "empty segment"),
            (vec![".spec"], "empty segment"),
            (vec!["spec.containers[0]"], "'['"),
            (vec!["spec.*"], "'*'"),
            (vec!["spec. x"], "' '"),
        ] {
            let err = Projection::new(&paths).unwrap_err();
            assert_eq!(err.index, paths.len() - 1, "{paths:?}");
            assert!(err.problem.contains(problem), "{paths:?}: {err}");
        }
        assert!(Projection::new::<&str>(&[]).is_err());
        let long = "a.".repeat(20) + "b";
        assert!(Projection::new(&[long.as_str()])
            .unwrap_err()
            .problem
            .contains("segments"));
        let huge = "é".repeat(400);
        let err = Projection::new(&[huge.as_str()]).unwrap_err();
        assert!(
            err.path.len() <= MAX_PATH_BYTES,
            "the error quotes a bounded path"
        );
        let many: Vec<String> = (0..=MAX_PATHS).map(|i| format!("spec.f{i}")).collect();
        assert!(Projection::new(&many)
            .unwrap_err()
            .problem
            .contains("more than"));
    }
}
