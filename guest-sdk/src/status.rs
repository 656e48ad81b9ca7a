//! The `.status` fields the host writes, for a custom resource's status type to include.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `.status` fields the wasmpilot host writes on every resource it manages.
///
/// Flatten it into your status type so that the CRD schema generated from it
/// (`kube::CustomResourceExt::crd()`) contains these fields: the API server prunes
/// status fields a structural schema does not list, and the host's writes would vanish.
///
/// ```no_run
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use wasmpilot_guest::HostStatus;
///
/// #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// #[serde(rename_all = "camelCase")]
/// pub struct MyStatus {
///     #[serde(default)]
///     pub synced_deployments: Vec<String>,
///     #[serde(flatten)]
///     pub host: HostStatus,
/// }
/// ```
///
/// Workers may read these fields; any a worker sends back in a status patch are dropped.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    /// The current phase, set by the host from the worker's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The `.metadata.generation` the host last ran a worker for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions set by the host: `Synced` (True after a worker's decision was applied; False
    /// with the reason, e.g. `WorkerFatalError`, and message of the last failure).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The digest (`sha256:…`) of the component that decided the current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_digest: Option<String>,
    /// The last phase transitions (oldest first; the WasmOperator's `historyLimit`, default
    /// 10): which component decided each, from which request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Transition>,
}

/// One phase transition as the host recorded it: which code decided it, and from what.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub from: String,
    pub to: String,
    /// When the host wrote it (RFC 3339).
    pub time: String,
    /// The resource's `.metadata.generation` the worker saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The component that decided (`sha256:…`); absent when the host itself moved the resource
    /// (a spec change after a final phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The sha256 of the exact request the worker received (`sha256:…`): replaying that
    /// request against `module` gives the same decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_hash: Option<String>,
    /// Outputs applied and pruned by this decision.
    #[serde(default)]
    pub applied: u32,
    #[serde(default)]
    pub pruned: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        synced: Vec<String>,
        #[serde(flatten)]
        host: HostStatus,
    }

    #[test]
    fn default_serializes_to_nothing() {
        assert_eq!(
            serde_json::to_value(HostStatus::default()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn flattened_schema_lists_host_fields() {
        let schema = serde_json::to_value(schemars::schema_for!(Status)).unwrap();
        let properties = schema["properties"].as_object().unwrap();
        for field in [
            "synced",
            "phase",
            "observedGeneration",
            "conditions",
            "moduleDigest",
            "history",
        ] {
            assert!(
                properties.contains_key(field),
                "{field} missing: {schema:#}"
            );
        }
    }

    #[test]
    fn reads_host_fields() {
        let status: Status = serde_json::from_value(json!({
            "synced": ["a"], "phase": "Ready", "observedGeneration": 3, "moduleDigest": "sha256:ab"
        }))
        .unwrap();
        assert_eq!(status.host.phase.as_deref(), Some("Ready"));
        assert_eq!(status.host.observed_generation, Some(3));
    }
}
