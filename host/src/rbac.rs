//! Least-privilege RBAC for one operator, derived from its declaration: read its inputs, write its
//! outputs, its resource, status and finalizers. `wasmpilot rbac` prints it; at load time the host
//! checks it holds each rule (SelfSubjectAccessReview) and names what is missing.

use crate::crd::{KindRef, WasmOperatorSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Verbs on one group/resource (resource may be `plural/subresource`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub group: String,
    pub resource: String,
    pub verbs: Vec<&'static str>,
}

/// Inputs: read from the host's watch caches (list + watch), and `get` for kubectl parity.
const READ: [&str; 3] = ["get", "list", "watch"];
/// Outputs: watched (list + watch), server-side applied (`patch`, plus `create` when the apply
/// creates the object), deleted when a phase no longer returns them. Never `update`d.
const WRITE: [&str; 6] = ["get", "list", "watch", "create", "patch", "delete"];

/// `group` and `plural` of a kind. Uses the plural the API server reports when known (`known`),
/// else kube's English pluralization (right for almost every kind).
fn group_plural(kind: &KindRef, known: &BTreeMap<KindRef, ApiResource>) -> (String, String) {
    let ar = known
        .get(kind)
        .cloned()
        .unwrap_or_else(|| ApiResource::from_gvk(&kind.gvk()));
    (ar.group, ar.plural)
}

/// The rules an operator needs, merged per group/resource, sorted.
pub fn rules_for(spec: &WasmOperatorSpec, known: &BTreeMap<KindRef, ApiResource>) -> Vec<Rule> {
    let mut verbs: BTreeMap<(String, String), Vec<&'static str>> = BTreeMap::new();
    let mut add = |group: String, resource: String, v: &[&'static str]| {
        let entry = verbs.entry((group, resource)).or_default();
        for verb in v {
            if !entry.contains(verb) {
                entry.push(verb);
            }
        }
    };
    let (g, plural) = group_plural(&spec.resource, known);
    // Watched by the controller, read again after a status conflict, and JSON-patched to add or
    // remove the finalizer.
    add(
        g.clone(),
        plural.clone(),
        &["get", "list", "watch", "patch"],
    );
    // Phase, Conditions and status info: merge patches only.
    add(g.clone(), format!("{plural}/status"), &["patch"]);
    // ownerReferences with blockOwnerDeletion on the outputs (OwnerReferencesPermissionEnforcement
    // checks `update` on the owner's finalizers subresource).
    add(g, format!("{plural}/finalizers"), &["update"]);
    for p in &spec.phases {
        for input in &p.inputs {
            let (g, r) = group_plural(&KindRef::new(&input.api_version, &input.kind), known);
            add(g, r, &READ);
        }
        for output in &p.outputs {
            let (g, r) = group_plural(output, known);
            add(g, r, &WRITE);
        }
    }
    for input in spec.finalizer.iter().flat_map(|f| &f.inputs) {
        let (g, r) = group_plural(&KindRef::new(&input.api_version, &input.kind), known);
        add(g, r, &READ);
    }
    verbs
        .into_iter()
        .map(|((group, resource), mut verbs)| {
            verbs.sort_unstable();
            Rule {
                group,
                resource,
                verbs,
            }
        })
        .collect()
}

/// A ClusterRole with these rules, and a binding to the host's ServiceAccount, as YAML-ready JSON.
pub fn role_manifests(
    operator: &str,
    rules: &[Rule],
    service_account: Option<(&str, &str)>,
) -> Vec<Value> {
    let name = format!("wasmpilot-operator-{operator}");
    let labels =
        json!({"app.kubernetes.io/managed-by": "wasmpilot", crate::OPERATOR_LABEL: operator});
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| json!({"apiGroups": [r.group], "resources": [r.resource], "verbs": r.verbs}))
        .collect();
    let mut docs = vec![json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels},
        "rules": rules,
    })];
    if let Some((ns, sa)) = service_account {
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": ns, "name": sa}],
        }));
    }
    docs
}

/// One permission the host lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {}/{}", self.verb, group, self.resource)
    }
}

/// How many access reviews are asked at once: a few connections, each reused, rather than one
/// round trip per verb one after the other (an operator needs ~25).
const REVIEWS_AT_ONCE: usize = 4;

/// Asks the API server, verb by verb, whether this host may do what the operator needs
/// (cluster-wide). Returns what is denied, in the order of `rules`.
pub async fn missing_permissions(
    client: &Client,
    rules: &[Rule],
) -> Result<Vec<Missing>, kube::Error> {
    use futures::{StreamExt, TryStreamExt};
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut asked: Vec<(SelfSubjectAccessReview, Missing)> = Vec::new();
    for rule in rules {
        let (resource, subresource) = match rule.resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s.to_string())),
            None => (rule.resource.clone(), None),
        };
        for verb in &rule.verbs {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(rule.group.clone()),
                        resource: Some(resource.clone()),
                        subresource: subresource.clone(),
                        verb: Some(verb.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let denied = Missing {
                verb,
                group: rule.group.clone(),
                resource: rule.resource.clone(),
            };
            asked.push((review, denied));
        }
    }
    futures::stream::iter(asked)
        .map(|(review, denied)| {
            let api = api.clone();
            async move {
                let answer = api.create(&PostParams::default(), &review).await?;
                let allowed = answer.status.is_some_and(|s| s.allowed);
                Ok::<_, kube::Error>((!allowed).then_some(denied))
            }
        })
        .buffered(REVIEWS_AT_ONCE)
        .try_filter_map(|missing| async move { Ok(missing) })
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{InputSpec, PhaseSpec};

    fn spec() -> WasmOperatorSpec {
        let phase = |name: &str, inputs: Vec<InputSpec>, outputs: Vec<KindRef>| PhaseSpec {
            name: name.into(),
            description: None,
            initial: name == "Syncing",
            is_final: false,
            module: None,
            inputs,
            outputs,
            next: vec![],
            limits: None,
            queries: vec![],
            randomness: None,
            shadow: None,
        };
        let deployments = InputSpec {
            name: "deployments".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            match_labels: Default::default(),
            match_expressions: Vec::new(),
            selector_from: None,
            owned: false,
            fields: Vec::new(),
        };
        WasmOperatorSpec {
            resource: KindRef::new("examples.io/v1", "AutoRoute"),
            phases: vec![
                phase(
                    "Syncing",
                    vec![deployments.clone()],
                    vec![
                        KindRef::new("v1", "Service"),
                        KindRef::new("networking.istio.io/v1alpha3", "Gateway"),
                    ],
                ),
                phase("Ready", vec![deployments], vec![]),
            ],
            finalizer: None,
            resync_interval: None,
            prometheus: None,
            history_limit: None,
        }
    }

    #[test]
    fn rules_cover_resource_inputs_and_outputs_and_nothing_else() {
        let rules = rules_for(&spec(), &BTreeMap::new());
        let find = |g: &str, r: &str| {
            rules
                .iter()
                .find(|x| x.group == g && x.resource == r)
                .map(|x| x.verbs.clone())
        };
        assert_eq!(
            find("examples.io", "autoroutes"),
            Some(vec!["get", "list", "patch", "watch"]),
            "the resource is patched (finalizers), never updated"
        );
        assert_eq!(
            find("examples.io", "autoroutes/status"),
            Some(vec!["patch"]),
            "status is merge-patched only"
        );
        assert_eq!(
            find("examples.io", "autoroutes/finalizers"),
            Some(vec!["update"])
        );
        assert_eq!(
            find("apps", "deployments"),
            Some(vec!["get", "list", "watch"]),
            "inputs are read-only, listed once"
        );
        assert_eq!(
            find("", "services"),
            Some(vec!["create", "delete", "get", "list", "patch", "watch"]),
            "outputs are server-side applied and deleted, never updated"
        );
        assert_eq!(
            find("networking.istio.io", "gateways").map(|v| v.len()),
            Some(6)
        );
        assert_eq!(rules.len(), 6);
    }

    #[test]
    fn manifests_bind_the_role_to_the_service_account() {
        let rules = rules_for(&spec(), &BTreeMap::new());
        let docs = role_manifests("autoroute", &rules, Some(("wasmpilot-system", "wasmpilot")));
        assert_eq!(docs[0]["metadata"]["name"], "wasmpilot-operator-autoroute");
        assert_eq!(docs[1]["subjects"][0]["name"], "wasmpilot");
        assert_eq!(docs[1]["roleRef"]["name"], "wasmpilot-operator-autoroute");
        let m = Missing {
            verb: "list",
            group: "apps".into(),
            resource: "deployments".into(),
        };
        assert_eq!(m.to_string(), "list apps/deployments");
    }
}
