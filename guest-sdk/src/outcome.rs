//! What a worker decided: the next phase, a status patch, objects to apply, when to run again.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::WorkerError;

/// The `.status` fields the host writes itself; removed from a worker's status patch
/// so a worker cannot fight the host over them (see [`HostStatus`](crate::HostStatus)).
pub(crate) const HOST_STATUS_FIELDS: [&str; 4] =
    ["phase", "observedGeneration", "conditions", "moduleDigest"];

/// What a phase worker decided.
///
/// ```no_run
/// # use wasmpilot_guest::{Outcome, WorkerError};
/// # use std::time::Duration;
/// # fn f(service: k8s_openapi::api::core::v1::Service) -> Result<Outcome, WorkerError> {
/// Ok(Outcome::next("Ready")
///     .status(serde_json::json!({ "syncedDeployments": ["web"] }))
///     .output(&service)?
///     .requeue_after(Duration::from_secs(60)))
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub(crate) next_phase: String,
    pub(crate) status: Result<Option<Map<String, Value>>, WorkerError>,
    pub(crate) outputs: Vec<Value>,
    pub(crate) requeue_after: Option<Duration>,
}

impl Outcome {
    /// Move to `phase` (which may be the current one) with no status change and no outputs.
    pub fn next(phase: impl Into<String>) -> Self {
        Self {
            next_phase: phase.into(),
            status: Ok(None),
            outputs: Vec::new(),
            requeue_after: None,
        }
    }

    /// Merge `status` into the resource's `.status` (JSON merge patch: `null` removes a field).
    ///
    /// `status` must serialize to a JSON object: a `serde_json::json!({...})` value or your
    /// status struct. The fields the host owns (`phase`, `observedGeneration`, `conditions`,
    /// `moduleDigest`) are dropped: the host sets them. If `status` does not serialize to an
    /// object, the run fails with a fatal error. Calling it again merges into the earlier patch.
    pub fn status(mut self, status: impl Serialize) -> Self {
        self.status = self.status.and_then(|earlier| {
            let patch = status_patch(&status)?;
            Ok(Some(match earlier {
                None => patch,
                Some(mut earlier) => {
                    earlier.extend(patch);
                    earlier
                }
            }))
        });
        self
    }

    /// Add one object for the host to server-side apply, owned by the resource.
    ///
    /// Any `Serialize` Kubernetes object works: k8s-openapi types, kube-derived types,
    /// `serde_json::Value`. The host must be told about its kind in the phase's `outputs`.
    ///
    /// # Errors
    /// Fatal if the object does not serialize to a JSON object with `apiVersion`, `kind`
    /// and `metadata.name`. (k8s-openapi types always carry `apiVersion` and `kind`.)
    pub fn output(mut self, object: &impl Serialize) -> Result<Self, WorkerError> {
        let value = output_value(object, self.outputs.len())?;
        self.outputs.push(value);
        Ok(self)
    }

    /// Add one object that must be of kind `api_version` `kind` (what the typed outcome
    /// builders of `wasmpilot generate` call for kinds k8s-openapi does not know). A missing
    /// `apiVersion` or `kind` is filled in; a different one is refused.
    ///
    /// # Errors
    /// Fatal if the object is of another kind, or as for [`output`](Self::output).
    pub fn output_of_kind(
        self,
        api_version: &str,
        kind: &str,
        object: &impl Serialize,
    ) -> Result<Self, WorkerError> {
        let index = self.outputs.len();
        let mut value = serde_json::to_value(object).map_err(|err| {
            WorkerError::fatal(format!("output #{index} does not serialize to JSON: {err}"))
        })?;
        if let Value::Object(fields) = &mut value {
            for (field, want) in [("apiVersion", api_version), ("kind", kind)] {
                match fields.get(field).and_then(Value::as_str) {
                    None | Some("") => {
                        fields.insert(field.to_owned(), Value::String(want.to_owned()));
                    }
                    Some(have) if have != want => {
                        return Err(WorkerError::fatal(format!(
                            "output #{index} has {field} `{}`, but this builder takes {api_version} {kind}",
                            bounded(have)
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        self.output(&value)
    }

    /// Add several objects; see [`output`](Self::output).
    pub fn outputs<T, I>(mut self, objects: I) -> Result<Self, WorkerError>
    where
        T: Serialize,
        I: IntoIterator<Item = T>,
    {
        for object in objects {
            self = self.output(&object)?;
        }
        Ok(self)
    }

    /// Run this resource again after `delay` (instead of the operator's resync interval).
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// The phase this outcome moves to.
    pub fn next_phase(&self) -> &str {
        &self.next_phase
    }
}

/// What a finalizer worker decided.
///
/// ```no_run
/// # use wasmpilot_guest::Finalized;
/// # use std::time::Duration;
/// let still_busy = Finalized::pending(Duration::from_secs(10))
///     .status(serde_json::json!({ "cleanup": "waiting for the load balancer" }));
/// let finished = Finalized::done();
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Finalized {
    pub(crate) done: bool,
    pub(crate) status: Result<Option<Map<String, Value>>, WorkerError>,
    pub(crate) requeue_after: Option<Duration>,
}

impl Finalized {
    /// Cleanup is finished: the host removes its finalizer and the deletion proceeds.
    pub fn done() -> Self {
        Self {
            done: true,
            status: Ok(None),
            requeue_after: None,
        }
    }

    /// Cleanup is not finished: run the finalizer again after `delay`.
    pub fn pending(delay: Duration) -> Self {
        Self {
            done: false,
            status: Ok(None),
            requeue_after: Some(delay),
        }
    }

    /// Merge `status` into `.status` while the resource is terminating; see [`Outcome::status`].
    pub fn status(mut self, status: impl Serialize) -> Self {
        self.status = self.status.and_then(|_| status_patch(&status).map(Some));
        self
    }

    pub fn is_done(&self) -> bool {
        self.done
    }
}

fn status_patch(status: &impl Serialize) -> Result<Map<String, Value>, WorkerError> {
    match serde_json::to_value(status) {
        Ok(Value::Object(mut map)) => {
            for field in HOST_STATUS_FIELDS {
                map.remove(field);
            }
            Ok(map)
        }
        Ok(other) => Err(WorkerError::fatal(format!(
            "the status must serialize to a JSON object, not {}",
            json_type(&other)
        ))),
        Err(err) => Err(WorkerError::fatal(format!(
            "the status does not serialize to JSON: {err}"
        ))),
    }
}

fn output_value(object: &impl Serialize, index: usize) -> Result<Value, WorkerError> {
    let value = serde_json::to_value(object).map_err(|err| {
        WorkerError::fatal(format!("output #{index} does not serialize to JSON: {err}"))
    })?;
    let text = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let missing: Vec<&str> = [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ]
    .into_iter()
    .filter(|(pointer, _)| text(pointer).is_none())
    .map(|(_, field)| field)
    .collect();
    if !value.is_object() {
        return Err(WorkerError::fatal(format!(
            "output #{index} must be a Kubernetes object, not {}",
            json_type(&value)
        )));
    }
    if !missing.is_empty() {
        let what = match (text("/kind"), text("/metadata/name")) {
            (Some(kind), Some(name)) => format!(" ({kind} {name})"),
            (Some(kind), None) => format!(" ({kind})"),
            (None, Some(name)) => format!(" ({name})"),
            (None, None) => String::new(),
        };
        return Err(WorkerError::fatal(format!(
            "output #{index}{what} has no {}",
            missing.join(", no ")
        )));
    }
    Ok(value)
}

/// A worker-supplied value cut to 100 characters for an error message.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(100) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    #[test]
    fn output_of_kind_fills_and_checks_the_kind() {
        let outcome = Outcome::next("Ready")
            .output_of_kind(
                "example.io/v1",
                "Gateway",
                &json!({ "metadata": { "name": "g" } }),
            )
            .unwrap();
        assert_eq!(outcome.outputs[0]["apiVersion"], "example.io/v1");
        assert_eq!(outcome.outputs[0]["kind"], "Gateway");
        let wrong = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s" } });
        let err = Outcome::next("Ready")
            .output_of_kind("example.io/v1", "Gateway", &wrong)
            .unwrap_err();
        assert!(err.message().contains("apiVersion `v1`"), "{err:?}");
    }

    #[test]
    fn typed_outputs_carry_api_version_and_kind() {
        let service = Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let outcome = Outcome::next("Ready").output(&service).unwrap();
        assert_eq!(outcome.outputs[0]["apiVersion"], "v1");
        assert_eq!(outcome.outputs[0]["kind"], "Service");
    }

    #[test]
    fn output_without_name_is_fatal() {
        let err = Outcome::next("Ready")
            .output(&Service::default())
            .unwrap_err();
        assert!(err.is_fatal());
        assert_eq!(err.message(), "output #0 (Service) has no metadata.name");
        let err = Outcome::next("Ready")
            .outputs([json!({"metadata": {"name": "x"}})])
            .unwrap_err();
        assert_eq!(err.message(), "output #0 (x) has no apiVersion, no kind");
        let err = Outcome::next("Ready").output(&json!([1])).unwrap_err();
        assert_eq!(
            err.message(),
            "output #0 must be a Kubernetes object, not an array"
        );
    }

    #[test]
    fn status_drops_host_fields_and_merges() {
        let outcome = Outcome::next("Ready")
            .status(json!({"phase": "X", "conditions": [], "a": 1}))
            .status(json!({"b": 2}));
        let status = outcome.status.unwrap().unwrap();
        assert_eq!(Value::Object(status), json!({"a": 1, "b": 2}));
    }

    #[test]
    fn non_object_status_is_a_deferred_fatal_error() {
        let outcome = Outcome::next("Ready").status(3).status(json!({"b": 2}));
        let err = outcome.status.unwrap_err();
        assert!(err.is_fatal());
        assert!(err.message().contains("not a number"), "{err}");
    }

    #[test]
    fn finalized() {
        assert!(Finalized::done().is_done());
        let pending = Finalized::pending(Duration::from_secs(5)).status(json!({"x": 1}));
        assert!(!pending.is_done());
        assert_eq!(pending.requeue_after, Some(Duration::from_secs(5)));
    }
}
