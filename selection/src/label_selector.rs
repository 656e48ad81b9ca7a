//! Kubernetes label selectors (`matchLabels` + `matchExpressions`), as the host evaluates an
//! input's and the Rust SDK's test harness and workers do: parsed and checked once per use, with
//! the offending field named on error (the Python and JavaScript SDKs mirror these words).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use serde_json::Value;
use std::collections::BTreeMap;

/// A selector that is not one Kubernetes accepts.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SelectorError {
    /// The field, e.g. `spec.deploymentSelector.matchExpressions[0].operator`.
    pub field: String,
    pub problem: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Operator {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// A parsed label selector: every requirement must hold. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<(String, Operator)>,
}

fn error(field: String, problem: impl Into<String>) -> SelectorError {
    SelectorError {
        field,
        problem: problem.into(),
    }
}

/// The most of a selector's key, value or operator an error quotes (a valid key is at most
/// 253 + 63 bytes, a valid value 63).
const SHOWN_BYTES: usize = 320;

/// `text` quoted for an error, cut at [`SHOWN_BYTES`] with its length said: a resource's author
/// controls it, and the error reaches Conditions, Events and log lines.
fn shown(text: &str) -> String {
    match cut(text, SHOWN_BYTES) {
        None => format!("{text:?}"),
        Some(start) => format!("{start:?}… ({} bytes)", text.len()),
    }
}

/// The start of `text` within `max` bytes (on a character boundary), when it is longer.
fn cut(text: &str, max: usize) -> Option<&str> {
    if text.len() <= max {
        return None;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(&text[..end])
}

impl LabelSelector {
    /// From the parts of a selector; `field` names where they are, for errors.
    pub fn from_parts(
        match_labels: &BTreeMap<String, String>,
        match_expressions: &[LabelSelectorRequirement],
        field: &str,
    ) -> Result<Self, SelectorError> {
        let mut requirements = Vec::with_capacity(match_labels.len() + match_expressions.len());
        for (key, value) in match_labels {
            let at = || format!("{field}.matchLabels");
            if let Some(why) = label_key_problem(key) {
                return Err(error(
                    at(),
                    format!("{} is not a valid label key: {why}", shown(key)),
                ));
            }
            if let Some(why) = label_value_problem(value) {
                return Err(error(
                    at(),
                    format!(
                        "{} (key {}) is not a valid label value: {why}",
                        shown(value),
                        shown(key)
                    ),
                ));
            }
            requirements.push((key.clone(), Operator::In(vec![value.clone()])));
        }
        for (i, e) in match_expressions.iter().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            if e.key.is_empty() {
                return Err(error(format!("{at}.key"), "must not be empty"));
            }
            if let Some(why) = label_key_problem(&e.key) {
                return Err(error(
                    format!("{at}.key"),
                    format!("{} is not a valid label key: {why}", shown(&e.key)),
                ));
            }
            let values = e.values.clone().unwrap_or_default();
            for (j, value) in values.iter().enumerate() {
                if let Some(why) = label_value_problem(value) {
                    return Err(error(
                        format!("{at}.values[{j}]"),
                        format!("{} is not a valid label value: {why}", shown(value)),
                    ));
                }
            }
            let op = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(error(
                        format!("{at}.values"),
                        format!("must not be empty for operator {}", e.operator),
                    ))
                }
                "In" => Operator::In(values),
                "NotIn" => Operator::NotIn(values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(error(
                        format!("{at}.values"),
                        format!("must be empty for operator {}", e.operator),
                    ))
                }
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(error(
                        format!("{at}.operator"),
                        format!("{} is not In, NotIn, Exists or DoesNotExist", shown(other)),
                    ))
                }
            };
            requirements.push((e.key.clone(), op));
        }
        Ok(LabelSelector { requirements })
    }

    /// From a selector as JSON (`{matchLabels, matchExpressions}`) found at `field`.
    pub fn from_json(value: &Value, field: &str) -> Result<Self, SelectorError> {
        if !value.is_object() {
            return Err(error(
                field.to_string(),
                "is not a label selector (an object with matchLabels and/or matchExpressions)",
            ));
        }
        let match_labels: BTreeMap<String, String> = optional(value, "matchLabels", field)?;
        let match_expressions: Vec<LabelSelectorRequirement> =
            optional(value, "matchExpressions", field)?;
        Self::from_parts(&match_labels, &match_expressions, field)
    }

    /// The selector as the API server's `labelSelector` parameter takes it
    /// (`app=web,tier in (a,b),!legacy`); the empty selector is `""`. Keys and values were
    /// checked as Kubernetes checks them, so nothing needs quoting.
    pub fn to_query(&self) -> String {
        self.requirements
            .iter()
            .map(|(key, op)| match op {
                Operator::In(values) if values.len() == 1 => format!("{key}={}", values[0]),
                Operator::In(values) => format!("{key} in ({})", values.join(",")),
                Operator::NotIn(values) => format!("{key} notin ({})", values.join(",")),
                Operator::Exists => key.clone(),
                Operator::DoesNotExist => format!("!{key}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Both selectors' requirements.
    pub fn and(mut self, other: LabelSelector) -> Self {
        self.requirements.extend(other.requirements);
        self
    }

    /// A label every object this selector matches carries, and the values it may have there
    /// (an `In` requirement, or a `matchLabels` entry), the one with the fewest values; `None`
    /// when the selector requires no label value (only NotIn, Exists, DoesNotExist, or empty).
    /// An index of selectors by label finds every selector an object may match through it.
    pub fn required_values(&self) -> Option<(&str, &[String])> {
        self.required().min_by_key(|(_, values)| values.len())
    }

    /// Every label this selector requires a value of, with the values it may have there (its
    /// `In` requirements and `matchLabels` entries): an index of objects by label finds every
    /// object the selector may match through any one of them.
    pub fn required(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.requirements.iter().filter_map(|(key, op)| match op {
            Operator::In(values) => Some((key.as_str(), values.as_slice())),
            _ => None,
        })
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.requirements.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key));
            match op {
                Operator::In(values) => value.is_some_and(|v| values.contains(v)),
                Operator::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
                Operator::Exists => value.is_some(),
                Operator::DoesNotExist => value.is_none(),
            }
        })
    }
}

/// Why `key` cannot be a label key (Kubernetes' qualified name: an optional DNS subdomain
/// prefix and `/`, then a name), if it cannot.
fn label_key_problem(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((_, name)) if name.contains('/') => return Some(
            "at most one '/', between a DNS subdomain prefix and the name (e.g. example.com/name)",
        ),
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("the prefix before '/' must not be empty");
        }
        if !is_dns_subdomain(prefix) {
            return Some(
                "the prefix before '/' must be a lowercase DNS subdomain (e.g. example.com)",
            );
        }
        if prefix.len() > 253 {
            return Some("the prefix before '/' must be no more than 253 characters");
        }
    }
    if name.is_empty() {
        return Some("the name must not be empty");
    }
    name_problem(name).map(|why| match why {
        NameProblem::Characters => "the name must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character",
        NameProblem::Length => "the name must be no more than 63 characters",
    })
}

/// Why `value` cannot be a label value (empty, or a name of at most 63 characters), if it cannot.
fn label_value_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        return None;
    }
    name_problem(value).map(|why| match why {
        NameProblem::Characters => "it must be empty or consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character",
        NameProblem::Length => "it must be no more than 63 characters",
    })
}

enum NameProblem {
    Characters,
    Length,
}

/// A non-empty label name or value: `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63
/// characters (characters checked first, so the length is of ASCII text in every SDK).
fn name_problem(text: &str) -> Option<NameProblem> {
    let bytes = text.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if !(inner_ok && ends_ok) {
        Some(NameProblem::Characters)
    } else if bytes.len() > 63 {
        Some(NameProblem::Length)
    } else {
        None
    }
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        let b = label.as_bytes();
        b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b.first().is_some_and(|c| *c != b'-')
            && b.last().is_some_and(|c| *c != b'-')
    })
}

/// The selector part `key` of `value` (absent: empty), or the field where it is malformed.
fn optional<T: serde::de::DeserializeOwned + Default>(
    value: &Value,
    key: &str,
    field: &str,
) -> Result<T, SelectorError> {
    match value.get(key).filter(|v| !v.is_null()) {
        None => Ok(T::default()),
        Some(part) => serde_json::from_value(part.clone()).map_err(|e| {
            // serde quotes the value it refused, which may be any size.
            let text = e.to_string();
            let problem = match cut(&text, 2 * SHOWN_BYTES) {
                None => text.clone(),
                Some(start) => format!("{start}… ({} bytes)", text.len()),
            };
            error(format!("{field}.{key}"), problem)
        }),
    }
}

/// The value at a dotted field path (`spec.deploymentSelector`) of a resource's JSON; `null`
/// counts as absent. How an input's `selectorFrom` finds the selector.
pub fn field_at<'a>(resource: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(resource, |v, key| v.get(key))
        .filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn requirements_match_as_kubernetes_does() {
        let s = LabelSelector::from_json(
            &json!({
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "track", "operator": "NotIn", "values": ["canary"]},
                    {"key": "tier", "operator": "In", "values": ["front", "back"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                    {"key": "team", "operator": "Exists"},
                ],
            }),
            "spec.selector",
        )
        .unwrap();
        let base = [("app", "web"), ("tier", "front"), ("team", "a")];
        assert!(s.matches(Some(&labels(&base))));
        assert!(s.matches(Some(&labels(&[
            base[0],
            base[1],
            base[2],
            ("track", "stable")
        ]))));
        assert!(!s.matches(Some(&labels(&[
            base[0],
            base[1],
            base[2],
            ("track", "canary")
        ]))));
        assert!(!s.matches(Some(&labels(&[base[0], base[1], base[2], ("legacy", "")]))));
        assert!(!s.matches(Some(&labels(&[base[0], base[1]]))));
        assert!(!s.matches(Some(&labels(&[
            ("app", "web"),
            ("tier", "db"),
            ("team", "a")
        ]))));
        assert!(!s.matches(None));
        assert!(LabelSelector::from_json(&json!({}), "s")
            .unwrap()
            .matches(None));
    }

    #[test]
    fn invalid_selectors_name_the_field() {
        let e = |v: Value| LabelSelector::from_json(&v, "spec.deploymentSelector").unwrap_err();
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "t", "operator": "Equals", "values": ["x"]}]}))
                .to_string(),
            r#"spec.deploymentSelector.matchExpressions[0].operator: "Equals" is not In, NotIn, Exists or DoesNotExist"#
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "t", "operator": "In"}]})).field,
            "spec.deploymentSelector.matchExpressions[0].values"
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["x"]}]}))
                .field,
            "spec.deploymentSelector.matchExpressions[0].values"
        );
        assert_eq!(
            e(json!({"matchLabels": {"a": 1}})).field,
            "spec.deploymentSelector.matchLabels"
        );
        assert_eq!(e(json!("app=web")).field, "spec.deploymentSelector");
        // What a resource's author wrote is quoted within bounds, whatever its size.
        let huge = "é".repeat(50_000);
        for selector in [
            json!({"matchLabels": {huge.clone(): "x"}}),
            json!({"matchLabels": {"app": huge.clone()}}),
            json!({"matchLabels": huge.clone()}),
            json!({"matchExpressions": [{"key": "a", "operator": huge.clone()}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": [huge.clone()]}]}),
        ] {
            let text = e(selector).to_string();
            assert!(text.len() < 1024, "{} bytes: {}", text.len(), &text[..200]);
            assert!(
                text.contains("… (100000 bytes)") || text.contains("bytes)"),
                "{text}"
            );
        }
    }

    #[test]
    fn field_paths_walk_the_resource() {
        let r = json!({"spec": {"deploymentSelector": {"matchLabels": {"a": "b"}}, "n": null}});
        assert!(field_at(&r, "spec.deploymentSelector").is_some());
        assert!(field_at(&r, "spec.missing").is_none());
        assert!(field_at(&r, "spec.n").is_none());
    }

    #[test]
    fn a_selector_reads_back_as_the_api_servers_query() {
        let selector = LabelSelector::from_json(
            &serde_json::json!({
                "matchLabels": {"version": "v1"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]},
                    {"key": "zone", "operator": "NotIn", "values": ["x"]},
                    {"key": "owner", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            }),
            "spec.resourceSelector",
        )
        .expect("a selector");
        assert_eq!(
            selector.to_query(),
            "version=v1,tier in (a,b),zone notin (x),owner,!legacy"
        );
        assert_eq!(LabelSelector::default().to_query(), "");
    }
}
