//! What each operator's own account is granted, asked of the API server as that account
//! (self-reviews sent with impersonation), cached per namespace and asked again after a while.
//!
//! An operator granted everything cluster-wide reconciles everywhere. One granted only in some
//! namespaces (`wasmpilot rbac --namespace a,b`) reconciles only where a review shows every
//! rule it needs: its workers are served nothing (and write nothing) elsewhere. What it must
//! have everywhere — read its resource kind, patch its status (to report a refusal), any
//! cluster-scoped kind — is checked when it loads. Grants are asked again every
//! [`GRANTS_RECHECK`], and at their next use after any change of the cluster's RBAC objects
//! (see [`crate::controller::rbac_changes`]): a revoked grant stops the operator's next
//! reconcile within seconds.

use crate::rbac::{missing_list, missing_permissions, GrantCheckError, Missing, NotGranted, Rule};
use kube::Client;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an answer about an operator's grants is trusted before it is asked again.
pub const GRANTS_RECHECK: Duration = Duration::from_secs(60);

/// Namespaces whose answers are remembered per operator; beyond, the memory starts over.
const NAMESPACES_KEPT: usize = 10_000;

/// Where an operator may reconcile, as the load-time check found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Granted every rule cluster-wide.
    Everywhere,
    /// Some namespaced rules are not granted cluster-wide (listed): each namespace is asked.
    WhereGranted(Vec<Missing>),
}

/// One operator's grants: its account, a client acting as it, the rules it needs, and the
/// answers so far.
pub struct OperatorGrants {
    account: String,
    client: Client,
    rules: Vec<Rule>,
    answers: tokio::sync::Mutex<Answers>,
    /// The cluster's RBAC changes: answers asked before the latest are asked again.
    rbac: crate::controller::rbac_changes::RbacChanges,
}

#[derive(Default)]
struct Answers {
    /// The count of RBAC changes when these answers were asked.
    rbac_seen: u64,
    /// The cluster-wide answer was asked before the latest RBAC change.
    cluster_stale: bool,
    /// Cluster-wide: when asked, and the rules not granted.
    cluster: Option<(Instant, Vec<Rule>)>,
    /// Per namespace: when asked, and what is missing there.
    namespaces: HashMap<String, (Instant, Vec<Missing>)>,
}

impl OperatorGrants {
    /// The grants of `account` (whose every request `client` sends as that account), needing
    /// `rules`; `reporting` are those needed wherever its resources live. Fails when a
    /// reporting rule or a cluster-scoped rule is not granted cluster-wide.
    pub async fn check_at_load(
        account: String,
        client: Client,
        rules: Vec<Rule>,
        reporting: &[Rule],
        rbac: crate::controller::rbac_changes::RbacChanges,
    ) -> Result<(OperatorGrants, Reach), LoadRefusal> {
        let grants = OperatorGrants {
            account,
            client,
            rules,
            answers: tokio::sync::Mutex::new(Answers {
                rbac_seen: rbac.current(),
                ..Default::default()
            }),
            rbac,
        };
        let missing = grants.cluster_wide().await?;
        if missing.is_empty() {
            return Ok((grants, Reach::Everywhere));
        }
        let everywhere: Vec<Missing> = missing
            .iter()
            .flat_map(|r| {
                missing_of(std::slice::from_ref(r))
                    .into_iter()
                    .map(move |m| (r, m))
            })
            .filter(|(rule, m)| {
                !rule.namespaced
                    || reporting
                        .iter()
                        .any(|x| covers(x, m) && x.verbs.contains(&m.verb))
            })
            .map(|(_, m)| m)
            .collect();
        if !everywhere.is_empty() {
            // Everything missing is named (what it needs everywhere decided the refusal).
            return Err(LoadRefusal::NotGranted(NotGranted {
                account: grants.account.clone(),
                namespace: None,
                missing: missing_of(&missing),
            }));
        }
        let reach = Reach::WhereGranted(missing_of(&missing));
        Ok((grants, reach))
    }

    /// Where the operator may reconcile now (asked again when the last answer is older than
    /// [`GRANTS_RECHECK`]).
    pub async fn current_reach(&self) -> Result<Reach, GrantCheckError> {
        let missing = self.cluster_wide().await?;
        Ok(if missing.is_empty() {
            Reach::Everywhere
        } else {
            Reach::WhereGranted(missing_of(&missing))
        })
    }

    /// Grants known to cover everything (for a minute): the mock API server's tests of the
    /// reconcile, which script no review.
    #[cfg(any(test, feature = "testing"))]
    pub fn granted_everywhere(account: &str, client: Client) -> OperatorGrants {
        OperatorGrants {
            account: account.to_string(),
            client,
            rules: Vec::new(),
            answers: tokio::sync::Mutex::new(Answers {
                cluster: Some((Instant::now(), Vec::new())),
                ..Default::default()
            }),
            rbac: Default::default(),
        }
    }

    /// Grants known (for a minute) to leave out `rules` cluster-wide and in `namespace`: the
    /// mock API server's tests of a refused reconcile.
    #[cfg(test)]
    pub(crate) fn refused_in(
        account: &str,
        client: Client,
        namespace: &str,
        rules: Vec<Rule>,
    ) -> OperatorGrants {
        let missing = missing_of(&rules);
        OperatorGrants {
            account: account.to_string(),
            client,
            rules: rules.clone(),
            answers: tokio::sync::Mutex::new(Answers {
                cluster: Some((Instant::now(), rules)),
                namespaces: HashMap::from([(namespace.to_string(), (Instant::now(), missing))]),
                rbac_seen: 0,
                cluster_stale: false,
            }),
            rbac: Default::default(),
        }
    }

    /// The operator's account (`system:serviceaccount:<namespace>:op-<name>`).
    pub fn account(&self) -> &str {
        &self.account
    }

    /// Whether the operator may reconcile a resource in `namespace` (`None`: cluster-scoped),
    /// from answers at most [`GRANTS_RECHECK`] old.
    pub async fn check(&self, namespace: Option<&str>) -> Result<(), ReconcileRefusal> {
        let not_cluster_wide = self.cluster_wide().await.map_err(ReconcileRefusal::Check)?;
        if not_cluster_wide.is_empty() {
            return Ok(());
        }
        let refuse = |namespace: Option<&str>, missing: Vec<Missing>| {
            ReconcileRefusal::NotGranted(NotGranted {
                account: self.account.clone(),
                namespace: namespace.map(str::to_string),
                missing,
            })
        };
        let Some(ns) = namespace.filter(|ns| !ns.is_empty()) else {
            return Err(refuse(None, missing_of(&not_cluster_wide)));
        };
        if let Some(cluster_scoped) = not_cluster_wide.iter().find(|r| !r.namespaced) {
            // A namespaced grant never covers a cluster-scoped kind.
            let missing = missing_of(std::slice::from_ref(cluster_scoped));
            return Err(refuse(None, missing));
        }
        let mut answers = self.answers.lock().await;
        self.forget_if_rbac_changed(&mut answers);
        if let Some((asked, missing)) = answers.namespaces.get(ns) {
            if asked.elapsed() < GRANTS_RECHECK {
                return match missing.is_empty() {
                    true => Ok(()),
                    false => Err(refuse(Some(ns), missing.clone())),
                };
            }
        }
        let missing = missing_permissions(&self.client, &not_cluster_wide, Some(ns))
            .await
            .map_err(|source| ReconcileRefusal::Check(self.review_error(source)))?;
        if answers.namespaces.len() >= NAMESPACES_KEPT {
            answers.namespaces.clear();
        }
        answers
            .namespaces
            .insert(ns.to_string(), (Instant::now(), missing.clone()));
        match missing.is_empty() {
            true => Ok(()),
            false => Err(refuse(Some(ns), missing)),
        }
    }

    /// The rules (or the verbs of them) not granted cluster-wide, asked again when the last
    /// answer is older than [`GRANTS_RECHECK`].
    async fn cluster_wide(&self) -> Result<Vec<Rule>, GrantCheckError> {
        let mut answers = self.answers.lock().await;
        self.forget_if_rbac_changed(&mut answers);
        if let Some((asked, missing)) = &answers.cluster {
            if asked.elapsed() < GRANTS_RECHECK && !answers.cluster_stale {
                return Ok(missing.clone());
            }
        }
        let missing = missing_permissions(&self.client, &self.rules, None)
            .await
            .map_err(|source| self.review_error(source))?;
        let rules = rules_of(&self.rules, &missing);
        if answers
            .cluster
            .as_ref()
            .is_some_and(|(_, before)| *before != rules)
        {
            tracing::info!(account = %self.account, missing = %missing_list(&missing), "the operator's grants changed");
            answers.namespaces.clear();
        }
        answers.cluster = Some((Instant::now(), rules.clone()));
        answers.cluster_stale = false;
        Ok(rules)
    }

    /// Answers asked before the cluster's latest RBAC change are asked again (the cluster-wide
    /// one is kept to compare with, but no longer trusted).
    fn forget_if_rbac_changed(&self, answers: &mut Answers) {
        let now = self.rbac.current();
        if answers.rbac_seen != now {
            answers.rbac_seen = now;
            answers.namespaces.clear();
            answers.cluster_stale = true;
        }
    }

    fn review_error(&self, source: kube::Error) -> GrantCheckError {
        let impersonation_refused = matches!(&source, kube::Error::Api(s)
            if s.code == 403 && s.message.contains("impersonate"));
        if impersonation_refused {
            GrantCheckError::CannotImpersonate {
                account: self.account.clone(),
                source,
            }
        } else {
            GrantCheckError::Review {
                account: self.account.clone(),
                source,
            }
        }
    }
}

/// Which account each operator acts as, and clients sending every request as it.
#[derive(Clone)]
pub struct Identities {
    /// The namespace of the operators' ServiceAccounts.
    namespace: String,
    source: IdentitySource,
}

#[derive(Clone)]
enum IdentitySource {
    /// Each operator's client impersonates its account over the host's connection.
    Impersonating(Box<crate::api_client::Connection>),
    /// Every operator's requests go out on this client as they are (the mock API server's
    /// tests, where there is no connection to impersonate on).
    #[cfg(test)]
    Shared(Client),
}

impl Identities {
    /// Operators act as `op-<name>` in `namespace`, impersonated over `connection`.
    pub fn impersonating(connection: crate::api_client::Connection, namespace: &str) -> Self {
        Identities {
            namespace: namespace.to_string(),
            source: IdentitySource::Impersonating(Box::new(connection)),
        }
    }

    #[cfg(test)]
    pub(crate) fn shared(client: Client) -> Self {
        Identities {
            namespace: crate::rbac::DEFAULT_IDENTITY_NAMESPACE.into(),
            source: IdentitySource::Shared(client),
        }
    }

    /// The user the operator acts as.
    pub fn account(&self, operator: &str) -> String {
        crate::rbac::account_user(&self.namespace, operator)
    }

    /// A client whose every request is the operator's.
    pub fn client(&self, operator: &str) -> Result<Client, kube::Error> {
        match &self.source {
            IdentitySource::Impersonating(connection) => {
                connection.impersonating(&self.account(operator))
            }
            #[cfg(test)]
            IdentitySource::Shared(client) => Ok(client.clone()),
        }
    }
}

/// Why an operator does not load for its grants.
#[derive(Debug, thiserror::Error)]
pub enum LoadRefusal {
    #[error("{0}")]
    NotGranted(NotGranted),
    #[error("{0}")]
    Check(#[from] GrantCheckError),
}

/// Why one resource is not reconciled for its operator's grants.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileRefusal {
    #[error("{0}")]
    NotGranted(NotGranted),
    #[error("{0}")]
    Check(GrantCheckError),
}

/// Whether `rule` is the rule `missing` names.
fn covers(rule: &Rule, missing: &Missing) -> bool {
    rule.group == missing.group && rule.resource == missing.resource
}

/// The rules narrowed to the verbs `missing` lists (each rule keeps its scope).
fn rules_of(rules: &[Rule], missing: &[Missing]) -> Vec<Rule> {
    rules
        .iter()
        .filter_map(|r| {
            let verbs: Vec<&'static str> = missing
                .iter()
                .filter(|m| covers(r, m))
                .map(|m| m.verb)
                .collect();
            (!verbs.is_empty()).then(|| Rule { verbs, ..r.clone() })
        })
        .collect()
}

/// Every verb of `rules`, one [`Missing`] each.
fn missing_of(rules: &[Rule]) -> Vec<Missing> {
    rules
        .iter()
        .flat_map(|r| {
            r.verbs.iter().map(|verb| Missing {
                verb,
                group: r.group.clone(),
                resource: r.resource.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_api_server::{scripted, Exchange};
    use http::{Method, StatusCode};
    use serde_json::{json, Value};

    const RULES: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";

    fn rule(group: &str, resource: &str, verbs: &[&'static str], namespaced: bool) -> Rule {
        Rule {
            group: group.into(),
            resource: resource.into(),
            verbs: verbs.to_vec(),
            namespaced,
        }
    }

    /// The operator of these tests: reads Secrets, patches its Widgets' status.
    fn rules() -> Vec<Rule> {
        vec![
            rule("", "secrets", &["list"], true),
            rule("test.io", "widgets/status", &["patch"], true),
        ]
    }

    fn reporting() -> Vec<Rule> {
        vec![rule("test.io", "widgets/status", &["patch"], true)]
    }

    /// A rules review asked for `namespace`, answered with `granted` rules (complete).
    fn review(namespace: &'static str, granted: Value) -> Exchange {
        Exchange::new(
            Method::POST,
            RULES,
            StatusCode::CREATED,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                   "spec": {}, "status": {"resourceRules": granted, "nonResourceRules": [],
                                          "incomplete": false}}),
        )
        .checking(move |_, body| assert_eq!(body["spec"]["namespace"], namespace))
    }

    /// The access review of a verb the rules did not show, answered `allowed`.
    fn access(namespace: Option<&'static str>, allowed: bool) -> Exchange {
        Exchange::new(
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            StatusCode::CREATED,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "spec": {}, "status": {"allowed": allowed}}),
        )
        .checking(move |_, body| {
            assert_eq!(
                body["spec"]["resourceAttributes"]["namespace"].as_str(),
                namespace
            )
        })
    }

    fn status_everywhere() -> Value {
        json!([{"apiGroups": ["test.io"], "resources": ["widgets/status"], "verbs": ["patch"]}])
    }

    #[tokio::test]
    async fn an_operator_granted_some_namespaces_reconciles_only_there() {
        let (client, server) = scripted(vec![
            // Load: Secrets are not granted cluster-wide.
            review("wasmpilot:cluster-wide", status_everywhere()),
            access(None, false),
            // Namespace a: granted by a RoleBinding there.
            review(
                "a",
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
            ),
            // Namespace b: not.
            review("b", status_everywhere()),
            access(Some("b"), false),
        ]);
        let (grants, reach) = OperatorGrants::check_at_load(
            "op".into(),
            client.clone(),
            rules(),
            &reporting(),
            Default::default(),
        )
        .await
        .expect("loads");
        assert_eq!(
            reach,
            Reach::WhereGranted(vec![Missing {
                verb: "list",
                group: "".into(),
                resource: "secrets".into()
            }])
        );
        assert!(grants.check(Some("a")).await.is_ok());
        let refused = grants.check(Some("b")).await.expect_err("b is not granted");
        assert_eq!(
            refused.to_string(),
            "the operator's account op is not granted core/secrets (list) in namespace b: grant it (wasmpilot rbac <operator.yaml> --namespace b | kubectl apply -f -)"
        );
        // Answers are kept: asking again sends nothing.
        assert!(grants.check(Some("a")).await.is_ok());
        assert!(grants.check(Some("b")).await.is_err());
        assert!(
            matches!(grants.check(None).await, Err(ReconcileRefusal::NotGranted(n)) if n.namespace.is_none()),
            "a cluster-scoped resource needs the cluster-wide grant"
        );
        drop((client, grants));
        server.await.expect("exactly the scripted requests");
    }

    #[tokio::test]
    async fn an_operator_that_cannot_report_on_its_resources_does_not_load() {
        let (client, server) = scripted(vec![
            review("wasmpilot:cluster-wide", json!([])),
            access(None, false),
            access(None, false),
        ]);
        let refused = OperatorGrants::check_at_load(
            "op".into(),
            client.clone(),
            rules(),
            &reporting(),
            Default::default(),
        )
        .await
        .map(|_| ())
        .expect_err("refused");
        let text = refused.to_string();
        assert!(
            text.contains(
                "not granted core/secrets (list), test.io/widgets/status (patch) cluster-wide"
            ),
            "everything missing is named: {text}"
        );
        drop(client);
        server.await.expect("exactly the scripted requests");
    }

    #[tokio::test]
    async fn a_refused_impersonation_says_the_host_may_not_act_as_the_account() {
        let (client, server) = scripted(vec![
            Exchange::new(
                Method::POST,
                RULES,
                StatusCode::FORBIDDEN,
                crate::mock_api_server::failure(403, "Forbidden", "users \"system:serviceaccount:wasmpilot-system:op-x\" is forbidden: User \"host\" cannot impersonate resource \"serviceaccounts\""),
            ),
            Exchange::new(
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                StatusCode::FORBIDDEN,
                crate::mock_api_server::failure(403, "Forbidden", "User \"host\" cannot impersonate resource \"serviceaccounts\""),
            ),
        ]);
        let refused = OperatorGrants::check_at_load(
            "system:serviceaccount:wasmpilot-system:op-x".into(),
            client.clone(),
            vec![rule("", "secrets", &["list"], true)],
            &[],
            Default::default(),
        )
        .await
        .map(|_| ())
        .expect_err("refused");
        assert!(
            matches!(
                refused,
                LoadRefusal::Check(GrantCheckError::CannotImpersonate { .. })
            ),
            "{refused}"
        );
        drop(client);
        server.await.expect("exactly the scripted requests");
    }

    #[tokio::test]
    async fn an_rbac_change_has_the_answers_asked_again_at_their_next_use() {
        let (client, server) = scripted(vec![
            // Load, then namespace a granted.
            review("wasmpilot:cluster-wide", status_everywhere()),
            access(None, false),
            review(
                "a",
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
            ),
            // After an RBAC change: asked again, and the RoleBinding in a is gone.
            review("wasmpilot:cluster-wide", status_everywhere()),
            access(None, false),
            review("a", status_everywhere()),
            access(Some("a"), false),
        ]);
        let rbac = crate::controller::rbac_changes::RbacChanges::default();
        let (grants, _) = OperatorGrants::check_at_load(
            "op".into(),
            client.clone(),
            rules(),
            &reporting(),
            rbac.clone(),
        )
        .await
        .expect("loads");
        assert!(grants.check(Some("a")).await.is_ok());
        // Kept while nothing changes (the script has no request for it).
        assert!(grants.check(Some("a")).await.is_ok());
        rbac.changed();
        assert!(
            grants.check(Some("a")).await.is_err(),
            "a revoked RoleBinding is noticed at the next use, not after GRANTS_RECHECK"
        );
        drop((client, grants));
        server.await.expect("exactly the scripted requests");
    }
}
