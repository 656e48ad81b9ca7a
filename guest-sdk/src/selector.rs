//! Kubernetes label-selector matching (`matchLabels` AND `matchExpressions`), as
//! `metav1.LabelSelectorAsSelector` does it, for workers that select among their inputs
//! themselves (the host already selects by an input's `matchLabels`, `matchExpressions` and
//! `selectorFrom`): validated once, then matched many times.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a `LabelSelector` cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorError {
    /// An operator other than `In`, `NotIn`, `Exists`, `DoesNotExist`.
    UnknownOperator { key: String, operator: String },
    /// `In`/`NotIn` with no values.
    ValuesRequired { key: String, operator: String },
    /// `Exists`/`DoesNotExist` with values.
    ValuesForbidden { key: String, operator: String },
    /// Not a `LabelSelector` at all (serde's reason).
    Malformed(String),
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownOperator { key, operator } => write!(
                f,
                "matchExpressions key {key:?}: unknown operator {operator:?} (expected In, NotIn, Exists or DoesNotExist)"
            ),
            Self::ValuesRequired { key, operator } => write!(
                f,
                "matchExpressions key {key:?}: operator {operator} needs at least one value"
            ),
            Self::ValuesForbidden { key, operator } => write!(
                f,
                "matchExpressions key {key:?}: operator {operator} takes no values"
            ),
            Self::Malformed(reason) => write!(f, "not a label selector: {reason}"),
        }
    }
}

impl std::error::Error for SelectorError {}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Self::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Self::Exists(key) => labels.contains_key(key),
            Self::DoesNotExist(key) => !labels.contains_key(key),
        }
    }
}

/// A validated label selector. An empty selector matches everything.
///
/// ```
/// use wasmpilot_guest::selector::Selector;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
///
/// let selector = Selector::new(&LabelSelector {
///     match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
///     ..Default::default()
/// })?;
/// assert!(selector.matches(&[("app".to_owned(), "web".to_owned())].into()));
/// # Ok::<(), wasmpilot_guest::selector::SelectorError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Validates `selector`.
    ///
    /// # Errors
    /// An unknown operator, `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with values.
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
            .collect();
        for expr in selector.match_expressions.iter().flatten() {
            let key = expr.key.clone();
            let values = expr.values.clone().unwrap_or_default();
            let error = |make: fn(String, String) -> SelectorError| {
                Err(make(expr.key.clone(), expr.operator.clone()))
            };
            let requirement = match (expr.operator.as_str(), values.is_empty()) {
                ("In", false) => Requirement::In(key, values),
                ("NotIn", false) => Requirement::NotIn(key, values),
                ("Exists", true) => Requirement::Exists(key),
                ("DoesNotExist", true) => Requirement::DoesNotExist(key),
                ("In" | "NotIn", true) => {
                    return error(|key, operator| SelectorError::ValuesRequired { key, operator })
                }
                ("Exists" | "DoesNotExist", false) => {
                    return error(|key, operator| SelectorError::ValuesForbidden { key, operator })
                }
                _ => {
                    return error(|key, operator| SelectorError::UnknownOperator { key, operator })
                }
            };
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// Validates the selector of `object` (a `LabelSelector` as JSON, e.g. a resource's
    /// `spec.deploymentSelector`).
    ///
    /// # Errors
    /// As [`Selector::new`]; a value that is not a `LabelSelector` is
    /// [`SelectorError::Malformed`].
    pub fn from_json(object: &serde_json::Value) -> Result<Self, SelectorError> {
        let selector: LabelSelector = serde_json::from_value(object.clone())
            .map_err(|err| SelectorError::Malformed(err.to_string()))?;
        Self::new(&selector)
    }

    /// Whether the labels of a Kubernetes object (its `metadata.labels`; none: no labels)
    /// satisfy every requirement.
    pub fn selects(
        &self,
        metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> bool {
        let none = BTreeMap::new();
        self.matches(metadata.labels.as_ref().unwrap_or(&none))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn selector(match_labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> Selector {
        Selector::new(&LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        })
        .unwrap()
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = selector(&[], vec![]);
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_must_all_match() {
        let s = selector(&[("app", "web"), ("tier", "front")], vec![]);
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "back")])));
    }

    #[test]
    fn expressions() {
        let s = selector(&[], vec![expr("env", "In", &["prod", "staging"])]);
        assert!(s.matches(&labels(&[("env", "prod")])));
        assert!(!s.matches(&labels(&[("env", "dev")])));
        assert!(!s.matches(&labels(&[])));

        let s = selector(&[], vec![expr("env", "NotIn", &["dev"])]);
        assert!(s.matches(&labels(&[("env", "prod")])));
        assert!(s.matches(&labels(&[])), "NotIn matches a missing key");
        assert!(!s.matches(&labels(&[("env", "dev")])));

        let s = selector(&[], vec![expr("canary", "Exists", &[])]);
        assert!(s.matches(&labels(&[("canary", "")])));
        assert!(!s.matches(&labels(&[])));

        let s = selector(&[], vec![expr("canary", "DoesNotExist", &[])]);
        assert!(s.matches(&labels(&[])));
        assert!(!s.matches(&labels(&[("canary", "true")])));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = selector(&[("app", "web")], vec![expr("env", "In", &["prod"])]);
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "dev")])));
        assert!(!s.matches(&labels(&[("app", "api"), ("env", "prod")])));
    }

    #[test]
    fn invalid_selectors() {
        let new = |e| {
            Selector::new(&LabelSelector {
                match_expressions: Some(vec![e]),
                ..Default::default()
            })
        };
        let err = new(expr("env", "Equals", &["x"])).unwrap_err();
        assert_eq!(
            err,
            SelectorError::UnknownOperator {
                key: "env".into(),
                operator: "Equals".into()
            }
        );
        assert!(
            err.to_string().contains("unknown operator \"Equals\""),
            "{err}"
        );
        assert!(matches!(
            new(expr("env", "In", &[])),
            Err(SelectorError::ValuesRequired { .. })
        ));
        assert!(matches!(
            new(expr("env", "Exists", &["x"])),
            Err(SelectorError::ValuesForbidden { .. })
        ));
        // Operators are case-sensitive, as in Kubernetes.
        assert!(matches!(
            new(expr("env", "in", &["x"])),
            Err(SelectorError::UnknownOperator { .. })
        ));
    }

    #[test]
    fn from_json_reads_a_resources_selector() {
        let s = Selector::from_json(&serde_json::json!({
            "matchLabels": { "app": "web" },
            "matchExpressions": [{ "key": "tier", "operator": "NotIn", "values": ["db"] }],
        }))
        .unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        let err =
            Selector::from_json(&serde_json::json!({ "matchLabels": "app=web" })).unwrap_err();
        assert!(
            err.to_string().starts_with("not a label selector: "),
            "{err}"
        );
    }
}
