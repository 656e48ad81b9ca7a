//! The CanaryDeployment custom resource, and what its phases share: the analysis settings
//! parsed from the spec, the revision of a pod template, and the objects a canary rollout
//! consists of (primary and canary Deployments, three Services, one VirtualService).
//!
//! The typed phase API (`phases`, written by `wasmpilot generate`) allows only the moves
//! operator.yaml declares: Waiting may go to Evaluating,
//!
//! ```
//! use canary_types::phases::waiting::{Next, Outcome};
//! let _ = Outcome::next(Next::Evaluating);
//! ```
//!
//! but not straight to Promoting:
//!
//! ```compile_fail,E0599
//! use canary_types::phases::waiting::{Next, Outcome};
//! let _ = Outcome::next(Next::Promoting);
//! ```

pub mod duration;
pub mod objects;
pub mod phases;
pub mod revision;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use wasmpilot_guest::HostStatus;

pub use duration::{parse_duration, DURATION_PATTERN};
pub use objects::{
    canary_weight_of, deployment, find, replicas_of, revision_annotation, services,
    template_source, virtual_service, InvalidSpec, Names, Role,
};
pub use revision::revision;

/// Rolls out every new version of a Deployment through a canary: a copy of the new version
/// gets a growing share of the traffic (an Istio VirtualService split) while its success rate,
/// measured by Prometheus, stays at or above `successThreshold`; after `analysisPeriod` it is
/// promoted to primary, and as soon as a measurement falls below the threshold it is rolled back.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "canary.examples.io",
    version = "v1",
    kind = "CanaryDeployment",
    namespaced,
    status = "CanaryDeploymentStatus",
    shortname = "cdep",
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.deployment"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".status.canaryWeight"}"#,
    printcolumn = r#"{"name":"Last","type":"string","jsonPath":".status.lastResult.result"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDeploymentSpec {
    /// The Deployment (in this namespace) whose versions are rolled out. The operator reads it
    /// as the template of the primary and canary Deployments and never changes it.
    #[schemars(length(min = 1, max = 253))]
    pub deployment: String,
    /// The ports the Services expose and the VirtualService splits (one HTTP route per port).
    #[schemars(length(min = 1), inner(range(min = 1, max = 65535)))]
    pub ports: Vec<i32>,
    /// The lowest acceptable success rate (non-5xx share of requests), 0 to 1.
    #[serde(default = "default_success_threshold")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub success_threshold: f64,
    /// How often the canary's success rate is measured (and its weight stepped), e.g. `30s`.
    #[serde(default = "default_measurement_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub measurement_interval: String,
    /// How long the canary must hold the threshold before it is promoted, e.g. `5m`.
    #[serde(default = "default_analysis_period")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub analysis_period: String,
    /// Percentage points of traffic moved to the canary per successful measurement.
    #[serde(default = "default_step_weight")]
    #[schemars(range(min = 1, max = 100))]
    pub step_weight: i32,
    /// The most traffic (percent) the canary gets during the analysis.
    #[serde(default = "default_max_weight")]
    #[schemars(range(min = 1, max = 100))]
    pub max_weight: i32,
}

fn default_success_threshold() -> f64 {
    0.99
}
fn default_measurement_interval() -> String {
    "30s".to_owned()
}
fn default_analysis_period() -> String {
    "5m".to_owned()
}
fn default_step_weight() -> i32 {
    10
}
fn default_max_weight() -> i32 {
    50
}

/// Where the rollout stands, next to the fields the host writes.
///
/// An analysis is running exactly when `startedAt` is set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDeploymentStatus {
    /// The Deployment serving the stable version: `<name>-primary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_deployment: Option<String>,
    /// The Deployment running the version under analysis: `<name>-canary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_deployment: Option<String>,
    /// The revision (pod template hash) the primary runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_revision: Option<String>,
    /// The revision under analysis, or last analysed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_revision: Option<String>,
    /// The revision last rolled back: not analysed again until the target changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_revision: Option<String>,
    /// The canary's share of the traffic, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_weight: Option<i32>,
    /// When the running analysis started; unset when no analysis runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// The latest measurement of the running (or last) analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_measurement: Option<Measurement>,
    /// How the last analysis ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<RolloutResult>,
    /// The `metadata.generation` the objects were last initialized for; a newer generation
    /// makes an idle Waiting phase initialize them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized_generation: Option<i64>,
    /// What the operator is doing, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The fields the wasmpilot host writes (phase, conditions, …).
    #[serde(flatten)]
    pub host: HostStatus,
}

/// One measurement of the canary's success rate.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    pub time: Time,
    /// The share of non-5xx responses; null when the canary got no measurable traffic.
    /// (Always serialized, so a merge patch replaces an earlier value with null.)
    pub success_rate: Option<f64>,
    /// The canary's weight while the measured requests were served.
    pub canary_weight: i32,
}

/// How an analysis ended.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutResult {
    /// `Promoted` or `RolledBack`.
    pub result: String,
    pub revision: String,
    pub time: Time,
    pub reason: String,
}

/// [`RolloutResult::result`] of a promotion.
pub const PROMOTED: &str = "Promoted";
/// [`RolloutResult::result`] of a rollback.
pub const ROLLED_BACK: &str = "RolledBack";

/// A status field a worker clears (sets to `null` in its merge patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusField {
    StartedAt,
    LastMeasurement,
}

impl StatusField {
    fn key(self) -> &'static str {
        match self {
            Self::StartedAt => "startedAt",
            Self::LastMeasurement => "lastMeasurement",
        }
    }
}

/// The status patch for a worker's outcome: the fields set in `status`, and `null` for each of
/// `clear` (JSON merge patch: `null` removes the field).
///
/// # Errors
/// If the status does not serialize (it always does: every field is plain data).
pub fn status_patch(
    status: &CanaryDeploymentStatus,
    clear: &[StatusField],
) -> Result<Value, serde_json::Error> {
    let mut patch = match serde_json::to_value(status)? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    for field in clear {
        patch.insert(field.key().to_owned(), Value::Null);
    }
    Ok(Value::Object(patch))
}

/// The analysis settings of a spec, parsed and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub success_threshold: f64,
    pub measurement_interval: Duration,
    pub analysis_period: Duration,
    pub step_weight: i32,
    pub max_weight: i32,
}

impl Settings {
    /// The shortest measurement interval: the host's clock has whole seconds.
    pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

    /// # Errors
    /// A field the CRD schema should have rejected (an older schema may not have): a threshold
    /// outside 0..=1, an unparsable duration or an interval under a second, weights outside 1..=100.
    pub fn from_spec(spec: &CanaryDeploymentSpec) -> Result<Self, InvalidSpec> {
        let threshold = spec.success_threshold;
        if !(0.0..=1.0).contains(&threshold) {
            return Err(InvalidSpec(format!(
                "spec.successThreshold is {threshold}; it must be between 0 and 1"
            )));
        }
        let duration = |field: &str, text: &str| {
            parse_duration(text).map_err(|err| InvalidSpec(format!("spec.{field}: {err}")))
        };
        let interval = duration("measurementInterval", &spec.measurement_interval)?;
        if interval < Self::MIN_INTERVAL {
            return Err(InvalidSpec(format!(
                "spec.measurementInterval is {}; it must be at least 1s",
                spec.measurement_interval
            )));
        }
        let period = duration("analysisPeriod", &spec.analysis_period)?;
        for (field, value) in [
            ("stepWeight", spec.step_weight),
            ("maxWeight", spec.max_weight),
        ] {
            if !(1..=100).contains(&value) {
                return Err(InvalidSpec(format!(
                    "spec.{field} is {value}; it must be between 1 and 100"
                )));
            }
        }
        Ok(Self {
            success_threshold: threshold,
            measurement_interval: interval,
            analysis_period: period,
            step_weight: spec.step_weight,
            max_weight: spec.max_weight,
        })
    }

    /// The canary's weight after one more step from `weight`, never above `maxWeight`.
    pub fn step_from(&self, weight: i32) -> i32 {
        weight.saturating_add(self.step_weight).min(self.max_weight)
    }
}

/// The CanaryDeployment CRD as YAML, as committed in `examples/canary/crds/canarydeployment.yaml`.
///
/// # Errors
/// If the CRD does not serialize (it always does; serde_yaml's API is fallible).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&CanaryDeployment::crd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> CanaryDeploymentSpec {
        serde_json::from_value(json!({ "deployment": "web", "ports": [8080] })).unwrap()
    }

    #[test]
    fn committed_crd_is_up_to_date() {
        let generated = crd_yaml().unwrap();
        let committed = include_str!("../../crds/canarydeployment.yaml");
        assert!(
            generated == committed,
            "examples/canary/crds/canarydeployment.yaml is stale; regenerate it with\n  \
             cargo run -p canary-types --bin canary-crdgen > examples/canary/crds/canarydeployment.yaml"
        );
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let crd = serde_json::to_value(CanaryDeployment::crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let props = &spec["properties"];
        assert_eq!(spec["required"], json!(["deployment", "ports"]));
        assert_eq!(props["ports"]["minItems"], 1);
        assert_eq!(props["ports"]["items"]["maximum"].as_f64(), Some(65535.0));
        assert_eq!(props["successThreshold"]["default"], 0.99);
        assert_eq!(props["successThreshold"]["maximum"].as_f64(), Some(1.0));
        assert_eq!(props["measurementInterval"]["default"], "30s");
        assert_eq!(props["measurementInterval"]["pattern"], DURATION_PATTERN);
        assert_eq!(props["analysisPeriod"]["default"], "5m");
        assert_eq!(props["stepWeight"]["default"], 10);
        assert_eq!(props["maxWeight"]["default"], 50);
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert!(version["subresources"]["status"].is_object());
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(columns, ["Target", "Phase", "Weight", "Last", "Age"]);
    }

    #[test]
    fn status_schema_keeps_host_fields_and_lists_ours() {
        let crd = serde_json::to_value(CanaryDeployment::crd()).unwrap();
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"];
        for field in [
            "primaryDeployment",
            "canaryDeployment",
            "primaryRevision",
            "canaryRevision",
            "failedRevision",
            "canaryWeight",
            "startedAt",
            "lastMeasurement",
            "lastResult",
            "initializedGeneration",
            "message",
            "phase",
            "observedGeneration",
            "conditions",
            "moduleDigest",
        ] {
            assert!(
                status.get(field).is_some(),
                "status.{field} missing from the CRD schema"
            );
        }
        let rate = &status["lastMeasurement"]["properties"]["successRate"];
        assert_eq!(rate["nullable"], true, "{rate}");
    }

    #[test]
    fn parses_with_defaults_and_host_status() {
        let cd: CanaryDeployment = serde_json::from_value(json!({
            "apiVersion": "canary.examples.io/v1", "kind": "CanaryDeployment",
            "metadata": { "name": "web", "namespace": "default" },
            "spec": { "deployment": "web", "ports": [8080] },
            "status": {
                "phase": "Waiting", "startedAt": "2025-01-01T00:00:00Z", "canaryWeight": 20,
                "lastMeasurement": { "time": "2025-01-01T00:00:30Z", "successRate": null, "canaryWeight": 10 }
            }
        }))
        .unwrap();
        assert_eq!(cd.spec.success_threshold, 0.99);
        assert_eq!(cd.spec.measurement_interval, "30s");
        let status = cd.status.unwrap();
        assert_eq!(status.host.phase.as_deref(), Some("Waiting"));
        assert_eq!(status.canary_weight, Some(20));
        assert_eq!(status.last_measurement.unwrap().success_rate, None);
    }

    #[test]
    fn settings_from_spec() {
        let settings = Settings::from_spec(&spec()).unwrap();
        assert_eq!(settings.measurement_interval, Duration::from_secs(30));
        assert_eq!(settings.analysis_period, Duration::from_secs(300));
        assert_eq!(settings.step_from(0), 10);
        assert_eq!(settings.step_from(45), 50);
        assert_eq!(settings.step_from(50), 50);

        let mut bad = spec();
        bad.success_threshold = 1.5;
        assert!(Settings::from_spec(&bad)
            .unwrap_err()
            .0
            .contains("between 0 and 1"));
        let mut bad = spec();
        bad.measurement_interval = "500ms".into();
        assert!(Settings::from_spec(&bad)
            .unwrap_err()
            .0
            .contains("at least 1s"));
        let mut bad = spec();
        bad.analysis_period = "soon".into();
        assert!(Settings::from_spec(&bad)
            .unwrap_err()
            .0
            .starts_with("spec.analysisPeriod"));
        let mut bad = spec();
        bad.step_weight = 0;
        assert!(Settings::from_spec(&bad)
            .unwrap_err()
            .0
            .contains("spec.stepWeight is 0"));
    }

    #[test]
    fn status_patches_clear_with_null() {
        let status = CanaryDeploymentStatus {
            canary_weight: Some(0),
            ..Default::default()
        };
        let patch = status_patch(
            &status,
            &[StatusField::StartedAt, StatusField::LastMeasurement],
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({ "canaryWeight": 0, "startedAt": null, "lastMeasurement": null })
        );
    }
}
