//! Run workers natively in `cargo test`, through the same code as the component export.
//!
//! A [`SyncTest`] builds the request the host would send (the resource and each
//! input serialized to JSON strings, a fixed clock), hands it to the function the
//! component's `phase-worker.sync` export calls, and parses the JSON that comes back
//! into a [`SyncReport`] to assert on. Log lines are kept instead of going to the host.
//!
//! ```no_run
//! use wasmpilot_guest::testing::{objects_from_yaml, SyncTest};
//! # #[derive(Default)] struct Syncing;
//! # impl wasmpilot_guest::PhaseWorker for Syncing { type Resource = serde_json::Value;
//! #   fn sync(&self, _: &wasmpilot_guest::Context, _: serde_json::Value, _: &wasmpilot_guest::Inputs)
//! #   -> Result<wasmpilot_guest::Outcome, wasmpilot_guest::WorkerError> { todo!() } }
//!
//! let route = serde_json::json!({
//!     "apiVersion": "examples.io/v1", "kind": "AutoRoute",
//!     "metadata": { "name": "example", "namespace": "default" },
//!     "spec": { "deploymentSelector": { "matchLabels": { "app": "web" } } },
//! });
//! // Usually `include_str!("fixtures/deployments.yaml")`.
//! let deployments = objects_from_yaml("
//! apiVersion: apps/v1
//! kind: Deployment
//! metadata: { name: web, namespace: default, labels: { app: web } }
//! spec: { selector: { matchLabels: { app: web } }, template: {} }
//! ").unwrap();
//! let report = SyncTest::new(&route)
//!     .phase("Syncing")
//!     .input("deployments", &deployments)
//!     .run(&Syncing)
//!     .unwrap();
//! assert_eq!(report.next_phase, "Ready");
//! assert_eq!(report.outputs_of_kind("Service").len(), 1);
//! ```
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::export::{run_finalize, run_sync};
use crate::wit::wasmpilot::operator::types as wire;
use crate::{FinalizerWorker, LogRecord, PhaseWorker, WorkerError};

/// The clock a test request carries unless [`SyncTest::now`] sets another.
pub const DEFAULT_NOW: &str = "2025-01-01T00:00:00Z";

/// The operator name a test request carries unless [`SyncTest::operator`] sets another.
pub const DEFAULT_OPERATOR: &str = "test-operator";

/// The `objects` the host hands a worker for an input declared with
/// `selectorFrom: <selector_field>`: those in `resource`'s namespace whose labels match the
/// label selector at that field of `resource` (see [`SyncTest::input_selected`]).
///
/// # Panics
/// If `resource` has no valid selector at `selector_field` (the host would report
/// `InvalidSelector` without running the worker), or an object does not serialize.
pub fn selected_by<T, I>(resource: &Value, selector_field: &str, objects: I) -> Vec<Value>
where
    T: Serialize,
    I: IntoIterator<Item = T>,
{
    let selector = wasmpilot_selection::field_at(resource, selector_field)
        .map(|value| wasmpilot_selection::LabelSelector::from_json(value, selector_field))
        .unwrap_or_else(|| panic!("the resource has no `{selector_field}`"))
        .unwrap_or_else(|err| panic!("the host would report InvalidSelector: {err}"));
    let namespace = resource.pointer("/metadata/namespace");
    objects
        .into_iter()
        .map(|o| to_json_value(&o, "an input object"))
        .filter(|o| match (namespace, o.pointer("/metadata/namespace")) {
            // Cluster-scoped objects (and a cluster-scoped resource's inputs) are all visible.
            (Some(ns), Some(object_ns)) => ns == object_ns,
            _ => true,
        })
        .filter(|o| {
            let labels: Option<BTreeMap<String, String>> = o
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok());
            selector.matches(labels.as_ref())
        })
        .collect()
}

/// A phase worker run to set up: resource, inputs, phase, clock.
#[derive(Clone, Debug)]
pub struct SyncTest {
    operator: String,
    phase: String,
    resource: String,
    inputs: Vec<(String, Vec<String>)>,
    /// Inputs declaring `fields`: their objects are cut down as the host cuts them.
    projections: Vec<(String, wasmpilot_selection::Projection)>,
    now: String,
}

impl SyncTest {
    /// A run on `resource` (a typed custom resource or a `serde_json::Value`). The phase
    /// defaults to the resource's `.status.phase`, or `""` if it has none.
    ///
    /// # Panics
    /// If `resource` does not serialize to JSON.
    pub fn new(resource: impl Serialize) -> Self {
        let value = to_json_value(&resource, "the resource");
        let phase = value
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Self {
            operator: DEFAULT_OPERATOR.to_owned(),
            phase,
            resource: value.to_string(),
            inputs: Vec::new(),
            projections: Vec::new(),
            now: DEFAULT_NOW.to_owned(),
        }
    }

    /// Input `name` declares `fields` in operator.yaml (generated code has them as
    /// `<INPUT>_FIELDS`): its objects reach the worker cut down to those field paths (and
    /// `apiVersion`, `kind`, `metadata.name`, `metadata.namespace`), as the host sends them, so
    /// a worker reading a field it did not declare fails here, not on the cluster.
    ///
    /// # Panics
    /// If a path is malformed (the host refuses such a definition).
    pub fn fields(mut self, name: &str, fields: &[&str]) -> Self {
        let projection = wasmpilot_selection::Projection::new(fields)
            .unwrap_or_else(|err| panic!("fields of input `{name}`: {err}"));
        self.projections.retain(|(n, _)| n != name);
        self.projections.push((name.to_owned(), projection));
        self
    }

    pub fn operator(mut self, name: impl Into<String>) -> Self {
        self.operator = name.into();
        self
    }

    /// The phase being run, as the host would pass it.
    pub fn phase(mut self, name: impl Into<String>) -> Self {
        self.phase = name.into();
        self
    }

    /// The host's clock, RFC 3339, e.g. `"2025-06-01T12:00:00Z"`. Not validated here:
    /// a bad value reaches the worker's export as it would from a broken host.
    pub fn now(mut self, rfc3339: impl Into<String>) -> Self {
        self.now = rfc3339.into();
        self
    }

    /// Adds objects to input `name` (declaring it if new). Objects may be typed
    /// (k8s-openapi) or `serde_json::Value`s, e.g. from [`objects_from_yaml`].
    ///
    /// # Panics
    /// If an object does not serialize to JSON.
    pub fn input<T, I>(mut self, name: &str, objects: I) -> Self
    where
        T: Serialize,
        I: IntoIterator<Item = T>,
    {
        let objects = objects
            .into_iter()
            .map(|o| to_json_value(&o, &format!("an object of input `{name}`")).to_string());
        self.input_slot(name).extend(objects);
        self
    }

    /// Adds to input `name` the objects the host would hand over for an input declared with
    /// `selectorFrom: <selector_field>` (e.g. `spec.deploymentSelector`): those in the
    /// resource's namespace whose labels match the label selector at that field of the
    /// resource. The other objects are left out, as the host leaves them out.
    ///
    /// # Panics
    /// If the resource has no valid selector at `selector_field` (the host would report
    /// `InvalidSelector` without running the worker), or an object does not serialize.
    pub fn input_selected<T, I>(self, name: &str, selector_field: &str, objects: I) -> Self
    where
        T: Serialize,
        I: IntoIterator<Item = T>,
    {
        let resource: Value = serde_json::from_str(&self.resource).unwrap_or_default();
        let selected = selected_by(&resource, selector_field, objects);
        self.input(name, selected)
    }

    /// Declares input `name` with no objects (as when nothing matches in the cluster).
    pub fn empty_input(mut self, name: &str) -> Self {
        self.input_slot(name);
        self
    }

    /// Adds objects to input `name` as raw JSON strings, passed on unchecked
    /// (to test how a worker handles objects that do not parse).
    pub fn input_json(mut self, name: &str, objects: impl IntoIterator<Item = String>) -> Self {
        self.input_slot(name).extend(objects);
        self
    }

    fn input_slot(&mut self, name: &str) -> &mut Vec<String> {
        let index = match self.inputs.iter().position(|(n, _)| n == name) {
            Some(index) => index,
            None => {
                self.inputs.push((name.to_owned(), Vec::new()));
                self.inputs.len() - 1
            }
        };
        &mut self.inputs[index].1
    }

    /// The inputs as the host would send them.
    fn wire_inputs(&self) -> Vec<wire::NamedObjects> {
        self.inputs
            .iter()
            .map(|(name, objects)| wire::NamedObjects {
                name: name.clone(),
                objects: self.as_sent(name, objects),
            })
            .collect()
    }

    /// Input `name`'s objects as the host would send them: cut to its declared fields (objects
    /// that are not JSON, from [`SyncTest::input_json`], pass unchanged).
    fn as_sent(&self, name: &str, objects: &[String]) -> Vec<String> {
        let Some((_, projection)) = self.projections.iter().find(|(n, _)| n == name) else {
            return objects.to_vec();
        };
        objects
            .iter()
            .map(|o| match serde_json::from_str::<Value>(o) {
                Ok(value) => projection.apply(&value).to_string(),
                Err(_) => o.clone(),
            })
            .collect()
    }

    /// Runs `worker` through the component export's code path.
    ///
    /// # Errors
    /// The worker's [`WorkerError`], with the log lines written before it.
    pub fn run<W: PhaseWorker>(&self, worker: &W) -> Result<SyncReport, FailedRun> {
        let request = wire::SyncRequest {
            operator: self.operator.clone(),
            phase: self.phase.clone(),
            resource: self.resource.clone(),
            inputs: self.wire_inputs(),
            now: self.now.clone(),
        };
        let (result, logs) = run_sync(worker, request);
        match result {
            Ok(result) => Ok(SyncReport {
                next_phase: result.next_phase,
                status: result.status_info.map(|s| parse_back(&s, "status-info")),
                outputs: result
                    .outputs
                    .iter()
                    .map(|o| parse_back(o, "an output"))
                    .collect(),
                requeue_after: result.requeue_after_ms.map(Duration::from_millis),
                logs,
            }),
            Err(error) => Err(FailedRun {
                error: error.into(),
                logs,
            }),
        }
    }
}

/// What a phase worker returned, parsed back from the JSON the host would receive.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncReport {
    pub next_phase: String,
    /// The status patch (host-owned fields already dropped), if any.
    pub status: Option<Value>,
    /// The objects the host would apply, in the order the worker returned them.
    pub outputs: Vec<Value>,
    pub requeue_after: Option<Duration>,
    pub logs: Vec<LogRecord>,
}

impl SyncReport {
    /// The outputs whose `kind` is `kind`.
    pub fn outputs_of_kind(&self, kind: &str) -> Vec<&Value> {
        self.outputs.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The output of `kind` named `name`.
    pub fn output(&self, kind: &str, name: &str) -> Option<&Value> {
        self.outputs
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// The outputs of `kind` parsed as `T` (e.g. `k8s_openapi::api::core::v1::Service`).
    ///
    /// # Panics
    /// If one does not parse as `T`.
    pub fn typed_outputs<T: DeserializeOwned>(&self, kind: &str) -> Vec<T> {
        self.outputs_of_kind(kind)
            .into_iter()
            .map(|o| {
                T::deserialize(o).unwrap_or_else(|err| panic!("output {o} does not parse: {err}"))
            })
            .collect()
    }

    /// Whether a log line's message contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.logs.iter().any(|r| r.message.contains(text))
    }
}

/// A finalizer worker run to set up; see [`SyncTest`].
#[derive(Clone, Debug)]
pub struct FinalizeTest {
    operator: String,
    resource: String,
    inputs: SyncTest,
    now: String,
}

impl FinalizeTest {
    /// # Panics
    /// If `resource` does not serialize to JSON.
    pub fn new(resource: impl Serialize) -> Self {
        let value = to_json_value(&resource, "the resource");
        Self {
            operator: DEFAULT_OPERATOR.to_owned(),
            resource: value.to_string(),
            inputs: SyncTest::new(value),
            now: DEFAULT_NOW.to_owned(),
        }
    }

    /// Adds objects to the finalizer's input `name` (see [`SyncTest::input`]).
    ///
    /// # Panics
    /// If an object does not serialize to JSON.
    pub fn input<T, I>(mut self, name: &str, objects: I) -> Self
    where
        T: Serialize,
        I: IntoIterator<Item = T>,
    {
        self.inputs = self.inputs.input(name, objects);
        self
    }

    /// Adds to input `name` the objects the host would select by the label selector at the
    /// resource's `selector_field` (see [`SyncTest::input_selected`]).
    ///
    /// # Panics
    /// As [`SyncTest::input_selected`].
    pub fn input_selected<T, I>(mut self, name: &str, selector_field: &str, objects: I) -> Self
    where
        T: Serialize,
        I: IntoIterator<Item = T>,
    {
        self.inputs = self.inputs.input_selected(name, selector_field, objects);
        self
    }

    /// Declares the finalizer's input `name` with no objects.
    pub fn empty_input(mut self, name: &str) -> Self {
        self.inputs = self.inputs.empty_input(name);
        self
    }

    /// Input `name` declares `fields` (see [`SyncTest::fields`]).
    ///
    /// # Panics
    /// If a path is malformed.
    pub fn fields(mut self, name: &str, fields: &[&str]) -> Self {
        self.inputs = self.inputs.fields(name, fields);
        self
    }

    pub fn operator(mut self, name: impl Into<String>) -> Self {
        self.operator = name.into();
        self
    }

    pub fn now(mut self, rfc3339: impl Into<String>) -> Self {
        self.now = rfc3339.into();
        self
    }

    /// Runs `worker` through the component export's code path.
    ///
    /// # Errors
    /// The worker's [`WorkerError`], with the log lines written before it.
    pub fn run<W: FinalizerWorker>(&self, worker: &W) -> Result<FinalizeReport, FailedRun> {
        let request = wire::FinalizeRequest {
            operator: self.operator.clone(),
            resource: self.resource.clone(),
            now: self.now.clone(),
        };
        let (result, logs) = run_finalize(worker, request, self.inputs.wire_inputs());
        match result {
            Ok(result) => Ok(FinalizeReport {
                done: result.done,
                status: result.status_info.map(|s| parse_back(&s, "status-info")),
                requeue_after: result.requeue_after_ms.map(Duration::from_millis),
                logs,
            }),
            Err(error) => Err(FailedRun {
                error: error.into(),
                logs,
            }),
        }
    }
}

/// What a finalizer worker returned.
#[derive(Clone, Debug, PartialEq)]
pub struct FinalizeReport {
    pub done: bool,
    pub status: Option<Value>,
    pub requeue_after: Option<Duration>,
    pub logs: Vec<LogRecord>,
}

/// A run that ended in a [`WorkerError`].
#[derive(Clone, Debug, PartialEq)]
pub struct FailedRun {
    pub error: WorkerError,
    pub logs: Vec<LogRecord>,
}

impl fmt::Display for FailedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)?;
        for record in &self.logs {
            write!(f, "\n  log: {record}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FailedRun {}

/// Parses a multi-document YAML string (`---` separated, e.g. a fixture file read with
/// `include_str!`) into objects. Empty documents are skipped and the items of a
/// `kind: List` are returned one by one.
///
/// # Errors
/// A fatal [`WorkerError`] naming the document that does not parse.
pub fn objects_from_yaml(yaml: &str) -> Result<Vec<Value>, WorkerError> {
    let mut objects = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value = Value::deserialize(document)
            .map_err(|err| WorkerError::fatal(format!("YAML document #{index}: {err}")))?;
        match value {
            Value::Null => {}
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = map.get("items") {
                    objects.extend(items.iter().cloned());
                }
            }
            other => objects.push(other),
        }
    }
    Ok(objects)
}

fn to_json_value(value: &impl Serialize, what: &str) -> Value {
    serde_json::to_value(value)
        .unwrap_or_else(|err| panic!("{what} does not serialize to JSON: {err}"))
}

/// The SDK wrote this JSON itself; not parsing back is a bug in the SDK.
fn parse_back(json: &str, what: &str) -> Value {
    serde_json::from_str(json)
        .unwrap_or_else(|err| panic!("{what} returned by the worker is not JSON ({err}): {json}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, Finalized, Inputs, Outcome};
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    #[derive(Default)]
    struct Echo;

    impl PhaseWorker for Echo {
        type Resource = Value;

        fn sync(
            &self,
            ctx: &Context,
            resource: Value,
            inputs: &Inputs,
        ) -> Result<Outcome, WorkerError> {
            let deployments: Vec<Deployment> = inputs.list("deployments")?;
            ctx.info(
                "echo",
                &[("phase", &ctx.phase()), ("count", &deployments.len())],
            );
            if resource["spec"]["fail"] == true {
                return Err(WorkerError::retryable("asked to fail"));
            }
            Outcome::next("Done")
                .status(json!({ "now": ctx.now().to_string(), "phase": "ignored" }))
                .outputs(deployments.iter().map(|d| {
                    json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": { "name": d.metadata.name },
                    })
                }))
                .map(|o| o.requeue_after(Duration::from_secs(7)))
        }
    }

    const DEPLOYMENTS: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: a, namespace: default }
spec: { selector: {}, template: {} }
---
---
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: { name: b, namespace: default }
  spec: { selector: {}, template: {} }
";

    #[test]
    fn runs_a_phase_worker_end_to_end() {
        let deployments = objects_from_yaml(DEPLOYMENTS).unwrap();
        assert_eq!(deployments.len(), 2);
        let report = SyncTest::new(json!({ "status": { "phase": "Working" } }))
            .input("deployments", &deployments)
            .now("2025-06-01T12:00:00Z")
            .run(&Echo)
            .unwrap();
        assert_eq!(report.next_phase, "Done");
        assert_eq!(
            report.status,
            Some(json!({ "now": "2025-06-01T12:00:00Z" }))
        );
        assert_eq!(report.outputs_of_kind("ConfigMap").len(), 2);
        assert!(report.output("ConfigMap", "b").is_some());
        assert_eq!(report.requeue_after, Some(Duration::from_secs(7)));
        assert_eq!(report.logs[0].field("phase"), Some("Working"));
        assert_eq!(report.logs[0].field("count"), Some("2"));
        assert!(report.logged("echo"));
    }

    #[test]
    fn declared_fields_cut_the_objects_as_the_host_does() {
        #[derive(Default)]
        struct Reads;
        impl PhaseWorker for Reads {
            type Resource = Value;
            fn sync(&self, _: &Context, _: Value, inputs: &Inputs) -> Result<Outcome, WorkerError> {
                let deployments: Vec<Deployment> = inputs.list("deployments")?;
                let replicas: Vec<Option<i32>> = deployments
                    .iter()
                    .map(|d| d.spec.as_ref().and_then(|s| s.replicas))
                    .collect();
                Ok(Outcome::next("x").status(json!({ "replicas": replicas })))
            }
        }
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "a", "namespace": "default", "labels": { "app": "a" } },
            "spec": { "replicas": 2, "selector": {}, "template": {} },
        });
        let whole = SyncTest::new(json!({})).input("deployments", [&deployment]);
        let report = whole.clone().run(&Reads).unwrap();
        assert_eq!(report.status, Some(json!({ "replicas": [2] })));

        // spec.replicas not declared: the worker sees none, as on the cluster.
        let report = whole
            .clone()
            .fields("deployments", &["spec.selector", "spec.template"])
            .run(&Reads)
            .unwrap();
        assert_eq!(report.status, Some(json!({ "replicas": [null] })));
        let report = whole
            .fields("deployments", &["spec.replicas"])
            .run(&Reads)
            .unwrap();
        assert_eq!(report.status, Some(json!({ "replicas": [2] })));
    }

    #[test]
    fn errors_keep_their_kind_and_logs() {
        let failed = SyncTest::new(json!({ "spec": { "fail": true } }))
            .empty_input("deployments")
            .run(&Echo)
            .unwrap_err();
        assert!(failed.error.is_retryable());
        assert_eq!(failed.logs.len(), 1);
    }

    #[test]
    fn a_missing_input_or_bad_clock_is_fatal() {
        let failed = SyncTest::new(json!({})).run(&Echo).unwrap_err();
        assert!(failed.error.message().contains("unknown input"), "{failed}");
        let failed = SyncTest::new(json!({}))
            .empty_input("deployments")
            .now("yesterday")
            .run(&Echo)
            .unwrap_err();
        assert!(failed.error.message().contains("RFC 3339"), "{failed}");
    }

    #[test]
    fn a_resource_of_the_wrong_shape_is_fatal() {
        #[derive(Default)]
        struct Typed;
        impl PhaseWorker for Typed {
            type Resource = Deployment;
            fn sync(&self, _: &Context, _: Deployment, _: &Inputs) -> Result<Outcome, WorkerError> {
                Ok(Outcome::next("x"))
            }
        }
        let failed = SyncTest::new(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "ns" }, "spec": 3
        }))
        .run(&Typed)
        .unwrap_err();
        assert!(failed.error.is_fatal());
        assert!(
            failed
                .error
                .message()
                .starts_with("the resource (apps/v1 Deployment ns/web) is not a valid Deployment"),
            "{failed}"
        );
    }

    #[test]
    fn missing_sides_are_fatal() {
        let failed = SyncTest::new(json!({}))
            .run(&crate::__private::NoPhase)
            .unwrap_err();
        assert_eq!(
            failed.error,
            WorkerError::fatal("this component has no phase worker")
        );
        let failed = FinalizeTest::new(json!({}))
            .run(&crate::__private::NoFinalizer)
            .unwrap_err();
        assert_eq!(
            failed.error,
            WorkerError::fatal("this component has no finalizer worker")
        );
    }

    #[test]
    fn runs_a_finalizer() {
        #[derive(Default)]
        struct Cleanup;
        impl FinalizerWorker for Cleanup {
            type Resource = Value;
            fn finalize(
                &self,
                ctx: &Context,
                _: Value,
                inputs: &Inputs,
            ) -> Result<Finalized, WorkerError> {
                ctx.warn("cleaning", &[("phase", &ctx.phase())]);
                let leases = inputs.get_raw("leases").map_or(0, <[String]>::len);
                Ok(Finalized::pending(Duration::from_millis(1500))
                    .status(json!({ "step": 1, "leases": leases })))
            }
        }
        let report = FinalizeTest::new(json!({})).run(&Cleanup).unwrap();
        assert!(!report.done);
        assert_eq!(report.requeue_after, Some(Duration::from_millis(1500)));
        assert_eq!(report.status, Some(json!({ "step": 1, "leases": 0 })));
        assert_eq!(report.logs[0].field("phase"), Some("finalizer"));

        let lease = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l"}});
        let report = FinalizeTest::new(json!({}))
            .input("leases", [&lease, &lease])
            .run(&Cleanup)
            .unwrap();
        assert_eq!(report.status, Some(json!({ "step": 1, "leases": 2 })));
    }

    #[test]
    fn bad_yaml_names_the_document() {
        let err = objects_from_yaml("a: 1\n---\n[").unwrap_err();
        assert!(err.message().starts_with("YAML document #1"), "{err}");
    }
}
