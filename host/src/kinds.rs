//! Resolves `apiVersion` + `kind` pairs to API resources through discovery.
//! Kinds are looked up one group-version at a time (aggregated discovery is absent on older servers).

use crate::crd::KindRef;
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiCapabilities, ApiResource, Scope};
use kube::Client;

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
}

/// What to do about a kind the API server does not serve.
pub const HINT_NOT_SERVED: &str = "apply its CRD (kubectl apply -f <operator>/crds/, or wasmpilot deploy <dir>) and check the apiVersion and kind spelling";

/// Discovery could not find a kind.
#[derive(Debug, thiserror::Error)]
#[error(
    "{field}: {api_version} {kind} is not served by the API server ({source}); {HINT_NOT_SERVED}"
)]
pub struct KindNotServed {
    pub field: String,
    pub api_version: String,
    pub kind: String,
    #[source]
    pub source: kube::Error,
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

/// Looks one kind up; `field` names where it was declared, for the error message.
pub async fn resolve(
    client: &Client,
    kind: &KindRef,
    field: &str,
) -> Result<ResolvedKind, KindNotServed> {
    let (api, caps): (ApiResource, ApiCapabilities) = discovery::pinned_kind(client, &kind.gvk())
        .await
        .map_err(|source| KindNotServed {
            field: field.to_string(),
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
            source,
        })?;
    Ok(ResolvedKind {
        kind: kind.clone(),
        api,
        namespaced: caps.scope == Scope::Namespaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_served_says_what_to_do() {
        let e = KindNotServed {
            field: "spec.resource".into(),
            api_version: "examples.io/v1".into(),
            kind: "AutoRoute".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        let msg = e.to_string();
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
