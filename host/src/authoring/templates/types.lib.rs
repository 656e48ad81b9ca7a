//! The {{kind}} custom resource: the spec users write and the status the workers record, and
//! (in `phases`) the typed API of its phases. Edit the two structs below, then regenerate the
//! CRD and the typed API with `wasmpilot generate .` (a test fails while either is stale).

/// Written by `wasmpilot generate` from operator.yaml: never edit it, generate again.
pub mod phases;

use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wasmpilot_guest::HostStatus;

/// The desired state of {{a_kind}}: the fields users set.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "{{group}}",
    version = "{{version}}",
    kind = "{{kind}}",
    plural = "{{plural}}",
    namespaced,
    status = "{{kind}}Status",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Spec {
    // Add the fields users set, e.g.
    // /// Which Deployments to route to.
    // pub deployment_selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
}

/// The observed state of {{a_kind}}: what the workers record (their status info) and the
/// fields the wasmpilot host writes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Status {
    // Add what the workers record, e.g.
    // #[serde(default)]
    // pub synced_deployments: Vec<String>,
    /// The fields the wasmpilot host writes (phase, observedGeneration, conditions, moduleDigest).
    #[serde(flatten)]
    pub host: HostStatus,
}

/// The {{kind}} CRD as YAML, as committed in `crds/{{crd_file}}`.
///
/// # Errors
/// If the CRD does not serialize (it always does; serde_yaml's API is fallible).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&{{kind}}::crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crd_is_up_to_date() {
        let generated = crd_yaml().unwrap();
        let committed = include_str!("../../crds/{{crd_file}}");
        assert!(
            generated == committed,
            "crds/{{crd_file}} is stale; regenerate it with\n  wasmpilot generate ."
        );
    }

    #[test]
    fn status_schema_keeps_host_fields() {
        let crd = serde_json::to_value({{kind}}::crd()).unwrap();
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"];
        for field in ["phase", "observedGeneration", "conditions", "moduleDigest"] {
            assert!(
                status.get(field).is_some(),
                "status.{field} missing from the CRD schema: keep `#[serde(flatten)] host: HostStatus`"
            );
        }
    }
}
