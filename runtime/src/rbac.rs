//! Least-privilege RBAC per operator, derived from its declaration: its own ServiceAccount and
//! what that account may do (read its inputs, write its outputs, its resource's status and
//! finalizers, Events), what the host reads on its behalf, and the right to act as it.
//! `wasmpilot rbac` prints it; at load time the host asks the API server what an account is
//! granted (one rules review, then an access review for every verb the rules do not show).

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
    /// Whether the resource lives in namespaces (a namespaced grant can cover it); kinds the
    /// API server was not asked about count as namespaced.
    pub namespaced: bool,
}

/// Inputs: read from the host's watch caches (list + watch), and `get` for kubectl parity.
const READ: [&str; 3] = ["get", "list", "watch"];
/// Outputs: watched (list + watch), server-side applied (`patch`, plus `create` when the apply
/// creates the object), deleted when a phase no longer returns them. Never `update`d.
const WRITE: [&str; 6] = ["get", "list", "watch", "create", "patch", "delete"];

/// The namespace of the operators' ServiceAccounts unless the host is told another.
pub const DEFAULT_IDENTITY_NAMESPACE: &str = "wasmpilot-system";

/// The ServiceAccount an operator acts as: `op-<operator>`.
pub fn account_name(operator: &str) -> String {
    format!("op-{operator}")
}

/// The user name the API server gives the operator's ServiceAccount in `namespace` (what the
/// host impersonates, and what the audit log names).
pub fn account_user(namespace: &str, operator: &str) -> String {
    format!(
        "system:serviceaccount:{namespace}:{}",
        account_name(operator)
    )
}

/// A kind as the API server serves it: group, version, plural, and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct KnownKind {
    pub api: ApiResource,
    pub namespaced: bool,
}

/// How long `wasmpilot rbac` waits for the cluster to name one kind's plural and scope.
const DISCOVERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the cluster serves of each kind `spec` names (plural, scope), for [`grant_manifests`],
/// and a note for each it could not tell: that kind's plural is then guessed from its name and
/// it is taken as namespaced (a CRD whose plural is not the English one would get grants that
/// grant nothing). After a failed request, nothing more is asked.
pub async fn served_kinds(
    client: &Client,
    spec: &WasmOperatorSpec,
) -> (BTreeMap<KindRef, KnownKind>, Vec<String>) {
    let mut known = BTreeMap::new();
    let mut notes = Vec::new();
    for (kind, field) in crate::definition::declared_kinds(spec) {
        if known.contains_key(&kind) {
            continue;
        }
        let guess = ApiResource::from_gvk(&kind.gvk()).plural;
        match tokio::time::timeout(
            DISCOVERY_TIMEOUT,
            crate::kinds::resolve(client, &kind, &field),
        )
        .await
        {
            Ok(Ok(resolved)) => {
                known.insert(
                    kind,
                    KnownKind {
                        api: resolved.api,
                        namespaced: resolved.namespaced,
                    },
                );
            }
            Ok(Err(e)) if matches!(e.cause, crate::kinds::NotServedCause::Absent) => {
                notes.push(format!(
                    "{kind} ({field}) is not served by the cluster yet: its plural is guessed as {guess:?} and it is taken as namespaced; apply its CRD first to be sure"
                ));
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.cause.to_string(),
                    _ => format!("no answer within {DISCOVERY_TIMEOUT:?}"),
                };
                notes.push(format!(
                    "the cluster could not be asked for the kinds' plurals ({why}): they are guessed from the kinds' names and every kind is taken as namespaced"
                ));
                break;
            }
        }
    }
    (known, notes)
}

/// Grants asked only in some namespaces for an operator whose resource is cluster-scoped: its
/// resources live in no namespace, so none of them could be reconciled.
#[derive(Debug, thiserror::Error)]
#[error("its resource {resource} is cluster-scoped: its resources live in no namespace, so the operator can only be granted cluster-wide (leave out --namespace)")]
pub struct ClusterScopedResource {
    pub resource: KindRef,
}

/// Whether `target` can grant the operator of `spec` anything it can use, its kinds as `known`.
pub fn check_target(
    spec: &WasmOperatorSpec,
    known: &BTreeMap<KindRef, KnownKind>,
    target: &GrantTarget,
) -> Result<(), ClusterScopedResource> {
    let cluster_scoped = known.get(&spec.resource).is_some_and(|k| !k.namespaced);
    if cluster_scoped && !target.namespaces.is_empty() {
        return Err(ClusterScopedResource {
            resource: spec.resource.clone(),
        });
    }
    Ok(())
}

/// `group`, `plural` and scope of a kind. Uses what the API server reports when known
/// (`known`), else kube's English pluralization (right for almost every kind), namespaced.
fn group_plural(kind: &KindRef, known: &BTreeMap<KindRef, KnownKind>) -> (String, String, bool) {
    match known.get(kind) {
        Some(k) => (k.api.group.clone(), k.api.plural.clone(), k.namespaced),
        None => {
            let ar = ApiResource::from_gvk(&kind.gvk());
            (ar.group, ar.plural, true)
        }
    }
}

/// Rules merged per group/resource as they are added, then sorted.
#[derive(Default)]
struct RuleSet(BTreeMap<(String, String), (Vec<&'static str>, bool)>);

impl RuleSet {
    fn add(&mut self, group: String, resource: String, namespaced: bool, verbs: &[&'static str]) {
        let entry = self
            .0
            .entry((group, resource))
            .or_insert_with(|| (Vec::new(), namespaced));
        for verb in verbs {
            if !entry.0.contains(verb) {
                entry.0.push(verb);
            }
        }
    }

    fn kind(
        &mut self,
        kind: &KindRef,
        known: &BTreeMap<KindRef, KnownKind>,
        verbs: &[&'static str],
    ) {
        let (g, r, namespaced) = group_plural(kind, known);
        self.add(g, r, namespaced, verbs);
    }

    fn rules(self) -> Vec<Rule> {
        self.0
            .into_iter()
            .map(|((group, resource), (mut verbs, namespaced))| {
                verbs.sort_unstable();
                Rule {
                    group,
                    resource,
                    verbs,
                    namespaced,
                }
            })
            .collect()
    }
}

/// Every kind a phase or the finalizer reads, and every kind a phase writes.
fn declared_kinds(spec: &WasmOperatorSpec) -> (Vec<KindRef>, Vec<KindRef>) {
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for p in &spec.phases {
        reads.extend(
            p.inputs
                .iter()
                .map(|i| KindRef::new(&i.api_version, &i.kind)),
        );
        writes.extend(p.outputs.iter().map(|o| o.kind.clone()));
    }
    reads.extend(
        spec.finalizer
            .iter()
            .flat_map(|f| &f.inputs)
            .map(|i| KindRef::new(&i.api_version, &i.kind)),
    );
    (reads, writes)
}

/// What the operator's account needs cluster-wide whatever namespaces it is granted in: read its
/// resource kind and merge-patch their status, to report on them (a resource in a namespace
/// the operator is not granted still gets the Condition saying so); and read every kind it
/// reads across namespaces (an `allNamespaces` input, any input of a cluster-scoped resource):
/// the host's caches hold every namespace of those, so granted in some namespaces only, its
/// workers would be handed the others' objects. Without these an operator does not load.
pub fn reporting_rules(spec: &WasmOperatorSpec, known: &BTreeMap<KindRef, KnownKind>) -> Vec<Rule> {
    let mut set = RuleSet::default();
    add_reporting(&mut set, spec, known);
    let (_, _, resource_namespaced) = group_plural(&spec.resource, known);
    let inputs = spec
        .phases
        .iter()
        .flat_map(|p| &p.inputs)
        .chain(spec.finalizer.iter().flat_map(|f| &f.inputs));
    for input in inputs {
        if input.reads_other_namespaces(resource_namespaced) {
            set.kind(&KindRef::new(&input.api_version, &input.kind), known, &READ);
        }
    }
    set.rules()
}

fn add_reporting(set: &mut RuleSet, spec: &WasmOperatorSpec, known: &BTreeMap<KindRef, KnownKind>) {
    let (g, plural, namespaced) = group_plural(&spec.resource, known);
    set.add(
        g.clone(),
        plural.clone(),
        namespaced,
        &["get", "list", "watch"],
    );
    set.add(g, format!("{plural}/status"), namespaced, &["patch"]);
}

/// The rules the operator's own account needs, merged per group/resource, sorted.
pub fn rules_for(spec: &WasmOperatorSpec, known: &BTreeMap<KindRef, KnownKind>) -> Vec<Rule> {
    let mut set = RuleSet::default();
    add_reporting(&mut set, spec, known);
    let (g, plural, namespaced) = group_plural(&spec.resource, known);
    // Read again after a status conflict, and JSON-patched to add or remove the finalizer.
    set.add(g.clone(), plural.clone(), namespaced, &["patch"]);
    // ownerReferences with blockOwnerDeletion on the outputs (OwnerReferencesPermissionEnforcement
    // checks `update` on the owner's finalizers subresource).
    set.add(g, format!("{plural}/finalizers"), namespaced, &["update"]);
    // Events on its resources (events.k8s.io/v1; `patch` updates a repeated event's count).
    set.add(
        "events.k8s.io".into(),
        "events".into(),
        true,
        &["create", "patch"],
    );
    let (reads, writes) = declared_kinds(spec);
    for kind in &reads {
        set.kind(kind, known, &READ);
    }
    for kind in &writes {
        set.kind(kind, known, &WRITE);
    }
    set.rules()
}

/// What the host itself reads for the operator: its shared caches list and watch the resource
/// kind, every input kind and every output kind (the operator's account is checked for the
/// same before any of it is served to the operator's workers).
pub fn host_read_rules(spec: &WasmOperatorSpec, known: &BTreeMap<KindRef, KnownKind>) -> Vec<Rule> {
    let mut set = RuleSet::default();
    set.kind(&spec.resource, known, &READ);
    let (reads, writes) = declared_kinds(spec);
    for kind in reads.iter().chain(&writes) {
        set.kind(kind, known, &READ);
    }
    set.rules()
}

/// Where `wasmpilot rbac` grants an operator, and to whom.
#[derive(Clone, Debug)]
pub struct GrantTarget {
    /// The namespace of the operator's ServiceAccount (the host's `--identity-namespace`).
    pub identity_namespace: String,
    /// The host's ServiceAccount (namespace, name): it reads for the operator and may act as
    /// its account. `None`: no grant to the host.
    pub host_account: Option<(String, String)>,
    /// Namespaces the operator is granted in; empty: every namespace (cluster-wide).
    pub namespaces: Vec<String>,
}

fn rules_json(rules: &[Rule]) -> Vec<Value> {
    rules
        .iter()
        .map(|r| json!({"apiGroups": [r.group], "resources": [r.resource], "verbs": r.verbs}))
        .collect()
}

/// The operator's ServiceAccount, its ClusterRole and bindings (cluster-wide, or RoleBindings
/// in `target.namespaces` plus a cluster-wide binding of its reporting rules and of its rules on
/// cluster-scoped kinds, which no RoleBinding grants), and for the host: read access to the
/// operator's kinds and `impersonate` on exactly this account.
pub fn grant_manifests(
    operator: &str,
    spec: &WasmOperatorSpec,
    known: &BTreeMap<KindRef, KnownKind>,
    target: &GrantTarget,
) -> Vec<Value> {
    let name = format!("wasmpilot-operator-{operator}");
    let account = account_name(operator);
    let labels =
        json!({"app.kubernetes.io/managed-by": "wasmpilot", crate::OPERATOR_LABEL: operator});
    let id_ns = &target.identity_namespace;
    let subject = json!([{"kind": "ServiceAccount", "namespace": id_ns, "name": account}]);
    let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    // Bound in namespaces, a rule on a cluster-scoped kind grants nothing: it goes with the
    // reporting rules, bound cluster-wide.
    let (in_namespaces, cluster_scoped): (Vec<Rule>, Vec<Rule>) = rules_for(spec, known)
        .into_iter()
        .partition(|r| target.namespaces.is_empty() || r.namespaced);
    let mut docs = vec![
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": id_ns, "labels": labels},
            // It acts only through the host's impersonation: no token is mounted anywhere.
            "automountServiceAccountToken": false,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": rules_json(&in_namespaces),
        }),
    ];
    if target.namespaces.is_empty() {
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": role_ref("ClusterRole", &name),
            "subjects": subject,
        }));
    } else {
        for ns in &target.namespaces {
            docs.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "roleRef": role_ref("ClusterRole", &name),
                "subjects": subject,
            }));
        }
        let reporting = format!("{name}-reporting");
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": reporting, "labels": labels},
            "rules": rules_json(&[reporting_rules(spec, known), cluster_scoped].concat()),
        }));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": reporting, "labels": labels},
            "roleRef": role_ref("ClusterRole", &reporting),
            "subjects": subject,
        }));
    }
    if let Some((host_ns, host_sa)) = &target.host_account {
        let host = json!([{"kind": "ServiceAccount", "namespace": host_ns, "name": host_sa}]);
        let reads = format!("wasmpilot-host-reads-{operator}");
        let act_as = format!("wasmpilot-act-as-{operator}");
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": reads, "labels": labels},
            "rules": rules_json(&host_read_rules(spec, known)),
        }));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": reads, "labels": labels},
            "roleRef": role_ref("ClusterRole", &reads),
            "subjects": host,
        }));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": act_as, "namespace": id_ns, "labels": labels},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"],
                       "resourceNames": [account], "verbs": ["impersonate"]}],
        }));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": act_as, "namespace": id_ns, "labels": labels},
            "roleRef": role_ref("Role", &act_as),
            "subjects": host,
        }));
    }
    docs
}

/// One permission an account lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
}

impl Missing {
    /// `group/resource`, the core group named `core`.
    pub fn resource_text(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{group}/{}", self.resource)
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource_text())
    }
}

/// Resources whose missing grants one message names.
const MISSING_SHOWN: usize = 6;

/// The operator's account may not do what its definition needs, where its resource lives.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "the operator's account {account} is not granted {}{}: grant it (wasmpilot rbac <operator.yaml>{} | kubectl apply -f -)",
    missing_list(.missing),
    .namespace.as_deref().map(|ns| format!(" in namespace {ns}")).unwrap_or_else(|| " cluster-wide".into()),
    .namespace.as_deref().map(|ns| format!(" --namespace {ns}")).unwrap_or_default()
)]
pub struct NotGranted {
    pub account: String,
    /// `None`: cluster-wide.
    pub namespace: Option<String>,
    pub missing: Vec<Missing>,
}

/// The missing grants, per resource (`core/secrets (get, list, watch)`), the first few
/// resources, for one message.
pub fn missing_list(missing: &[Missing]) -> String {
    let mut per_resource: Vec<(String, Vec<&str>)> = Vec::new();
    for m in missing {
        let resource = m.resource_text();
        match per_resource.iter_mut().find(|(r, _)| *r == resource) {
            Some((_, verbs)) => verbs.push(m.verb),
            None => per_resource.push((resource, vec![m.verb])),
        }
    }
    let mut text = per_resource
        .iter()
        .take(MISSING_SHOWN)
        .map(|(r, verbs)| format!("{r} ({})", verbs.join(", ")))
        .collect::<Vec<_>>()
        .join(", ");
    if per_resource.len() > MISSING_SHOWN {
        text.push_str(&format!(
            " and {} more resources",
            per_resource.len() - MISSING_SHOWN
        ));
    }
    text
}

/// Why an operator's grants could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum GrantCheckError {
    #[error("the host may not act as the operator's account {account} (it needs `impersonate` on that ServiceAccount: apply the operator's grants with `wasmpilot rbac <operator.yaml> | kubectl apply -f -`): {}", crate::error_report::api_text(.source))]
    CannotImpersonate {
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("asking the API server what {account} is granted: {}", crate::error_report::api_text(.source))]
    Review {
        account: String,
        #[source]
        source: kube::Error,
    },
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
    namespace: Option<String>,
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
                    namespace: self.namespace.clone(),
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

/// What the client's account is granted cluster-wide (or in `namespace`: cluster-wide and
/// there), from one SelfSubjectRulesReview; `None` when the answer cannot settle anything on
/// its own (the review failed, or an authorizer besides RBAC could not list its rules:
/// `incomplete`).
async fn granted_rules(client: &Client, namespace: Option<&str>) -> Option<Vec<ResourceRule>> {
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.unwrap_or(CLUSTER_SCOPE).into()),
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

/// Whether the client's account (the host's, or an operator's when the client impersonates it)
/// may do what `rules` say: cluster-wide, or with `namespace` in that namespace (cluster-scoped
/// rules are then skipped: only a cluster-wide grant covers them). One rules review answers
/// the usual case in one round trip; every verb it does not show granted is asked with its own
/// access review (the API server's authoritative answer, whatever the authorizer), so a denial
/// is never inferred from the rules alone. Returns what is denied, in the order of `rules`.
pub async fn missing_permissions(
    client: &Client,
    rules: &[Rule],
    namespace: Option<&str>,
) -> Result<Vec<Missing>, kube::Error> {
    use futures::{StreamExt, TryStreamExt};
    let needed: Vec<Needed> = rules
        .iter()
        .filter(|rule| namespace.is_none() || rule.namespaced)
        .flat_map(|rule| {
            let (resource, subresource) = match rule.resource.split_once('/') {
                Some((r, s)) => (r.to_string(), Some(s.to_string())),
                None => (rule.resource.clone(), None),
            };
            rule.verbs.iter().map(move |verb| Needed {
                namespace: namespace.map(str::to_string),
                group: rule.group.clone(),
                resource: resource.clone(),
                subresource: subresource.clone(),
                verb,
            })
        })
        .collect();
    if needed.is_empty() {
        return Ok(Vec::new());
    }
    let granted = granted_rules(client, namespace).await.unwrap_or_default();
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
            ready: false,
            description: None,
            initial: name == "Syncing",
            is_final: false,
            module: None,
            inputs,
            outputs: outputs.into_iter().map(Into::into).collect(),
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
            ..Default::default()
        };
        WasmOperatorSpec {
            resource: KindRef::new("examples.io/v1", "AutoRoute"),
            resource_selector: None,
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
            allow_sensitive_kinds: Vec::new(),
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
        assert_eq!(
            find("events.k8s.io", "events"),
            Some(vec!["create", "patch"]),
            "Events on its resources, as itself"
        );
        assert_eq!(rules.len(), 7);
    }

    #[test]
    fn the_host_only_reads_and_the_scope_comes_from_the_api_server() {
        let mut known = BTreeMap::new();
        known.insert(
            KindRef::new("networking.istio.io/v1alpha3", "Gateway"),
            KnownKind {
                api: ApiResource::from_gvk(
                    &KindRef::new("networking.istio.io/v1alpha3", "Gateway").gvk(),
                ),
                namespaced: false,
            },
        );
        let reads = host_read_rules(&spec(), &known);
        assert!(reads.iter().all(|r| r.verbs == ["get", "list", "watch"]));
        assert_eq!(
            reads
                .iter()
                .map(|r| r.resource.as_str())
                .collect::<Vec<_>>(),
            ["services", "deployments", "autoroutes", "gateways"]
        );
        let gateways = reads.iter().find(|r| r.resource == "gateways");
        assert_eq!(gateways.map(|r| r.namespaced), Some(false));
        assert_eq!(
            reporting_rules(&spec(), &known)
                .iter()
                .map(|r| (r.resource.as_str(), r.verbs.clone()))
                .collect::<Vec<_>>(),
            [
                ("autoroutes", vec!["get", "list", "watch"]),
                ("autoroutes/status", vec!["patch"])
            ]
        );
    }

    /// An input read across namespaces needs its read rule cluster-wide (the caches hold every
    /// namespace of it): a grant in some namespaces only would hand the worker the others'.
    #[test]
    fn reads_across_namespaces_are_needed_cluster_wide() {
        let mut s = spec();
        let all: InputSpec = serde_json::from_value(serde_json::json!({
            "name": "settings", "apiVersion": "v1", "kind": "ConfigMap", "allNamespaces": true,
        }))
        .unwrap();
        s.phases[0].inputs.push(all);
        let resources: Vec<String> = reporting_rules(&s, &BTreeMap::new())
            .iter()
            .map(|r| r.resource.clone())
            .collect();
        assert!(
            resources.contains(&"configmaps".to_string()),
            "{resources:?}"
        );
        assert!(
            !resources.contains(&"deployments".to_string()),
            "an input of the resource's own namespace is granted per namespace: {resources:?}"
        );
    }

    fn target(namespaces: &[&str]) -> GrantTarget {
        GrantTarget {
            identity_namespace: "wasmpilot-system".into(),
            host_account: Some(("wasmpilot-system".into(), "wasmpilot".into())),
            namespaces: namespaces.iter().map(ToString::to_string).collect(),
        }
    }

    fn kinds_and_names(docs: &[Value]) -> Vec<(String, String)> {
        docs.iter()
            .map(|d| {
                let ns = d["metadata"]["namespace"].as_str().unwrap_or("");
                (
                    d["kind"].as_str().unwrap_or("").to_string(),
                    format!("{ns}/{}", d["metadata"]["name"].as_str().unwrap_or("")),
                )
            })
            .collect()
    }

    #[test]
    fn the_operator_gets_its_own_account_and_the_host_may_only_read_and_act_as_it() {
        let docs = grant_manifests("autoroute", &spec(), &BTreeMap::new(), &target(&[]));
        assert_eq!(
            kinds_and_names(&docs),
            [
                ("ServiceAccount", "wasmpilot-system/op-autoroute"),
                ("ClusterRole", "/wasmpilot-operator-autoroute"),
                ("ClusterRoleBinding", "/wasmpilot-operator-autoroute"),
                ("ClusterRole", "/wasmpilot-host-reads-autoroute"),
                ("ClusterRoleBinding", "/wasmpilot-host-reads-autoroute"),
                ("Role", "wasmpilot-system/wasmpilot-act-as-autoroute"),
                ("RoleBinding", "wasmpilot-system/wasmpilot-act-as-autoroute"),
            ]
            .map(|(k, n)| (k.to_string(), n.to_string()))
        );
        assert_eq!(docs[2]["subjects"][0]["name"], "op-autoroute");
        assert_eq!(docs[2]["roleRef"]["name"], "wasmpilot-operator-autoroute");
        assert_eq!(docs[4]["subjects"][0]["name"], "wasmpilot");
        let host_verbs: Vec<&Value> = docs[3]["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["verbs"].as_array().into_iter().flatten())
            .collect();
        assert!(
            host_verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str().unwrap_or(""))),
            "the host gets no write verb of the operator: {host_verbs:?}"
        );
        assert_eq!(
            docs[5]["rules"],
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"],
                    "resourceNames": ["op-autoroute"], "verbs": ["impersonate"]}])
        );
        assert_eq!(
            account_user("wasmpilot-system", "autoroute"),
            "system:serviceaccount:wasmpilot-system:op-autoroute"
        );
        let m = Missing {
            verb: "list",
            group: "apps".into(),
            resource: "deployments".into(),
        };
        assert_eq!(m.to_string(), "list apps/deployments");
    }

    #[test]
    fn a_grant_in_some_namespaces_binds_there_and_reports_everywhere() {
        let docs = grant_manifests("autoroute", &spec(), &BTreeMap::new(), &target(&["a", "b"]));
        let names = kinds_and_names(&docs);
        for expected in [
            ("RoleBinding", "a/wasmpilot-operator-autoroute"),
            ("RoleBinding", "b/wasmpilot-operator-autoroute"),
            ("ClusterRole", "/wasmpilot-operator-autoroute-reporting"),
            (
                "ClusterRoleBinding",
                "/wasmpilot-operator-autoroute-reporting",
            ),
        ] {
            assert!(
                names.contains(&(expected.0.to_string(), expected.1.to_string())),
                "{expected:?} in {names:?}"
            );
        }
        assert!(
            !names.contains(&(
                "ClusterRoleBinding".to_string(),
                "/wasmpilot-operator-autoroute".to_string()
            )),
            "no cluster-wide binding of the operator's role"
        );
    }

    /// Granted in some namespaces, a rule on a cluster-scoped kind is bound cluster-wide (a
    /// RoleBinding would grant nothing of it): with the reporting rules, not the namespaced role.
    #[test]
    fn a_cluster_scoped_kind_is_granted_cluster_wide_where_the_rest_is_in_namespaces() {
        let gateway = KindRef::new("networking.istio.io/v1alpha3", "Gateway");
        let known = BTreeMap::from([(
            gateway.clone(),
            KnownKind {
                api: ApiResource::from_gvk(&gateway.gvk()),
                namespaced: false,
            },
        )]);
        let docs = grant_manifests("autoroute", &spec(), &known, &target(&["a"]));
        let resources = |name: &str| -> Vec<String> {
            docs.iter()
                .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
                .and_then(|d| d["rules"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|r| r["resources"][0].as_str().map(str::to_string))
                .collect()
        };
        let bound_in_namespaces = resources("wasmpilot-operator-autoroute");
        let cluster_wide = resources("wasmpilot-operator-autoroute-reporting");
        assert!(
            !bound_in_namespaces.contains(&"gateways".to_string())
                && cluster_wide.contains(&"gateways".to_string()),
            "{bound_in_namespaces:?} / {cluster_wide:?}"
        );
        assert!(bound_in_namespaces.contains(&"services".to_string()));
        assert!(!cluster_wide.contains(&"services".to_string()));
        // Granted cluster-wide, one role holds everything.
        let docs = grant_manifests("autoroute", &spec(), &known, &target(&[]));
        let all = docs
            .iter()
            .find(|d| d["metadata"]["name"] == "wasmpilot-operator-autoroute")
            .map(|d| d["rules"].to_string())
            .unwrap_or_default();
        assert!(
            all.contains("gateways") && all.contains("services"),
            "{all}"
        );
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
            namespace: None,
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
                    namespaced: true,
                },
                Rule {
                    group: "".into(),
                    resource: "services".into(),
                    verbs: vec!["patch"],
                    namespaced: true,
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
            let missing = missing_permissions(&client, &two_rules(), None)
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
            let missing = missing_permissions(&client, &two_rules(), None)
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
            let missing = missing_permissions(&client, &two_rules(), None)
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
            let missing = missing_permissions(&client, &two_rules(), None)
                .await
                .expect("reviews");
            assert_eq!(missing.len(), 3);
            drop(client);
            server.await.expect("exactly the scripted requests");
        }
    }
}
