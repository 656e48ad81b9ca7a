//! An admin's consent to run a WasmOperator: the cluster-scoped `WasmOperatorGrant` of its name,
//! made for its uid, listing the sensitive kinds, module sources and queries it may use
//! (checked with `--require-operator-grants`).
//!
//! The WasmOperator is its author's; the grant is the admin's. A name alone proves nothing: an
//! operator deleted and made again under its name (by anyone who may create WasmOperators) has
//! a new uid, and the grant made for the old one does not cover it.

use crate::crd::{
    ModuleRef, ModuleSourcesGrant, NamespacedName, PrometheusGrant, WasmOperator,
    WasmOperatorGrant, WasmOperatorSpec,
};
use crate::definition::{same_kind, sensitive_uses};
use crate::modules::DEFAULT_MODULE_NAMESPACE;
use kube::{Api, ResourceExt};

/// Why a WasmOperator runs without an admin's consent.
#[derive(Debug, thiserror::Error)]
pub enum ConsentError {
    #[error("no WasmOperatorGrant {operator}: an admin reviews this operator and grants it (`wasmpilot grant {operator}`); until then it does not run")]
    Missing { operator: String },
    #[error("the WasmOperatorGrant {operator} was made for another WasmOperator of this name (uid {granted}), not this one (uid {uid}): an operator made again under a granted name is not granted; an admin reviews it and grants it anew (`wasmpilot grant {operator}`)")]
    ForAnother {
        operator: String,
        granted: String,
        uid: String,
    },
    #[error("the WasmOperatorGrant {operator} does not list these kinds in spec.sensitiveKinds: {uses}; an admin who consents adds them (`wasmpilot grant {operator}`)")]
    SensitiveNotGranted { operator: String, uses: String },
    #[error("the WasmOperatorGrant {operator} does not list these module sources in spec.modules: {sources}; an admin who consents adds them (`wasmpilot grant {operator}`)")]
    ModuleSourceNotGranted { operator: String, sources: String },
    #[error("the WasmOperatorGrant {operator} does not consent to its metric queries: {problem}; an admin who consents grants them (`wasmpilot grant {operator}`)")]
    QueriesNotGranted { operator: String, problem: String },
    #[error("the WasmOperatorGrant {operator} is not usable: {field}: {problem}")]
    Invalid {
        operator: String,
        field: &'static str,
        problem: String,
    },
    #[error("could not read the WasmOperatorGrant {operator}: {}", crate::error_report::api_text(.source))]
    Unreadable {
        operator: String,
        #[source]
        source: kube::Error,
    },
}

impl ConsentError {
    /// The `Ready` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ConsentError::Missing { .. } => "GrantMissing",
            ConsentError::ForAnother { .. } => "GrantForAnotherOperator",
            ConsentError::SensitiveNotGranted { .. } => "SensitiveKindNotGranted",
            ConsentError::ModuleSourceNotGranted { .. } => "ModuleSourceNotGranted",
            ConsentError::QueriesNotGranted { .. } => "QueriesNotGranted",
            ConsentError::Invalid { .. } => "GrantInvalid",
            ConsentError::Unreadable { .. } => "GrantUnreadable",
        }
    }

    /// Only a grant that could not be read is asked again by itself; the others wait for the
    /// grant (or the WasmOperator) to change.
    pub fn retry(&self) -> bool {
        matches!(self, ConsentError::Unreadable { .. })
    }
}

/// One place a module of an operator comes from, as a grant lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleSource {
    /// An OCI registry's or an HTTPS URL's `host[:port]`.
    Host(String),
    ConfigMap(NamespacedName),
    PullSecret(NamespacedName),
    File(String),
}

impl std::fmt::Display for ModuleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn bounded(t: &str) -> std::borrow::Cow<'_, str> {
            crate::worker_text::bounded(t, crate::worker_text::NAME_BYTES)
        }
        match self {
            ModuleSource::Host(h) => write!(f, "host {}", bounded(h)),
            ModuleSource::ConfigMap(n) => {
                write!(
                    f,
                    "ConfigMap {}/{}",
                    bounded(&n.namespace),
                    bounded(&n.name)
                )
            }
            ModuleSource::PullSecret(n) => write!(
                f,
                "pull Secret {}/{}",
                bounded(&n.namespace),
                bounded(&n.name)
            ),
            ModuleSource::File(p) => write!(f, "file {}", bounded(p)),
        }
    }
}

impl ModuleSource {
    fn granted_by(&self, grant: &ModuleSourcesGrant) -> bool {
        match self {
            ModuleSource::Host(h) => grant.hosts.iter().any(|g| g.eq_ignore_ascii_case(h)),
            ModuleSource::ConfigMap(n) => grant.config_maps.contains(n),
            ModuleSource::PullSecret(n) => grant.pull_secrets.contains(n),
            ModuleSource::File(p) => grant.files.contains(p),
        }
    }

    /// Adds this source to `grant` (once).
    pub fn add_to(self, grant: &mut ModuleSourcesGrant) {
        if self.granted_by(grant) {
            return;
        }
        match self {
            ModuleSource::Host(h) => grant.hosts.push(h),
            ModuleSource::ConfigMap(n) => grant.config_maps.push(n),
            ModuleSource::PullSecret(n) => grant.pull_secrets.push(n),
            ModuleSource::File(p) => grant.files.push(p),
        }
    }
}

/// Every module reference of `spec` with its field: each phase's module and shadow, the
/// finalizer's module.
fn module_refs(spec: &WasmOperatorSpec) -> Vec<(String, &ModuleRef)> {
    let mut refs = Vec::new();
    for (i, p) in spec.phases.iter().enumerate() {
        if let Some(m) = &p.module {
            refs.push((format!("spec.phases[{i}].module"), m));
        }
        if let Some(m) = &p.shadow {
            refs.push((format!("spec.phases[{i}].shadow"), m));
        }
    }
    if let Some(f) = &spec.finalizer {
        refs.push(("spec.finalizer.module".to_string(), &f.module));
    }
    refs
}

/// The `host[:port]` an HTTPS module URL connects to (lowercase), if it parses.
fn url_host(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?.to_ascii_lowercase();
    Some(match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

/// Where `spec`'s modules come from (each with the field naming it): what its grant must list.
pub fn module_sources(spec: &WasmOperatorSpec) -> Vec<(String, ModuleSource)> {
    let in_namespace = |namespace: &Option<String>, name: &str| NamespacedName {
        namespace: namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_MODULE_NAMESPACE.to_string()),
        name: name.to_string(),
    };
    let mut sources = Vec::new();
    for (field, m) in module_refs(spec) {
        if let Some(o) = &m.oci {
            let registry = crate::modules::oci::parse_reference(&o.reference)
                .map(|r| r.resolve_registry().to_ascii_lowercase())
                .unwrap_or_else(|_| o.reference.clone());
            sources.push((format!("{field}.oci"), ModuleSource::Host(registry)));
            if let Some(secret) = &o.pull_secret {
                sources.push((
                    format!("{field}.oci.pullSecret"),
                    ModuleSource::PullSecret(in_namespace(&secret.namespace, &secret.name)),
                ));
            }
        }
        if let Some(u) = &m.url {
            let host = url_host(&u.url).unwrap_or_else(|| u.url.clone());
            sources.push((format!("{field}.url"), ModuleSource::Host(host)));
        }
        if let Some(cm) = &m.config_map {
            sources.push((
                format!("{field}.configMap"),
                ModuleSource::ConfigMap(in_namespace(&cm.namespace, &cm.name)),
            ));
        }
        if let Some(f) = &m.file {
            sources.push((format!("{field}.file"), ModuleSource::File(f.path.clone())));
        }
    }
    sources
}

/// The Prometheus and queries `spec` runs (`None`: it runs none), as its grant must list them.
pub fn queries_asked(spec: &WasmOperatorSpec) -> Option<PrometheusGrant> {
    let mut queries: Vec<String> = spec
        .phases
        .iter()
        .flat_map(|p| p.queries.iter().map(|q| q.query.clone()))
        .collect();
    if queries.is_empty() {
        return None;
    }
    queries.sort();
    queries.dedup();
    Some(PrometheusGrant {
        url: spec.prometheus.as_ref().map(|p| p.url.clone()),
        queries,
    })
}

/// Whether `grant` (the one named as `op`, if any) consents to `op` as it is now.
pub fn check(grant: Option<&WasmOperatorGrant>, op: &WasmOperator) -> Result<(), ConsentError> {
    let operator = op.name_any();
    let Some(grant) = grant else {
        return Err(ConsentError::Missing { operator });
    };
    let uid = op.metadata.uid.clone().unwrap_or_default();
    if grant.spec.operator_uid != uid || uid.is_empty() {
        return Err(ConsentError::ForAnother {
            operator,
            granted: crate::worker_text::bound_owned(grant.spec.operator_uid.clone(), 128),
            uid,
        });
    }
    let listed = |items: Vec<String>| {
        crate::worker_text::bound_owned(items.join(", "), crate::worker_text::MESSAGE_BYTES / 2)
    };
    let mut missing: Vec<String> = sensitive_uses(&op.spec)
        .into_iter()
        .filter(|(kind, _, _)| {
            !grant
                .spec
                .sensitive_kinds
                .iter()
                .any(|g| same_kind(g, kind))
        })
        .map(|(kind, field, _)| format!("{} {} ({field})", kind.api_version, kind.kind))
        .collect();
    missing.dedup();
    if !missing.is_empty() {
        return Err(ConsentError::SensitiveNotGranted {
            operator,
            uses: listed(missing),
        });
    }
    let sources: Vec<String> = module_sources(&op.spec)
        .into_iter()
        .filter(|(_, source)| !source.granted_by(&grant.spec.modules))
        .map(|(field, source)| format!("{source} ({field})"))
        .collect();
    if !sources.is_empty() {
        return Err(ConsentError::ModuleSourceNotGranted {
            operator,
            sources: listed(sources),
        });
    }
    if let Some(asked) = queries_asked(&op.spec) {
        let server = |url: &Option<String>| match url {
            Some(url) => format!(
                "the Prometheus at {}",
                crate::worker_text::bounded(url, crate::worker_text::NAME_BYTES)
            ),
            None => "the host's own Prometheus".to_string(),
        };
        let problem = match &grant.spec.prometheus {
            None => Some(format!(
                "it queries {}, and spec.prometheus of the grant is unset",
                server(&asked.url)
            )),
            Some(granted) if granted.url != asked.url => Some(format!(
                "it queries {}, the grant names {}",
                server(&asked.url),
                server(&granted.url)
            )),
            Some(granted) => {
                let texts: Vec<String> = op
                    .spec
                    .phases
                    .iter()
                    .enumerate()
                    .flat_map(|(i, p)| {
                        p.queries
                            .iter()
                            .enumerate()
                            .filter(|(_, q)| !granted.queries.contains(&q.query))
                            .map(move |(j, _)| format!("spec.phases[{i}].queries[{j}]"))
                    })
                    .collect();
                (!texts.is_empty()).then(|| {
                    format!(
                        "queries not listed in its spec.prometheus.queries: {}",
                        listed(texts)
                    )
                })
            }
        };
        if let Some(problem) = problem {
            return Err(ConsentError::QueriesNotGranted { operator, problem });
        }
    }
    if let Err(e) = crate::egress::EgressPolicy::allowing(&grant.spec.allow_fetch_from) {
        return Err(ConsentError::Invalid {
            operator,
            field: "spec.allowFetchFrom",
            problem: crate::worker_text::bound_owned(e.to_string(), crate::worker_text::NAME_BYTES),
        });
    }
    if let Some(t) = grant
        .spec
        .tenant
        .as_deref()
        .filter(|t| !crate::object_names::is_dns_label(t))
    {
        return Err(ConsentError::Invalid {
            operator,
            field: "spec.tenant",
            problem: format!(
                "{:?} is not a name (lowercase alphanumerics and '-', at most 63)",
                crate::worker_text::bounded(t, 63)
            ),
        });
    }
    for ns in &grant.spec.output_namespaces {
        if ns != crate::controller::context::EVERY_OUTPUT_NAMESPACE
            && !crate::object_names::is_dns_label(ns)
        {
            return Err(ConsentError::Invalid {
                operator,
                field: "spec.outputNamespaces",
                problem: format!(
                    "{:?} is not a namespace name",
                    crate::worker_text::bounded(ns, 63)
                ),
            });
        }
    }
    Ok(())
}

/// Reads `op`'s grant and checks it; the grant that consents.
pub async fn consent(
    grants: &Api<WasmOperatorGrant>,
    op: &WasmOperator,
) -> Result<WasmOperatorGrant, ConsentError> {
    let grant =
        grants
            .get_opt(&op.name_any())
            .await
            .map_err(|source| ConsentError::Unreadable {
                operator: op.name_any(),
                source,
            })?;
    check(grant.as_ref(), op)?;
    grant.ok_or(ConsentError::Missing {
        operator: op.name_any(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{KindRef, WasmOperatorGrantSpec};

    fn operator(uid: &str, sensitive: bool) -> WasmOperator {
        let mut spec: crate::crd::WasmOperatorSpec = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "example.com/v1", "kind": "Thing"},
            "phases": [{"name": "Start", "initial": true, "final": true}]}))
        .expect("a spec");
        if sensitive {
            let secret = KindRef::new("v1", "Secret");
            spec.allow_sensitive_kinds = vec![secret.clone()];
            spec.finalizer = serde_json::from_value(serde_json::json!({
                "module": {"file": {"path": "f.wasm"}},
                "inputs": [{"name": "s", "apiVersion": "v1", "kind": "Secret"}]}))
            .ok();
        }
        let mut op = WasmOperator::new("payments", spec);
        op.metadata.uid = Some(uid.into());
        op
    }

    fn grant(uid: &str, kinds: &[(&str, &str)]) -> WasmOperatorGrant {
        WasmOperatorGrant::new(
            "payments",
            WasmOperatorGrantSpec {
                operator_uid: uid.into(),
                sensitive_kinds: kinds.iter().map(|(v, k)| KindRef::new(*v, *k)).collect(),
                modules: crate::crd::ModuleSourcesGrant {
                    files: vec!["f.wasm".into()],
                    ..Default::default()
                },
                ..Default::default()
            },
        )
    }

    #[test]
    fn only_a_grant_for_this_uid_listing_its_sensitive_kinds_consents() {
        let reason = |r: Result<(), ConsentError>| r.err().map(|e| e.reason());
        assert_eq!(
            reason(check(None, &operator("u1", false))),
            Some("GrantMissing")
        );
        assert_eq!(
            reason(check(Some(&grant("u1", &[])), &operator("u1", false))),
            None
        );
        let squatted = check(Some(&grant("u1", &[])), &operator("u2", false));
        assert_eq!(reason(squatted), Some("GrantForAnotherOperator"));
        // The author asks for Secrets (allowSensitiveKinds); the admin did not consent.
        let asked = check(Some(&grant("u1", &[])), &operator("u1", true));
        let Err(e) = asked else { panic!("consented") };
        assert_eq!(e.reason(), "SensitiveKindNotGranted");
        assert!(
            e.to_string()
                .contains("v1 Secret (spec.finalizer.inputs[0])"),
            "{e}"
        );
        assert_eq!(
            reason(check(
                Some(&grant("u1", &[("v1", "Secret")])),
                &operator("u1", true)
            )),
            None
        );
        let mut no_uid = operator("", false);
        no_uid.metadata.uid = None;
        assert_eq!(
            reason(check(Some(&grant("", &[])), &no_uid)),
            Some("GrantForAnotherOperator"),
            "an object without a uid is never granted"
        );
    }

    fn with_modules(op: &mut WasmOperator, phase_module: serde_json::Value) {
        op.spec.phases[0].module = Some(serde_json::from_value(phase_module).expect("a module"));
    }

    #[test]
    fn every_module_source_and_pull_secret_must_be_granted() {
        let mut op = operator("u1", false);
        with_modules(
            &mut op,
            serde_json::json!({"oci": {"reference": "registry.example:5000/team/worker:1",
                "pullSecret": {"name": "regcred"}}}),
        );
        op.spec.phases[0].shadow = serde_json::from_value(serde_json::json!({
            "configMap": {"name": "candidate", "key": "m.wasm", "sha256": "0".repeat(64)}}))
        .ok();
        let mut g = grant("u1", &[]);
        let e = check(Some(&g), &op).expect_err("nothing granted");
        assert_eq!(e.reason(), "ModuleSourceNotGranted");
        let text = e.to_string();
        for named in [
            "host registry.example:5000 (spec.phases[0].module.oci)",
            "pull Secret wasmpilot-system/regcred (spec.phases[0].module.oci.pullSecret)",
            "ConfigMap wasmpilot-system/candidate (spec.phases[0].shadow.configMap)",
        ] {
            assert!(text.contains(named), "{named}: {text}");
        }
        for (_, source) in module_sources(&op.spec) {
            source.add_to(&mut g.spec.modules);
        }
        assert!(check(Some(&g), &op).is_ok());
        // Another team's pull Secret, in the host's namespace the host reads as itself.
        with_modules(
            &mut op,
            serde_json::json!({"oci": {"reference": "registry.example:5000/team/worker:1",
                "pullSecret": {"name": "other-team-regcred"}}}),
        );
        let e = check(Some(&g), &op).expect_err("another pull Secret");
        assert!(e.to_string().contains("other-team-regcred"), "{e}");
        // A URL's host, with its port.
        with_modules(
            &mut op,
            serde_json::json!({"url": {"url": "https://Mods.Example:8443/w.wasm",
                "sha256": "0".repeat(64)}}),
        );
        let e = check(Some(&g), &op).expect_err("another host");
        assert!(e.to_string().contains("host mods.example:8443"), "{e}");
    }

    #[test]
    fn queries_run_only_against_the_granted_prometheus_and_texts() {
        let mut op = operator("u1", false);
        op.spec.phases[0].queries = vec![serde_json::from_value(serde_json::json!({
            "name": "rate", "query": "sum(rate(x{app=\"{{a}}\"}[1m]))",
            "params": {"a": "metadata.name"}}))
        .expect("a query")];
        let mut g = grant("u1", &[]);
        let e = check(Some(&g), &op).expect_err("no Prometheus granted");
        assert_eq!(e.reason(), "QueriesNotGranted");
        assert!(e.to_string().contains("the host's own Prometheus"), "{e}");
        g.spec.prometheus = queries_asked(&op.spec);
        assert!(check(Some(&g), &op).is_ok());
        // Its own Prometheus named by the author: not the granted one.
        op.spec.prometheus =
            serde_json::from_value(serde_json::json!({"url": "http://prometheus.other-team:9090"}))
                .ok();
        let e = check(Some(&g), &op).expect_err("another server");
        assert!(e.to_string().contains("prometheus.other-team"), "{e}");
        op.spec.prometheus = None;
        // Another query text (every tenant's metrics).
        op.spec.phases[0].queries[0].query = "sum(rate(x[1m]))".into();
        let e = check(Some(&g), &op).expect_err("another query");
        assert!(e.to_string().contains("spec.phases[0].queries[0]"), "{e}");
    }

    #[test]
    fn a_grant_that_cannot_be_used_says_which_field() {
        let op = operator("u1", false);
        let mut g = grant("u1", &[]);
        g.spec.allow_fetch_from = vec!["not-an-address".into()];
        let e = check(Some(&g), &op).expect_err("unparsable");
        assert_eq!(e.reason(), "GrantInvalid");
        assert!(e.to_string().contains("spec.allowFetchFrom"), "{e}");
        g.spec.allow_fetch_from = vec!["10.1.0.0/16".into()];
        g.spec.output_namespaces = vec!["Team A".into()];
        let e = check(Some(&g), &op).expect_err("not a namespace");
        assert!(e.to_string().contains("spec.outputNamespaces"), "{e}");
    }
}
