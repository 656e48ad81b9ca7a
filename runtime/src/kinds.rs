//! Resolves `apiVersion` + `kind` pairs to API resources through discovery, one request per
//! group-version (not aggregated discovery: on a cluster with many CRDs its one answer is large).

use crate::crd::KindRef;
use kube::core::{GroupVersion, GroupVersionKind};
use kube::discovery::{self, ApiCapabilities, ApiGroup, ApiResource, Scope};
use kube::Client;
use std::collections::HashMap;

/// A kind the API server serves, with what the host needs to talk to it.
#[derive(Clone, Debug)]
pub struct ResolvedKind {
    pub kind: KindRef,
    pub api: ApiResource,
    pub namespaced: bool,
}

impl ResolvedKind {
    /// An Api for this kind: scoped to `namespace` when the kind is namespaced and one is given,
    /// else cluster-wide.
    pub fn api(
        &self,
        client: &Client,
        namespace: Option<&str>,
    ) -> kube::Api<kube::api::DynamicObject> {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => kube::Api::namespaced_with(client.clone(), ns, &self.api),
            _ => kube::Api::all_with(client.clone(), &self.api),
        }
    }

    fn new(kind: &KindRef, (api, caps): (ApiResource, ApiCapabilities)) -> Self {
        ResolvedKind {
            kind: kind.clone(),
            api,
            namespaced: caps.scope == Scope::Namespaced,
        }
    }
}

/// What to do about a kind the API server does not serve.
pub const HINT_NOT_SERVED: &str = "apply its CRD (kubectl apply -f <operator>/crds/, or wasmpilot deploy <dir>) and check the apiVersion and kind spelling";

/// Discovery could not find a kind.
#[derive(Debug, thiserror::Error)]
#[error(
    "{field}: {api_version} {kind} is not served by the API server ({cause}); {HINT_NOT_SERVED}"
)]
pub struct KindNotServed {
    pub field: String,
    pub api_version: String,
    pub kind: String,
    #[source]
    pub cause: NotServedCause,
}

/// Why discovery yielded no kind.
#[derive(Debug, thiserror::Error)]
pub enum NotServedCause {
    /// The server answered: it serves no such group-version, or no such kind in it.
    #[error("discovery lists no such kind")]
    Absent,
    /// Asking failed (unreachable, forbidden, …).
    #[error("discovery failed: {}", crate::error_report::api_text(.0))]
    Request(#[source] kube::Error),
}

impl NotServedCause {
    fn of(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) if status.code == 404 => NotServedCause::Absent,
            kube::Error::Discovery(_) => NotServedCause::Absent,
            other => NotServedCause::Request(other),
        }
    }
}

impl KindRef {
    /// Parses `apiVersion` into a group/version/kind.
    pub fn gvk(&self) -> GroupVersionKind {
        let (group, version) = match self.api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), self.api_version.clone()),
        };
        GroupVersionKind::gvk(&group, &version, &self.kind)
    }

    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }
}

impl std::fmt::Display for KindRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// Looks one kind up (one request); `field` names where it was declared, for the error message.
pub async fn resolve(
    client: &Client,
    kind: &KindRef,
    field: &str,
) -> Result<ResolvedKind, KindNotServed> {
    discovery::pinned_kind(client, &kind.gvk())
        .await
        .map(|found| ResolvedKind::new(kind, found))
        .map_err(|e| not_served(kind, field, NotServedCause::of(e)))
}

fn not_served(kind: &KindRef, field: &str, cause: NotServedCause) -> KindNotServed {
    KindNotServed {
        field: field.to_string(),
        api_version: kind.api_version.clone(),
        kind: kind.kind.clone(),
        cause,
    }
}

impl KindNotServed {
    /// `kind`, declared at `field`, is not listed by discovery.
    pub fn absent(kind: &KindRef, field: &str) -> Self {
        not_served(kind, field, NotServedCause::Absent)
    }
}

/// Looks many kinds up, one request per group-version they span. `kinds` pairs each kind with
/// the field that declared it; the first kind not served fails.
pub async fn resolve_all(
    client: &Client,
    kinds: &[(KindRef, String)],
) -> Result<Vec<ResolvedKind>, KindNotServed> {
    let mut by_version: HashMap<GroupVersion, ApiGroup> = HashMap::new();
    let mut resolved = Vec::with_capacity(kinds.len());
    for (kind, field) in kinds {
        let gvk = kind.gvk();
        let gv = GroupVersion::gv(&gvk.group, &gvk.version);
        if !by_version.contains_key(&gv) {
            let group = discovery::pinned_group(client, &gv)
                .await
                .map_err(|e| not_served(kind, field, NotServedCause::of(e)))?;
            by_version.insert(gv.clone(), group);
        }
        let found = by_version.get(&gv).and_then(|group| {
            group
                .versioned_resources(&gvk.version)
                .into_iter()
                .find(|(api, _)| api.kind == gvk.kind)
        });
        match found {
            Some(found) => resolved.push(ResolvedKind::new(kind, found)),
            None => return Err(not_served(kind, field, NotServedCause::Absent)),
        }
    }
    Ok(resolved)
}

/// Kubernetes' own cluster-scoped kinds, by API group and kind (scope does not change between
/// versions of a kind). Offline tools use this where no API server can be asked.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("scheduling.k8s.io", "PriorityClass"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("policy", "PodSecurityPolicy"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
    ("wasmpilot.io", "WasmOperator"),
];

/// Kubernetes' own namespaced kinds that operators commonly read or write.
const NAMESPACED: &[(&str, &str)] = &[
    ("", "Pod"),
    ("", "Service"),
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "PersistentVolumeClaim"),
    ("", "Event"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("", "PodTemplate"),
    ("", "ReplicationController"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("apps", "ControllerRevision"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("policy", "PodDisruptionBudget"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("events.k8s.io", "Event"),
];

/// Whether a Kubernetes kind is namespaced, from the built-in table; `None` for kinds it does
/// not know (custom resources, kinds of add-ons).
pub fn builtin_namespaced(kind: &KindRef) -> Option<bool> {
    let gvk = kind.gvk();
    let key = (gvk.group.as_str(), gvk.kind.as_str());
    if CLUSTER_SCOPED.contains(&key) {
        Some(false)
    } else if NAMESPACED.contains(&key) {
        Some(true)
    } else {
        None
    }
}

/// The scope of every kind (each served version) defined by a CustomResourceDefinition among
/// `docs` (other documents are skipped).
pub fn crd_scopes(docs: &[serde_json::Value]) -> std::collections::HashMap<KindRef, bool> {
    let mut scopes = std::collections::HashMap::new();
    for doc in docs {
        if doc["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let spec = &doc["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            continue;
        };
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        let versions = spec["versions"].as_array().into_iter().flatten();
        let names = versions
            .filter_map(|v| v["name"].as_str())
            .chain(spec["version"].as_str());
        for version in names {
            scopes.insert(KindRef::new(format!("{group}/{version}"), kind), namespaced);
        }
    }
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_served_says_what_to_do() {
        let e = KindNotServed::absent(
            &KindRef::new("examples.io/v1", "AutoRoute"),
            "spec.resource",
        );
        let msg = e.to_string();
        assert!(msg.contains("(discovery lists no such kind)"), "{msg}");
        assert!(
            msg.starts_with(
                "spec.resource: examples.io/v1 AutoRoute is not served by the API server"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("kubectl apply -f <operator>/crds/, or wasmpilot deploy <dir>"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "conditions keep one line: {msg}");
    }

    #[test]
    fn a_404_means_absent_and_other_failures_keep_their_cause() {
        let not_found = kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404),
        ));
        assert!(matches!(
            NotServedCause::of(not_found),
            NotServedCause::Absent
        ));
        let forbidden = kube::Error::Api(Box::new(
            kube::core::Status::failure("forbidden", "Forbidden").with_code(403),
        ));
        let cause = NotServedCause::of(forbidden);
        assert!(matches!(cause, NotServedCause::Request(_)));
        assert!(
            cause.to_string().starts_with("discovery failed: "),
            "{cause}"
        );
    }

    #[test]
    fn builtin_scopes_and_crd_scopes() {
        let cluster_role = KindRef::new("rbac.authorization.k8s.io/v1", "ClusterRole");
        assert_eq!(builtin_namespaced(&cluster_role), Some(false));
        assert_eq!(
            builtin_namespaced(&KindRef::new("v1", "Namespace")),
            Some(false)
        );
        assert_eq!(
            builtin_namespaced(&KindRef::new("v1", "Service")),
            Some(true)
        );
        assert_eq!(
            builtin_namespaced(&KindRef::new("apps/v1", "Deployment")),
            Some(true)
        );
        assert_eq!(
            builtin_namespaced(&KindRef::new("example.io/v1", "Thing")),
            None
        );
        let docs: Vec<serde_json::Value> = vec![
            serde_json::json!({"kind": "CustomResourceDefinition", "spec": {
                "group": "example.io", "scope": "Cluster", "names": {"kind": "Tenant"},
                "versions": [{"name": "v1"}, {"name": "v1beta1"}]}}),
            serde_json::json!({"kind": "CustomResourceDefinition", "spec": {
                "group": "example.io", "scope": "Namespaced", "names": {"kind": "Route"},
                "versions": [{"name": "v1"}]}}),
            serde_json::json!({"kind": "ConfigMap"}),
        ];
        let scopes = crd_scopes(&docs);
        assert!(!scopes[&KindRef::new("example.io/v1beta1", "Tenant")]);
        assert!(scopes[&KindRef::new("example.io/v1", "Route")]);
        assert_eq!(scopes.len(), 3);
    }

    #[test]
    fn core_and_grouped_api_versions_parse() {
        let core = KindRef::new("v1", "Service").gvk();
        assert_eq!((core.group.as_str(), core.version.as_str()), ("", "v1"));
        let apps = KindRef::new("apps/v1", "Deployment").gvk();
        assert_eq!(
            (
                apps.group.as_str(),
                apps.version.as_str(),
                apps.kind.as_str()
            ),
            ("apps", "v1", "Deployment")
        );
    }
}
