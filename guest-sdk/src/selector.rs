//! Kubernetes label-selector matching (`matchLabels` AND `matchExpressions`) for workers that
//! select among their inputs themselves: the host's own implementation (`wasmpilot-selection`),
//! so a selector is accepted, refused and matched here exactly as the host does for an input.
//!
//! An input that declares `selectorFrom` (or `matchLabels` / `matchExpressions`) in the
//! WasmOperator is already selected by the host; a worker needs this only to select by itself.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

/// Why a selector cannot be used, naming the field (`spec.deploymentSelector.matchExpressions[0].operator`)
/// in the host's words: an unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist`
/// with values, an empty key, or a value that is not a label selector at all.
pub use wasmpilot_selection::SelectorError;

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
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector(wasmpilot_selection::LabelSelector);

/// The field errors name when the caller does not say where a selector is.
const UNNAMED_FIELD: &str = "selector";

impl Selector {
    /// Validates `selector` (errors name it `selector`).
    ///
    /// # Errors
    /// An unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values,
    /// an empty key.
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        Self::new_at(selector, UNNAMED_FIELD)
    }

    /// Validates `selector`, found at `field` of the resource (e.g. `spec.deploymentSelector`),
    /// which errors name.
    ///
    /// # Errors
    /// As [`Selector::new`].
    pub fn new_at(selector: &LabelSelector, field: &str) -> Result<Self, SelectorError> {
        let no_labels = BTreeMap::new();
        wasmpilot_selection::LabelSelector::from_parts(
            selector.match_labels.as_ref().unwrap_or(&no_labels),
            selector.match_expressions.as_deref().unwrap_or_default(),
            field,
        )
        .map(Self)
    }

    /// Validates a selector as JSON (e.g. a resource's `spec.deploymentSelector`; errors name
    /// it `selector`).
    ///
    /// # Errors
    /// As [`Selector::new`], and a value that is not a `LabelSelector`.
    pub fn from_json(object: &serde_json::Value) -> Result<Self, SelectorError> {
        Self::from_json_at(object, UNNAMED_FIELD)
    }

    /// Validates a selector as JSON found at `field` of the resource, which errors name.
    ///
    /// # Errors
    /// As [`Selector::from_json`].
    pub fn from_json_at(object: &serde_json::Value, field: &str) -> Result<Self, SelectorError> {
        wasmpilot_selection::LabelSelector::from_json(object, field).map(Self)
    }

    /// Whether the labels of a Kubernetes object (its `metadata.labels`; none: no labels)
    /// satisfy every requirement.
    pub fn selects(&self, metadata: &ObjectMeta) -> bool {
        self.0.matches(metadata.labels.as_ref())
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(Some(labels))
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
        assert!(s.selects(&ObjectMeta::default()));
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let s = selector(&[("app", "web")], vec![expr("env", "NotIn", &["dev"])]);
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod")])));
        assert!(
            s.matches(&labels(&[("app", "web")])),
            "NotIn matches a missing key"
        );
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "dev")])));
        assert!(!s.matches(&labels(&[("app", "api"), ("env", "prod")])));
        assert!(
            !s.selects(&ObjectMeta::default()),
            "no labels: app is missing"
        );
    }

    #[test]
    fn refused_in_the_hosts_words_naming_the_field() {
        let unknown = LabelSelector {
            match_expressions: Some(vec![expr("env", "Equals", &["x"])]),
            ..Default::default()
        };
        assert_eq!(
            Selector::new(&unknown).unwrap_err().to_string(),
            r#"selector.matchExpressions[0].operator: "Equals" is not In, NotIn, Exists or DoesNotExist"#
        );
        let err = Selector::new_at(
            &LabelSelector {
                match_expressions: Some(vec![expr("", "Exists", &[])]),
                ..Default::default()
            },
            "spec.deploymentSelector",
        )
        .unwrap_err();
        assert_eq!(err.field, "spec.deploymentSelector.matchExpressions[0].key");
        let err = Selector::from_json_at(
            &serde_json::json!({ "matchLabels": "app=web" }),
            "spec.deploymentSelector",
        )
        .unwrap_err();
        assert_eq!(err.field, "spec.deploymentSelector.matchLabels");
    }

    #[test]
    fn from_json_reads_a_resources_selector() {
        let s = Selector::from_json(&serde_json::json!({
            "matchLabels": { "app": "web" },
            "matchExpressions": [{ "key": "tier", "operator": "In", "values": ["front"] }],
        }))
        .unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
    }
}
