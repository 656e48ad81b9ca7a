//! The MyOwnShell custom resource, and the Deployment it stands for: built by Syncing,
//! compared with what is in the cluster by Ready.

pub mod deployment;
pub mod phases;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wasmpilot_guest::HostStatus;

pub use deployment::{desired_deployment, differences, find_deployment, InvalidSpec};

/// The most pods one MyOwnShell may ask for (also the CRD schema's maximum of `spec.size`).
pub const MAX_SIZE: i32 = 10;

/// The image used when `spec.image` is not set.
pub const DEFAULT_IMAGE: &str = "busybox:1.36";

fn default_image() -> String {
    DEFAULT_IMAGE.to_owned()
}

/// A Deployment of `size` busybox pods to `kubectl exec` into, as in the operator-sdk
/// "my first operator" tutorial.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "shell.examples.io",
    version = "v1",
    kind = "MyOwnShell",
    namespaced,
    status = "MyOwnShellStatus",
    shortname = "mos",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MyOwnShellSpec {
    /// How many shell pods to run (the Deployment's replicas), 0 to 10.
    #[schemars(range(min = 0, max = 10))]
    pub size: i32,
    /// The container image of the shell pods; it must have `sh` and `sleep`.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1))]
    pub image: String,
}

/// What the operator did and observed, next to the fields the host writes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MyOwnShellStatus {
    /// The Deployment that runs the shell pods (named after the MyOwnShell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// The `spec.size` the Deployment was last applied with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_size: Option<i32>,
    /// Ready pods of the Deployment, as last observed in phase Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// When the finalizer worker ran (the resource was being deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized_at: Option<Time>,
    /// The fields the wasmpilot host writes (phase, conditions, …).
    #[serde(flatten)]
    pub host: HostStatus,
}

/// The MyOwnShell CRD as YAML, as committed in `examples/myownshell/crds/myownshell.yaml`.
///
/// # Errors
/// If the CRD does not serialize (it always does; serde_yaml's API is fallible).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&MyOwnShell::crd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn committed_crd_is_up_to_date() {
        let generated = crd_yaml().unwrap();
        let committed = include_str!("../../crds/myownshell.yaml");
        assert!(
            generated == committed,
            "examples/myownshell/crds/myownshell.yaml is stale; regenerate it with\n  \
             cargo run -p myownshell-types --bin myownshell-crdgen > examples/myownshell/crds/myownshell.yaml"
        );
    }

    #[test]
    fn schema_bounds_size_and_defaults_image() {
        let crd = serde_json::to_value(MyOwnShell::crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let size = &spec["properties"]["size"];
        assert_eq!(size["minimum"].as_f64(), Some(0.0));
        assert_eq!(size["maximum"].as_f64(), Some(f64::from(MAX_SIZE)));
        assert_eq!(spec["properties"]["image"]["default"], DEFAULT_IMAGE);
        assert_eq!(spec["required"], json!(["size"]));
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert!(version["subresources"]["status"].is_object());
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(columns, ["Size", "Ready", "Phase", "Age"]);
    }

    #[test]
    fn status_schema_keeps_host_fields() {
        let crd = serde_json::to_value(MyOwnShell::crd()).unwrap();
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"];
        for field in [
            "deployment",
            "syncedSize",
            "readyReplicas",
            "finalizedAt",
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
    }

    #[test]
    fn parses_a_shell_without_image_and_with_host_status() {
        let shell: MyOwnShell = serde_json::from_value(json!({
            "apiVersion": "shell.examples.io/v1", "kind": "MyOwnShell",
            "metadata": { "name": "sample", "namespace": "default" },
            "spec": { "size": 3 },
            "status": { "phase": "Ready", "syncedSize": 3, "finalizedAt": "2025-01-01T00:00:00Z" }
        }))
        .unwrap();
        assert_eq!(shell.spec.image, DEFAULT_IMAGE);
        let status = shell.status.unwrap();
        assert_eq!(status.synced_size, Some(3));
        assert_eq!(status.host.phase.as_deref(), Some("Ready"));
        assert!(status.finalized_at.is_some());
    }
}
