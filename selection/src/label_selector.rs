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

impl LabelSelector {
    /// From the parts of a selector; `field` names where they are, for errors.
    pub fn from_parts(
        match_labels: &BTreeMap<String, String>,
        match_expressions: &[LabelSelectorRequirement],
        field: &str,
    ) -> Result<Self, SelectorError> {
        let mut requirements: Vec<(String, Operator)> = match_labels
            .iter()
            .map(|(k, v)| (k.clone(), Operator::In(vec![v.clone()])))
            .collect();
        for (i, e) in match_expressions.iter().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            if e.key.is_empty() {
                return Err(error(format!("{at}.key"), "must not be empty"));
            }
            let values = e.values.clone().unwrap_or_default();
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
                        format!("{other:?} is not In, NotIn, Exists or DoesNotExist"),
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

    /// Both selectors' requirements.
    pub fn and(mut self, other: LabelSelector) -> Self {
        self.requirements.extend(other.requirements);
        self
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

/// The selector part `key` of `value` (absent: empty), or the field where it is malformed.
fn optional<T: serde::de::DeserializeOwned + Default>(
    value: &Value,
    key: &str,
    field: &str,
) -> Result<T, SelectorError> {
    match value.get(key).filter(|v| !v.is_null()) {
        None => Ok(T::default()),
        Some(part) => serde_json::from_value(part.clone())
            .map_err(|e| error(format!("{field}.{key}"), e.to_string())),
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
    }

    #[test]
    fn field_paths_walk_the_resource() {
        let r = json!({"spec": {"deploymentSelector": {"matchLabels": {"a": "b"}}, "n": null}});
        assert!(field_at(&r, "spec.deploymentSelector").is_some());
        assert!(field_at(&r, "spec.missing").is_none());
        assert!(field_at(&r, "spec.n").is_none());
    }
}
