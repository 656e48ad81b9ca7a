//! Least-privilege RBAC for one operator, derived from its declaration: read its inputs, write its
//! outputs, its resource, status and finalizers. `wasmpilot rbac` prints it; at load time the host
//! checks it holds each rule (one SelfSubjectRulesReview, then a SelfSubjectAccessReview for every
//! verb the rules do not show granted) and names what is missing.

use crate::crd::{KindRef, WasmOperatorSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, ResourceRule, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
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

/// The namespace the rules review is asked for: no namespace can have this name (`:` is not
/// allowed in one), so no RoleBinding can exist in it and the review lists exactly what
/// cluster-wide bindings grant — the scope the host works in (it watches every namespace).
const CLUSTER_SCOPE: &str = "wasmpilot:cluster-wide";

/// One verb on one group/resource the operator needs.
struct Needed {
    group: String,
    resource: String,
    subresource: Option<String>,
    verb: &'static str,
}

impl Needed {
    fn missing(&self) -> Missing {
        let resource = match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        };
        Missing {
            verb: self.verb,
            group: self.group.clone(),
            resource,
        }
    }

    /// Whether one RBAC rule grants this verb on every object of the resource, matched as the
    /// API server's RBAC authorizer matches (`*` wildcards, `*/sub` for any resource's
    /// subresource); a rule limited to `resourceNames` grants no list, watch or create.
    fn granted_by(&self, rule: &ResourceRule) -> bool {
        let has = |list: &Option<Vec<String>>, value: &str| {
            list.iter().flatten().any(|v| v == "*" || v == value)
        };
        let resource_matches = rule
            .resources
            .iter()
            .flatten()
            .any(|r| match &self.subresource {
                None => r == "*" || *r == self.resource,
                Some(sub) => {
                    r == "*" || *r == format!("{}/{sub}", self.resource) || *r == format!("*/{sub}")
                }
            });
        rule.verbs.iter().any(|v| v == "*" || v == self.verb)
            && has(&rule.api_groups, &self.group)
            && resource_matches
            && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
    }

    fn review(&self) -> SelfSubjectAccessReview {
        SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(self.group.clone()),
                    resource: Some(self.resource.clone()),
                    subresource: self.subresource.clone(),
                    verb: Some(self.verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// What cluster-wide bindings grant this host, from one SelfSubjectRulesReview; `None` when the
/// answer cannot settle anything on its own (the review failed, or an authorizer besides RBAC
/// could not list its rules: `incomplete`).
async fn cluster_wide_rules(client: &Client) -> Option<Vec<ResourceRule>> {
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(CLUSTER_SCOPE.into()),
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) => {
            let status = answer.status?;
            if status.incomplete {
                tracing::debug!(
                    error = status.evaluation_error.as_deref().unwrap_or(""),
                    "the rules review is incomplete: asking an access review per verb"
                );
                return None;
            }
            Some(status.resource_rules)
        }
        Err(e) => {
            tracing::debug!(error = %e, "no rules review: asking an access review per verb");
            None
        }
    }
}

/// Whether this host may do what the operator needs (cluster-wide). One rules review answers
/// the usual case in one round trip; every verb it does not show granted is asked with its own
/// access review (the API server's authoritative answer, whatever the authorizer), so a denial
/// is never inferred from the rules alone. Returns what is denied, in the order of `rules`.
pub async fn missing_permissions(
    client: &Client,
    rules: &[Rule],
) -> Result<Vec<Missing>, kube::Error> {
    use futures::{StreamExt, TryStreamExt};
    let needed: Vec<Needed> = rules
        .iter()
        .flat_map(|rule| {
            let (resource, subresource) = match rule.resource.split_once('/') {
                Some((r, s)) => (r.to_string(), Some(s.to_string())),
                None => (rule.resource.clone(), None),
            };
            rule.verbs.iter().map(move |verb| Needed {
                group: rule.group.clone(),
                resource: resource.clone(),
                subresource: subresource.clone(),
                verb,
            })
        })
        .collect();
    let granted = cluster_wide_rules(client).await.unwrap_or_default();
    let to_ask: Vec<Needed> = needed
        .into_iter()
        .filter(|n| !granted.iter().any(|rule| n.granted_by(rule)))
        .collect();
    tracing::debug!(
        access_reviews = to_ask.len(),
        "permissions the rules review did not show granted"
    );
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    futures::stream::iter(to_ask)
        .map(|needed| {
            let api = api.clone();
            async move {
                let answer = api.create(&PostParams::default(), &needed.review()).await?;
                let allowed = answer.status.is_some_and(|s| s.allowed);
                Ok::<_, kube::Error>((!allowed).then(|| needed.missing()))
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

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> ResourceRule {
        let v = |x: &[&str]| x.iter().map(ToString::to_string).collect::<Vec<_>>();
        ResourceRule {
            api_groups: Some(v(groups)),
            resources: Some(v(resources)),
            verbs: v(verbs),
            resource_names: None,
        }
    }

    fn needed(group: &str, resource: &str, verb: &'static str) -> Needed {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s.to_string())),
            None => (resource.to_string(), None),
        };
        Needed {
            group: group.into(),
            resource,
            subresource,
            verb,
        }
    }

    #[test]
    fn rules_grant_as_the_rbac_authorizer_matches() {
        let list_deployments = needed("apps", "deployments", "list");
        assert!(list_deployments.granted_by(&rule(&["apps"], &["deployments"], &["list"])));
        assert!(list_deployments.granted_by(&rule(&["*"], &["*"], &["*"])));
        assert!(!list_deployments.granted_by(&rule(&["apps"], &["deployments"], &["get"])));
        assert!(!list_deployments.granted_by(&rule(&[""], &["deployments"], &["list"])));
        assert!(!list_deployments.granted_by(&rule(&["apps"], &["replicasets"], &["list"])));
        let mut named = rule(&["apps"], &["deployments"], &["list"]);
        named.resource_names = Some(vec!["one".into()]);
        assert!(
            !list_deployments.granted_by(&named),
            "a rule for named objects does not grant listing them all"
        );
        let status = needed("examples.io", "autoroutes/status", "patch");
        assert!(
            !status.granted_by(&rule(&["examples.io"], &["autoroutes"], &["patch"])),
            "the resource does not grant its subresource"
        );
        assert!(status.granted_by(&rule(&["examples.io"], &["autoroutes/status"], &["patch"])));
        assert!(status.granted_by(&rule(&["examples.io"], &["*/status"], &["patch"])));
        assert!(
            !needed("examples.io", "autoroutes", "patch").granted_by(&rule(
                &["examples.io"],
                &["*/status"],
                &["patch"]
            )),
            "`*/status` grants no resource itself"
        );
    }

    mod against_the_api_server {
        use super::*;
        use crate::mock_api_server::{failure, scripted, Exchange};
        use http::{Method, StatusCode};

        const RULES: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
        const ACCESS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

        fn rules_review(status: StatusCode, answer: Value) -> Exchange {
            Exchange::new(Method::POST, RULES, status, answer).checking(|_, body| {
                assert_eq!(body["spec"]["namespace"], CLUSTER_SCOPE);
            })
        }

        fn granting(rules: Value, incomplete: bool) -> Value {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                   "spec": {}, "status": {"resourceRules": rules, "nonResourceRules": [],
                                          "incomplete": incomplete}})
        }

        /// An access review for `verb` on `resource`, answered `allowed`.
        fn access(resource: &'static str, verb: &'static str, allowed: bool) -> Exchange {
            Exchange::new(
                Method::POST,
                ACCESS,
                StatusCode::CREATED,
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                       "spec": {}, "status": {"allowed": allowed}}),
            )
            .checking(move |_, body| {
                let asked = &body["spec"]["resourceAttributes"];
                assert_eq!(
                    (asked["resource"].as_str(), asked["verb"].as_str()),
                    (Some(resource), Some(verb))
                );
            })
        }

        fn two_rules() -> Vec<Rule> {
            vec![
                Rule {
                    group: "apps".into(),
                    resource: "deployments".into(),
                    verbs: vec!["list", "watch"],
                },
                Rule {
                    group: "".into(),
                    resource: "services".into(),
                    verbs: vec!["patch"],
                },
            ]
        }

        #[tokio::test]
        async fn rules_that_grant_everything_need_no_access_review() {
            let (client, server) = scripted(vec![rules_review(
                StatusCode::CREATED,
                granting(
                    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
                    false,
                ),
            )]);
            let missing = missing_permissions(&client, &two_rules())
                .await
                .expect("reviews");
            assert!(missing.is_empty());
            drop(client);
            server.await.expect("exactly the scripted requests");
        }

        #[tokio::test]
        async fn what_the_rules_do_not_show_is_asked_verb_by_verb() {
            let (client, server) = scripted(vec![
                rules_review(
                    StatusCode::CREATED,
                    granting(
                        json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]),
                        false,
                    ),
                ),
                access("deployments", "watch", true),
                access("services", "patch", false),
            ]);
            let missing = missing_permissions(&client, &two_rules())
                .await
                .expect("reviews");
            assert_eq!(
                missing.iter().map(ToString::to_string).collect::<Vec<_>>(),
                ["patch core/services"],
                "a denial comes from the access review, never from the rules alone"
            );
            drop(client);
            server.await.expect("exactly the scripted requests");
        }

        #[tokio::test]
        async fn an_incomplete_or_refused_rules_review_falls_back_to_access_reviews() {
            let every_verb = |allowed: bool| {
                vec![
                    access("deployments", "list", allowed),
                    access("deployments", "watch", allowed),
                    access("services", "patch", allowed),
                ]
            };
            let mut script = vec![rules_review(
                StatusCode::CREATED,
                granting(
                    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
                    true,
                ),
            )];
            script.extend(every_verb(true));
            let (client, server) = scripted(script);
            let missing = missing_permissions(&client, &two_rules())
                .await
                .expect("reviews");
            assert!(missing.is_empty(), "an incomplete review settles nothing");
            drop(client);
            server.await.expect("exactly the scripted requests");

            let mut script = vec![rules_review(
                StatusCode::FORBIDDEN,
                failure(403, "Forbidden", "selfsubjectrulesreviews is forbidden"),
            )];
            script.extend(every_verb(false));
            let (client, server) = scripted(script);
            let missing = missing_permissions(&client, &two_rules())
                .await
                .expect("reviews");
            assert_eq!(missing.len(), 3);
            drop(client);
            server.await.expect("exactly the scripted requests");
        }
    }
}
