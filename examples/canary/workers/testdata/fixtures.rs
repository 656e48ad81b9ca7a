// Test fixtures shared by the canary workers' unit tests: `mod fixtures { include!(...) }`.
// Deployments and CanaryDeployments come from the YAML files next to this one; the primary
// and canary Deployments are built from the target with the same code the workers use, then
// given what the API server adds (a uid, a status), so tests see what the host would pass.

use canary_types::{deployment, revision, template_source, Names, Role};
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{json, Value};
use wasmpilot_guest::testing::objects_from_yaml;
use wasmpilot_guest::Sample;

/// The host's clock in most tests; an analysis in the fixtures starts at [`STARTED`].
pub const NOW: &str = "2025-06-01T12:00:10Z";
pub const STARTED: &str = "2025-06-01T12:00:00Z";

/// CanaryDeployment #`index` of `canaries.yaml` (#0 valid and new, #1 invalid).
pub fn canary(index: usize) -> Value {
    objects_from_yaml(include_str!("canaries.yaml")).unwrap()[index].clone()
}

/// `canary(0)` with `status`.
pub fn canary_with(status: Value) -> Value {
    let mut cd = canary(0);
    cd["status"] = status;
    cd
}

fn deployments_yaml() -> Vec<Value> {
    objects_from_yaml(include_str!("deployments.yaml")).unwrap()
}

/// The target `web` at `version` (1 as in the YAML; others change the image).
pub fn target(version: u32) -> Value {
    let mut d = deployments_yaml()[0].clone();
    d["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!(format!("registry.example.com/web:{version}"));
    d
}

/// An unrelated Deployment in the same namespace.
pub fn other() -> Value {
    deployments_yaml()[1].clone()
}

/// The revision of the target at `version`.
pub fn rev(version: u32) -> String {
    let d: Deployment = serde_json::from_value(target(version)).unwrap();
    revision(&d.spec.unwrap().template)
}

/// The `role` Deployment running the target at `version` with `replicas`, as the cluster has it.
pub fn managed(role: Role, version: u32, replicas: i32) -> Value {
    let cd: canary_types::CanaryDeployment = serde_json::from_value(canary(0)).unwrap();
    let names = Names::of(&cd).unwrap();
    let t: Deployment = serde_json::from_value(target(version)).unwrap();
    let d = deployment(
        &names,
        role,
        template_source(&t).unwrap(),
        replicas,
        &rev(version),
    );
    let mut v = serde_json::to_value(d).unwrap();
    v["metadata"]["uid"] = json!(format!("uid-{}", role.as_str()));
    v["metadata"]["labels"]["wasmpilot.io/operator"] = json!("canary");
    v["status"] = json!({ "replicas": replicas, "readyReplicas": replicas });
    v
}

/// A success-rate query result: one sample of `value` (None: Prometheus answered NaN).
pub fn rate(value: Option<f64>) -> Vec<Sample> {
    vec![Sample {
        labels: Default::default(),
        value,
        timestamp: 1_748_779_210.0,
    }]
}

/// The image of a Deployment output's first container.
pub fn image(d: &Value) -> &str {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}
