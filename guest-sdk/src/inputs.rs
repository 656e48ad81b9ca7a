//! The objects a phase declared as inputs, read by name and parsed on demand.

use serde::de::DeserializeOwned;

use crate::WorkerError;

/// The phase's declared inputs, each a list of whole Kubernetes objects as JSON.
///
/// Objects are parsed only when asked for, into any [`DeserializeOwned`] type:
/// k8s-openapi types, your own kube-derived types, or `serde_json::Value`.
///
/// ```no_run
/// # fn f(inputs: &wasmpilot_guest::Inputs) -> Result<(), wasmpilot_guest::WorkerError> {
/// use k8s_openapi::api::apps::v1::Deployment;
/// let deployments: Vec<Deployment> = inputs.list("deployments")?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    inputs: Vec<(String, Vec<String>)>,
}

impl Inputs {
    pub(crate) fn new(inputs: Vec<(String, Vec<String>)>) -> Self {
        Self { inputs }
    }

    /// The declared input names, in declaration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().map(|(name, _)| name.as_str())
    }

    /// The objects of input `name` as JSON strings, or `None` if the phase declares no such input.
    pub fn get_raw(&self, name: &str) -> Option<&[String]> {
        self.inputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, objects)| objects.as_slice())
    }

    /// The objects of input `name` as JSON strings.
    ///
    /// # Errors
    /// A fatal error naming the declared inputs if the phase declares no input `name`.
    pub fn raw(&self, name: &str) -> Result<&[String], WorkerError> {
        self.get_raw(name).ok_or_else(|| self.unknown(name))
    }

    /// The samples of a metric query the phase declared (`queries` in the WasmOperator): the
    /// host ran the PromQL against Prometheus and hands the result over as data.
    ///
    /// # Errors
    /// As [`Inputs::list`].
    pub fn samples(&self, name: &str) -> Result<Vec<Sample>, WorkerError> {
        self.list(name)
    }

    /// Parses every object of input `name` into `T`.
    ///
    /// # Errors
    /// Fatal if the phase declares no input `name` (the message lists the declared
    /// ones), or if an object does not parse as `T` (the message names the input,
    /// the object and the serde error).
    pub fn list<T: DeserializeOwned>(&self, name: &str) -> Result<Vec<T>, WorkerError> {
        self.raw(name)?
            .iter()
            .enumerate()
            .map(|(index, json)| {
                serde_json::from_str(json).map_err(|err| {
                    WorkerError::fatal(format!(
                        "input `{name}`: object {} is not a valid {}: {err}",
                        describe_object(index, json),
                        short_type_name::<T>(),
                    ))
                })
            })
            .collect()
    }

    fn unknown(&self, name: &str) -> WorkerError {
        let known: Vec<String> = self.names().map(|n| format!("`{n}`")).collect();
        let known = if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        };
        WorkerError::fatal(format!(
            "unknown input `{name}`: this worker declares {known} (see its `inputs` in the WasmOperator: the phase's, or spec.finalizer.inputs for the finalizer)"
        ))
    }
}

/// `#3 (apps/v1 Deployment default/web)` when the JSON has the fields, else `#3`.
pub(crate) fn describe_object(index: usize, json: &str) -> String {
    match identity(json) {
        Ok(Some(id)) => format!("#{index} ({id})"),
        Ok(None) => format!("#{index}"),
        Err(()) => format!("#{index} (not JSON)"),
    }
}

/// `apps/v1 Deployment default/web`, from whichever of those fields the JSON has.
pub(crate) fn identity(json: &str) -> Result<Option<String>, ()> {
    let value = serde_json::from_str::<serde_json::Value>(json).map_err(|_| ())?;
    let text = |pointer: &str| value.pointer(pointer).and_then(|v| v.as_str());
    let mut parts = Vec::new();
    if let Some(api_version) = text("/apiVersion") {
        parts.push(api_version.to_owned());
    }
    if let Some(kind) = text("/kind") {
        parts.push(kind.to_owned());
    }
    match (text("/metadata/namespace"), text("/metadata/name")) {
        (Some(ns), Some(name)) => parts.push(format!("{ns}/{name}")),
        (None, Some(name)) => parts.push(name.to_owned()),
        _ => {}
    }
    Ok((!parts.is_empty()).then(|| parts.join(" ")))
}

/// `Deployment` for `k8s_openapi::api::apps::v1::Deployment`.
pub(crate) fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;

    fn inputs() -> Inputs {
        Inputs::new(vec![
            (
                "deployments".into(),
                vec![r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},"spec":{"selector":{},"template":{}}}"#.into()],
            ),
            ("services".into(), vec![]),
        ])
    }

    #[test]
    fn lists_typed_objects() {
        let deployments: Vec<Deployment> = inputs().list("deployments").unwrap();
        assert_eq!(deployments[0].metadata.name.as_deref(), Some("web"));
        assert_eq!(
            inputs().names().collect::<Vec<_>>(),
            ["deployments", "services"]
        );
    }

    #[test]
    fn unknown_input_names_the_known_ones() {
        let err = inputs().list::<Deployment>("pods").unwrap_err();
        assert!(err.is_fatal());
        assert!(err.message().contains("unknown input `pods`"), "{err}");
        assert!(err.message().contains("`deployments`, `services`"), "{err}");
        let err = Inputs::default().raw("pods").unwrap_err();
        assert!(err.message().contains("declares none"), "{err}");
    }

    #[test]
    fn bad_object_names_input_and_object() {
        let inputs = Inputs::new(vec![(
            "deployments".into(),
            vec![r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns"},"spec":{"replicas":"three"}}"#.into()],
        )]);
        let err = inputs.list::<Deployment>("deployments").unwrap_err();
        assert!(err.is_fatal());
        let msg = err.message();
        assert!(msg.contains("input `deployments`"), "{msg}");
        assert!(msg.contains("#0 (apps/v1 Deployment ns/web)"), "{msg}");
        assert!(msg.contains("not a valid Deployment"), "{msg}");
    }

    #[test]
    fn describes_non_json() {
        assert_eq!(describe_object(2, "nope"), "#2 (not JSON)");
        assert_eq!(describe_object(1, "{}"), "#1");
    }
}

/// One sample of a metric query result: an instant-vector element, or a scalar (no labels).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct Sample {
    /// The series' labels (empty for a scalar).
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The value; `None` when Prometheus answered NaN or ±Inf.
    pub value: Option<f64>,
    /// Evaluation time, seconds since the Unix epoch.
    pub timestamp: f64,
}
