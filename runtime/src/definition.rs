//! Validates a `WasmOperator` spec into an `OperatorDefinition` the host can run.
//! Every error names the offending field, so it can go straight into a Condition message.

use crate::crd::{InputSpec, KindRef, ModuleRef, QuerySpec, WasmOperatorSpec, WorkerLimits};
use crate::sandbox::{LimitOverride, Randomness};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Default resync interval when the WasmOperator does not set one.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(300);

/// A definition problem, naming the field; with the definition's other problems found in the
/// same pass in `more` (an author fixes them in one round, not one per apply).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {}{}", shown_problem(.problem), more_problems(.more))]
pub struct DefinitionError {
    pub field: String,
    pub problem: String,
    pub more: Vec<DefinitionError>,
}

// The limits live with the CRD's schema, which states them to the API server too (a
// definition past one is refused at `kubectl apply`); the host checks them again for a CRD
// installed without them.
pub use crate::crd::{MAX_NAME_BYTES, MAX_PER_PHASE, MAX_PHASES};
use crate::crd::{MAX_QUERY_BYTES, MAX_URL_BYTES};

/// At most this many problems are named in one error; the rest are counted.
const MAX_PROBLEMS_NAMED: usize = 10;

/// The most of one problem's text an error shows: a problem may quote what the definition's
/// author wrote (a 40 KB reference), and ten of them fit in a Condition's message.
const PROBLEM_BYTES: usize = 300;

fn shown_problem(problem: &str) -> std::borrow::Cow<'_, str> {
    crate::worker_text::bounded(problem, PROBLEM_BYTES)
}

fn more_problems(more: &[DefinitionError]) -> String {
    let mut text: String = more
        .iter()
        .take(MAX_PROBLEMS_NAMED - 1)
        .map(|e| format!("; {}: {}", e.field, shown_problem(&e.problem)))
        .collect();
    if more.len() >= MAX_PROBLEMS_NAMED {
        text.push_str(&format!(
            "; and {} more",
            more.len() - (MAX_PROBLEMS_NAMED - 1)
        ));
    }
    text
}

impl DefinitionError {
    /// The first of `errors`, carrying the others; `None` when there are none.
    fn all(mut errors: Vec<DefinitionError>) -> Option<DefinitionError> {
        if errors.is_empty() {
            return None;
        }
        let mut first = errors.remove(0);
        first.more.extend(errors);
        Some(first)
    }
}

/// Kinds a definition may use only when it lists them in `spec.allowSensitiveKinds` (group,
/// kind; any version): reading them exposes credentials, writing them changes who may do what
/// in the cluster or what the API server admits.
const SENSITIVE_KINDS: &[(&str, &str)] = &[
    ("", "Secret"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
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
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    // The host's own: other teams' definitions (reading them shows what they run and from
    // where; writing them changes it).
    (HOST_GROUP, "WasmOperator"),
];

/// Kinds an operator may write only when the admin allows them (as outputs: reading them is
/// ordinary): a workload runs pods with any ServiceAccount of its namespace, so writing one acts
/// with that account's rights; a Service, Endpoints or EndpointSlice takes another workload's
/// traffic; a NetworkPolicy opens or closes the namespace's network; a Lease can pose as a
/// leader; a ServiceAccount is an identity; and the kinds of GitOps and secret controllers
/// (Argo CD, Flux, External Secrets) have their controller act for their writer.
const SENSITIVE_OUTPUT_KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("", "ReplicationController"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("", "ServiceAccount"),
    ("", "Service"),
    ("", "Endpoints"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("coordination.k8s.io", "Lease"),
    ("argoproj.io", "Application"),
    ("argoproj.io", "ApplicationSet"),
    ("argoproj.io", "AppProject"),
    ("kustomize.toolkit.fluxcd.io", "Kustomization"),
    ("helm.toolkit.fluxcd.io", "HelmRelease"),
    ("source.toolkit.fluxcd.io", "GitRepository"),
    ("external-secrets.io", "ExternalSecret"),
    ("external-secrets.io", "ClusterExternalSecret"),
    ("external-secrets.io", "SecretStore"),
    ("external-secrets.io", "ClusterSecretStore"),
];

/// Whether writing `kind` is one of [`SENSITIVE_OUTPUT_KINDS`].
pub fn is_sensitive_output(kind: &KindRef) -> bool {
    let group = kind.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    SENSITIVE_OUTPUT_KINDS
        .iter()
        .any(|(g, k)| *g == group && *k == kind.kind)
}

/// The API group of the host's own kinds: no operator manages a kind of it.
const HOST_GROUP: &str = "wasmpilot.io";

/// Whether `kind` is one of [`SENSITIVE_KINDS`].
pub fn is_sensitive(kind: &KindRef) -> bool {
    let group = kind.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    SENSITIVE_KINDS
        .iter()
        .any(|(g, k)| *g == group && *k == kind.kind)
}

/// Whether the definition lists `kind` (group and kind; any version) as allowed.
pub fn allows_sensitive(spec: &WasmOperatorSpec, kind: &KindRef) -> bool {
    spec.allow_sensitive_kinds
        .iter()
        .any(|a| same_kind(a, kind))
}

/// Every kind the definition names, with the field naming it.
pub fn declared_kinds(spec: &WasmOperatorSpec) -> Vec<(KindRef, String)> {
    let mut kinds = vec![(spec.resource.clone(), "spec.resource".to_string())];
    for (i, p) in spec.phases.iter().enumerate() {
        for (j, input) in p.inputs.iter().enumerate() {
            let k = KindRef::new(&input.api_version, &input.kind);
            kinds.push((k, format!("spec.phases[{i}].inputs[{j}]")));
        }
        for (j, o) in p.outputs.iter().enumerate() {
            kinds.push((o.kind.clone(), format!("spec.phases[{i}].outputs[{j}]")));
        }
    }
    for (j, input) in spec.finalizer.iter().flat_map(|f| &f.inputs).enumerate() {
        let k = KindRef::new(&input.api_version, &input.kind);
        kinds.push((k, format!("spec.finalizer.inputs[{j}]")));
    }
    kinds
}

/// Whether `a` and `b` are one kind (group and kind; any version).
pub fn same_kind(a: &KindRef, b: &KindRef) -> bool {
    let group = |k: &KindRef| {
        k.api_version
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_owned()
    };
    a.kind == b.kind && group(a) == group(b)
}

/// Every use of a kind the admin must allow, with the field naming it and why: a sensitive
/// kind anywhere, and an output of the operator's own resource kind (each resource a worker
/// creates runs the operator again and may create more, without end).
pub fn sensitive_uses(spec: &WasmOperatorSpec) -> Vec<(KindRef, String, &'static str)> {
    let mut uses: Vec<_> = declared_kinds(spec)
        .into_iter()
        .filter(|(kind, _)| is_sensitive(kind))
        .map(|(kind, field)| (kind, field, "is a sensitive kind"))
        .collect();
    for (i, p) in spec.phases.iter().enumerate() {
        for (j, kind) in p.outputs.iter().map(|o| &o.kind).enumerate() {
            if is_sensitive_output(kind) && !is_sensitive(kind) {
                uses.push((
                    kind.clone(),
                    format!("spec.phases[{i}].outputs[{j}]"),
                    "acts beyond the operator's own rights once written (a workload's pods run as any ServiceAccount of their namespace; a Service or NetworkPolicy steers traffic; a Lease, ServiceAccount or GitOps or secret controller's object acts for its writer)",
                ));
            }
            if same_kind(kind, &spec.resource) {
                uses.push((
                    kind.clone(),
                    format!("spec.phases[{i}].outputs[{j}]"),
                    "is the operator's own resource kind: each resource its worker creates runs it again and may create more, without end",
                ));
            }
        }
    }
    uses
}

/// A sensitive use is allowed only when its kind is listed in `spec.allowSensitiveKinds`: one
/// problem for each field naming one that is not.
fn sensitive_kinds_not_allowed(spec: &WasmOperatorSpec) -> Vec<DefinitionError> {
    sensitive_uses(spec)
        .into_iter()
        .filter(|(kind, _, _)| !allows_sensitive(spec, kind))
        .map(|(kind, field, why)| {
            invalid(
                field,
                format!(
                    "{} {} {why}: list it in spec.allowSensitiveKinds (a field an admin reviews) to use it",
                    kind.api_version, kind.kind
                ),
            )
        })
        .collect()
}

/// `spec.resourceSelector`, checked as Kubernetes checks a selector. With a finalizer it is
/// refused: a resource relabelled out of it would keep the host's finalizer, which no one
/// would remove (the host no longer watches it), and its deletion would hang.
fn resource_selector(
    spec: &WasmOperatorSpec,
) -> Result<Option<wasmpilot_selection::LabelSelector>, DefinitionError> {
    let Some(selector) = &spec.resource_selector else {
        return Ok(None);
    };
    if spec.finalizer.is_some() {
        return Err(invalid(
            "spec.resourceSelector",
            "cannot be combined with spec.finalizer: a resource relabelled out of the selector would keep the finalizer with no one to remove it",
        ));
    }
    wasmpilot_selection::LabelSelector::from_parts(
        &selector.match_labels.clone().unwrap_or_default(),
        selector.match_expressions.as_deref().unwrap_or_default(),
        "spec.resourceSelector",
    )
    .map(Some)
    .map_err(|e| invalid(e.field, e.problem))
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> DefinitionError {
    DefinitionError {
        field: field.into(),
        problem: problem.into(),
        more: Vec::new(),
    }
}

/// `result`'s value, or `None` with its problem added to `problems`.
fn gathered<T>(
    problems: &mut Vec<DefinitionError>,
    result: Result<T, DefinitionError>,
) -> Option<T> {
    result.map_err(|e| problems.push(e)).ok()
}

/// Whether `group` is one of Kubernetes' own API groups: the core group, the few without a
/// domain, and `*.k8s.io` (reserved for them; a CRD there needs Kubernetes' approval).
pub fn is_kubernetes_group(group: &str) -> bool {
    matches!(
        group,
        "" | "apps" | "batch" | "autoscaling" | "policy" | "extensions"
    ) || group.ends_with(".k8s.io")
        || group == "k8s.io"
}

/// The kind the operator manages: a valid kind, a custom resource's (the host writes its
/// status and finalizers, which Kubernetes' own kinds keep for their controllers), and none
/// of the host's own.
fn check_resource(resource: &KindRef) -> Result<(), DefinitionError> {
    check_kind(resource, "spec.resource")?;
    let group = resource.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if is_kubernetes_group(group) {
        return Err(invalid(
            "spec.resource",
            format!(
                "{} {} is one of Kubernetes' own kinds: an operator's resource is a custom resource (a CRD's kind), whose status (phase, Conditions) and finalizer the host writes; Kubernetes' own kinds keep theirs for their controllers. Read it as an input instead",
                resource.api_version, resource.kind
            ),
        ));
    }
    if resource.api_version.rsplit_once('/').map(|(g, _)| g) == Some(HOST_GROUP) {
        return Err(invalid(
            "spec.resource",
            format!(
                "{} {} is a kind of the host's own ({HOST_GROUP}): the host manages those, and an operator managing them would write other teams' WasmOperators",
                resource.api_version, resource.kind
            ),
        ));
    }
    Ok(())
}

/// How long the finalizer may stay pending, and whether it is then given up.
fn finalizer_pending_timeout(
    spec: &WasmOperatorSpec,
) -> Result<Option<(Duration, bool)>, DefinitionError> {
    let Some(f) = spec.finalizer.as_ref() else {
        return Ok(None);
    };
    let Some(t) = &f.pending_timeout else {
        return Ok(None);
    };
    let timeout =
        parse_interval(t).map_err(|e| invalid("spec.finalizer.pendingTimeout", e.to_string()))?;
    Ok(Some((
        timeout,
        f.on_pending_timeout == Some(crate::crd::OnPendingTimeout::GiveUp),
    )))
}

/// Each URL of `spec` naming an IP literal that `egress` refuses, as a problem of its field.
fn refused_addresses(
    spec: &WasmOperatorSpec,
    egress: &crate::egress::EgressPolicy,
) -> Vec<DefinitionError> {
    let mut modules: Vec<(String, &ModuleRef)> = Vec::new();
    for (i, p) in spec.phases.iter().enumerate() {
        modules.extend(
            p.module
                .iter()
                .map(|m| (format!("spec.phases[{i}].module"), m)),
        );
        modules.extend(
            p.shadow
                .iter()
                .map(|m| (format!("spec.phases[{i}].shadow"), m)),
        );
    }
    if let Some(f) = &spec.finalizer {
        modules.push(("spec.finalizer.module".into(), &f.module));
    }
    let mut problems: Vec<DefinitionError> = modules
        .into_iter()
        .filter_map(|(field, m)| {
            let (sub, refused) = crate::modules::refused_literal_address(m, egress)?;
            Some(invalid(format!("{field}.{sub}"), refused.to_string()))
        })
        .collect();
    let prometheus = spec
        .prometheus
        .as_ref()
        .and_then(|p| reqwest::Url::parse(&p.url).ok());
    if let Some(Err(refused)) = prometheus.map(|url| egress.check_url(&url)) {
        problems.push(invalid("spec.prometheus.url", refused.to_string()));
    }
    problems
}

/// The Prometheus the phases' queries go to: an http(s) URL and a timeout within the host's;
/// each problem with either is added to `problems`.
fn prometheus(
    spec: &WasmOperatorSpec,
    problems: &mut Vec<DefinitionError>,
) -> Option<(String, Duration)> {
    let p = spec.prometheus.as_ref()?;
    let url_problem = !(p.url.starts_with("http://") || p.url.starts_with("https://"));
    if p.url.len() > MAX_URL_BYTES {
        problems.push(invalid(
            "spec.prometheus.url",
            format!("is {} bytes, more than {MAX_URL_BYTES}", p.url.len()),
        ));
    } else if url_problem {
        problems.push(invalid(
            "spec.prometheus.url",
            format!("{:?} is not an http(s) URL", p.url),
        ));
    } else if let Some(problem) = prometheus_url_problem(&p.url) {
        problems.push(invalid("spec.prometheus.url", problem));
    }
    let timeout = match &p.timeout {
        None => crate::promql::DEFAULT_TIMEOUT,
        Some(t) => gathered(
            problems,
            parse_interval_allowing_subsecond(t)
                .map_err(|e| invalid("spec.prometheus.timeout", e.to_string())),
        )?,
    };
    if timeout > crate::promql::MAX_TIMEOUT {
        problems.push(invalid(
            "spec.prometheus.timeout",
            format!(
                "{timeout:?} is more than the host's limit of {:?} per query",
                crate::promql::MAX_TIMEOUT
            ),
        ));
        return None;
    }
    (!url_problem).then(|| (p.url.clone(), timeout))
}

/// What is wrong with a Prometheus base URL: the host appends `/api/v1/query` and the query to
/// it, so the author names a server and the prefix it is served under, never another API path,
/// a query string, a fragment or credentials of their choosing.
fn prometheus_url_problem(url: &str) -> Option<String> {
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => return Some(format!("is not a URL: {e}")),
    };
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Some("has a query string or fragment: name the server (and its path prefix) only; the host adds /api/v1/query".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Some("carries credentials: the host sends none of the author's".into());
    }
    if parsed
        .path_segments()
        .into_iter()
        .flatten()
        .any(|s| s.eq_ignore_ascii_case("api") || s.contains('%'))
    {
        return Some(format!(
            "path {:?} names an API path: name the server (and its path prefix) only; the host adds /api/v1/query",
            crate::worker_text::bounded(parsed.path(), 128)
        ));
    }
    None
}

/// One validated phase.
#[derive(Clone, Debug)]
pub struct PhaseDefinition {
    pub name: String,
    pub is_final: bool,
    /// A resource in this phase counts as Ready (condition `Ready=True`): a final phase, or one
    /// declared `ready: true` (a steady phase whose worker keeps watching, e.g. AutoRoute's Ready).
    pub ready: bool,
    /// `None` only for final phases.
    pub module: Option<ModuleRef>,
    pub inputs: Vec<InputSpec>,
    pub outputs: Vec<KindRef>,
    /// The output kinds not changed in place (`outputs[].updateStrategy`).
    pub update_strategies: std::collections::BTreeMap<KindRef, crate::crd::UpdateStrategy>,
    /// Phases the worker may move to besides staying; empty: any declared phase.
    pub next: Vec<String>,
    pub limits: LimitOverride,
    /// Metric queries run before the worker; their samples arrive as inputs of the same names.
    pub queries: Vec<QuerySpec>,
    pub randomness: Randomness,
    /// A candidate component compared with `module` on live requests, never applied.
    pub shadow: Option<ModuleRef>,
}

impl PhaseDefinition {
    /// Whether moving from this phase to `next` is declared.
    pub fn allows(&self, next: &str) -> bool {
        next == self.name || self.next.is_empty() || self.next.iter().any(|n| n == next)
    }
}

/// A WasmOperator that passed validation.
#[derive(Clone, Debug)]
pub struct OperatorDefinition {
    pub name: String,
    pub resource: KindRef,
    /// Only the resources matching it are the operator's (`spec.resourceSelector`).
    pub resource_selector: Option<wasmpilot_selection::LabelSelector>,
    pub phases: Vec<PhaseDefinition>,
    pub initial_phase: String,
    pub finalizer: Option<ModuleRef>,
    /// The finalizer's declared inputs.
    pub finalizer_inputs: Vec<InputSpec>,
    pub finalizer_limits: LimitOverride,
    pub finalizer_randomness: Randomness,
    /// Deleting the WasmOperator runs the finalizer worker on each resource before releasing it.
    pub finalizer_on_operator_deletion: bool,
    /// How long a finalizer may stay pending, and whether it is then given up.
    pub finalizer_pending_timeout: Option<(Duration, bool)>,
    /// Transitions kept in each resource's `.status.history`.
    pub history_limit: usize,
    /// Prometheus for metric queries (URL, timeout), when the WasmOperator names one.
    pub prometheus: Option<(String, Duration)>,
    pub resync: Duration,
}

impl OperatorDefinition {
    /// The declared phases, comma-separated, for messages.
    pub fn phase_names(&self) -> String {
        self.phases
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Checks every part of `spec` and reports all its problems at once (an author fixes them
    /// in one round, not one per apply). Where its URLs lead is not checked: the tools that
    /// fetch with their user's own reach (`simulate`, `run-phase`) use this.
    pub fn validate(name: &str, spec: &WasmOperatorSpec) -> Result<Self, DefinitionError> {
        Self::validated(name, spec, None)
    }

    /// [`OperatorDefinition::validate`], and every URL of `spec` whose host is an IP literal
    /// (a module's, the Prometheus's) allowed by the host's egress policy (`wasmpilot run
    /// --allow-fetch-from`), refused in the words the host uses when it would connect: how the
    /// host loads a definition, and `wasmpilot deploy` checks one before the cluster is asked.
    pub fn validate_for_host(
        name: &str,
        spec: &WasmOperatorSpec,
        egress: &crate::egress::EgressPolicy,
    ) -> Result<Self, DefinitionError> {
        Self::validated(name, spec, Some(egress))
    }

    fn validated(
        name: &str,
        spec: &WasmOperatorSpec,
        egress: Option<&crate::egress::EgressPolicy>,
    ) -> Result<Self, DefinitionError> {
        let mut problems = Vec::new();
        if name.len() > MAX_OPERATOR_NAME_BYTES {
            problems.push(invalid(
                "metadata.name",
                format!(
                    "{:?} is {} characters: the name labels the operator's outputs ({}) and Leases, and a label value is at most {MAX_OPERATOR_NAME_BYTES}",
                    crate::worker_text::bounded(name, crate::worker_text::NAME_BYTES),
                    name.len(),
                    crate::OPERATOR_LABEL,
                ),
            ));
        }
        if let Err(e) = check_resource(&spec.resource) {
            problems.push(e);
        }
        if spec.phases.is_empty() {
            problems.push(invalid("spec.phases", "at least one phase is required"));
        }
        if spec.phases.len() > MAX_PHASES {
            problems.push(invalid(
                "spec.phases",
                format!(
                    "{} phases, more than the host's limit of {MAX_PHASES}",
                    spec.phases.len()
                ),
            ));
        }
        if spec.allow_sensitive_kinds.len() > MAX_PER_PHASE {
            problems.push(invalid(
                "spec.allowSensitiveKinds",
                format!(
                    "{} kinds, more than the host's limit of {MAX_PER_PHASE}",
                    spec.allow_sensitive_kinds.len()
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        let mut phases = Vec::with_capacity(spec.phases.len());
        for (i, p) in spec.phases.iter().enumerate() {
            // Declared even when invalid: a `next` naming it is not reported again.
            let first_of_its_name = seen.insert(p.name.as_str());
            match check_phase(i, p, first_of_its_name) {
                Ok(phase) => phases.push(phase),
                Err(found) => problems.extend(found),
            }
        }
        for (i, p) in spec.phases.iter().enumerate() {
            for (j, n) in p.next.iter().enumerate() {
                if !seen.contains(n.as_str()) {
                    problems.push(invalid(
                        format!("spec.phases[{i}].next[{j}]"),
                        format!("{n:?} is not a declared phase"),
                    ));
                }
            }
        }
        let initial: Vec<_> = spec
            .phases
            .iter()
            .filter(|p| p.initial)
            .map(|p| p.name.clone())
            .collect();
        let initial_phase = match initial.as_slice() {
            [one] => one.clone(),
            // Already reported: no phase at all.
            [] if spec.phases.is_empty() => String::new(),
            [] => {
                problems.push(invalid(
                    "spec.phases",
                    "no phase is marked initial: exactly one must be",
                ));
                String::new()
            }
            many => {
                problems.push(invalid(
                    "spec.phases",
                    format!(
                        "{} phases are marked initial ({}): exactly one must be",
                        many.len(),
                        many.join(", ")
                    ),
                ));
                String::new()
            }
        };
        if let Some(f) = &spec.finalizer {
            gathered(
                &mut problems,
                check_module(&f.module, "spec.finalizer.module"),
            );
            if let Err(found) = check_inputs(&f.inputs, "spec.finalizer") {
                problems.extend(found);
            }
        }
        if let Some(e) = too_many_input_watches(spec) {
            problems.push(e);
        }
        let resync = match &spec.resync_interval {
            None => Some(DEFAULT_RESYNC),
            Some(s) => gathered(
                &mut problems,
                parse_interval(s).map_err(|e| invalid("spec.resyncInterval", e.to_string())),
            ),
        };
        let finalizer_limits = gathered(
            &mut problems,
            limit_override(
                spec.finalizer.as_ref().and_then(|f| f.limits.as_ref()),
                "spec.finalizer.limits",
            ),
        );
        let finalizer_pending_timeout = gathered(&mut problems, finalizer_pending_timeout(spec));
        let resource_selector = gathered(&mut problems, resource_selector(spec));
        let prometheus = prometheus(spec, &mut problems);
        if let Some(egress) = egress {
            problems.extend(refused_addresses(spec, egress));
        }
        // A field already refused (the host's own kind as the resource) is not named again.
        for e in sensitive_kinds_not_allowed(spec) {
            if !problems.iter().any(|p| p.field == e.field) {
                problems.push(e);
            }
        }
        if let Some(e) = DefinitionError::all(problems) {
            return Err(e);
        }
        Ok(OperatorDefinition {
            name: name.to_string(),
            resource: spec.resource.clone(),
            resource_selector: resource_selector.flatten(),
            phases,
            initial_phase,
            finalizer: spec.finalizer.as_ref().map(|f| f.module.clone()),
            finalizer_inputs: spec
                .finalizer
                .as_ref()
                .map(|f| f.inputs.clone())
                .unwrap_or_default(),
            // Each of these is `Some` here, as no problem was gathered.
            finalizer_limits: finalizer_limits.unwrap_or_default(),
            finalizer_randomness: randomness(spec.finalizer.as_ref().and_then(|f| f.randomness)),
            finalizer_on_operator_deletion: spec.finalizer.as_ref().is_some_and(|f| {
                f.on_operator_deletion == Some(crate::crd::OnOperatorDeletion::RunFinalizer)
            }),
            finalizer_pending_timeout: finalizer_pending_timeout.flatten(),
            history_limit: spec.history_limit.map_or(DEFAULT_HISTORY_LIMIT, |n| {
                (n as usize).min(MAX_HISTORY_LIMIT)
            }),
            prometheus,
            resync: resync.unwrap_or(DEFAULT_RESYNC),
        })
    }

    pub fn phase(&self, name: &str) -> Option<&PhaseDefinition> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// Every input declared: the phases', then the finalizer's.
    pub fn all_inputs(&self) -> impl Iterator<Item = &InputSpec> {
        self.phases
            .iter()
            .flat_map(|p| &p.inputs)
            .chain(&self.finalizer_inputs)
    }

    /// Every kind the operator reads, keyed for watching: inputs of all phases and the finalizer.
    pub fn input_kinds(&self) -> BTreeSet<KindRef> {
        self.all_inputs()
            .map(|i| KindRef::new(&i.api_version, &i.kind))
            .collect()
    }

    /// Every kind any phase may write.
    pub fn output_kinds(&self) -> BTreeSet<KindRef> {
        self.phases
            .iter()
            .flat_map(|p| p.outputs.iter().cloned())
            .collect()
    }

    /// Modules to load, keyed by role: the phase name, or `finalizer`.
    pub fn modules(&self) -> HashMap<String, ModuleRef> {
        let mut m: HashMap<String, ModuleRef> = self
            .phases
            .iter()
            .filter_map(|p| p.module.clone().map(|m| (p.name.clone(), m)))
            .collect();
        if let Some(f) = &self.finalizer {
            m.insert(FINALIZER_ROLE.to_string(), f.clone());
        }
        m
    }
}

fn limit_override(l: Option<&WorkerLimits>, field: &str) -> Result<LimitOverride, DefinitionError> {
    let Some(l) = l else {
        return Ok(LimitOverride::default());
    };
    let deadline = match &l.deadline {
        Some(d) => {
            let d = parse_duration(d, "500ms or 2s")
                .map_err(|e| invalid(format!("{field}.deadline"), e.to_string()))?;
            if d < Duration::from_millis(10) {
                return Err(invalid(
                    format!("{field}.deadline"),
                    "must be at least 10ms",
                ));
            }
            Some(d)
        }
        None => None,
    };
    for (value, name) in [
        (l.memory_mib, "memoryMib"),
        (l.max_output_kib, "maxOutputKib"),
        (l.log_kib, "logKib"),
        (l.max_status_kib, "maxStatusKib"),
    ] {
        if value == Some(0) {
            return Err(invalid(format!("{field}.{name}"), "must be at least 1"));
        }
    }
    let kib = |k: Option<u32>| k.map(|k| (k as usize) << 10);
    Ok(LimitOverride {
        deadline,
        memory_bytes: l.memory_mib.map(|m| (m as usize) << 20),
        max_outputs: l.max_outputs.map(|m| m as usize),
        max_output_bytes: kib(l.max_output_kib),
        log_lines: l.log_lines.map(|n| n as usize),
        log_bytes: kib(l.log_kib),
        max_status_bytes: kib(l.max_status_kib),
    })
}

/// Transitions kept in `.status.history` unless the WasmOperator says otherwise.
pub const DEFAULT_HISTORY_LIMIT: usize = 10;

/// The most transitions a WasmOperator may ask to keep (the status lives in the resource).
pub const MAX_HISTORY_LIMIT: usize = 100;

fn randomness(spec: Option<crate::crd::RandomnessSpec>) -> Randomness {
    match spec {
        Some(crate::crd::RandomnessSpec::Host) => Randomness::Host,
        Some(crate::crd::RandomnessSpec::Seeded) | None => Randomness::Seeded,
    }
}

/// Checks declared inputs (names, kinds, selectors, fields) at `field` (`spec.phases[0]`,
/// `spec.finalizer`); returns their names.
/// Checks declared inputs (of a phase or the finalizer, `field`), each on its own: one problem
/// per input that has one. Returns the names declared.
fn check_inputs<'a>(
    inputs: &'a [InputSpec],
    field: &str,
) -> Result<BTreeSet<&'a str>, Vec<DefinitionError>> {
    if inputs.len() > MAX_PER_PHASE {
        return Err(vec![invalid(
            format!("{field}.inputs"),
            format!(
                "{} entries, more than the host's limit of {MAX_PER_PHASE}",
                inputs.len()
            ),
        )]);
    }
    let mut input_names = BTreeSet::new();
    let problems: Vec<DefinitionError> = inputs
        .iter()
        .enumerate()
        .filter_map(|(j, input)| {
            check_input(input, &format!("{field}.inputs[{j}]"), &mut input_names).err()
        })
        .collect();
    if problems.is_empty() {
        Ok(input_names)
    } else {
        Err(problems)
    }
}

/// Checks one input (`field`): its name (not among `names`, where it is added), kind,
/// selector, projection and `selectorFrom`.
fn check_input<'a>(
    input: &'a InputSpec,
    f: &str,
    names: &mut BTreeSet<&'a str>,
) -> Result<(), DefinitionError> {
    if input.name.trim().is_empty() {
        return Err(invalid(format!("{f}.name"), "must not be empty"));
    }
    if input.name.len() > MAX_NAME_BYTES {
        return Err(invalid(
            format!("{f}.name"),
            format!("is {} bytes, more than {MAX_NAME_BYTES}", input.name.len()),
        ));
    }
    if !names.insert(input.name.as_str()) {
        return Err(invalid(
            format!("{f}.name"),
            format!("duplicate input name {:?}", input.name),
        ));
    }
    check_kind(&KindRef::new(&input.api_version, &input.kind), f)?;
    wasmpilot_selection::LabelSelector::from_parts(
        &input.match_labels,
        &input.match_expressions,
        f,
    )
    .map_err(|e| invalid(e.field, e.problem))?;
    if !input.fields.is_empty() {
        wasmpilot_selection::Projection::new(&input.fields)
            .map_err(|e| invalid(format!("{f}.fields[{}]", e.index), e.problem))?;
    }
    for (key, path) in [
        ("selectorFrom", &input.selector_from),
        ("matchLabelsFrom", &input.match_labels_from),
        ("nameFrom", &input.name_from),
        ("namespaceFrom", &input.namespace_from),
    ] {
        let Some(path) = path else { continue };
        if path.len() > MAX_NAME_BYTES {
            return Err(invalid(
                format!("{f}.{key}"),
                format!("is {} bytes, more than {MAX_NAME_BYTES}", path.len()),
            ));
        }
        if path.is_empty() || path.split('.').any(str::is_empty) {
            return Err(invalid(
                format!("{f}.{key}"),
                format!(
                    "{:?} is not a field path like spec.source",
                    crate::worker_text::bounded(path, 80)
                ),
            ));
        }
    }
    if input.owned && (input.all_namespaces || input.namespace_from.is_some()) {
        return Err(invalid(
            format!("{f}.owned"),
            "an owned input reads the resource's own outputs: allNamespaces and namespaceFrom do not apply",
        ));
    }
    Ok(())
}

/// Checks one phase (`spec.phases[i]`), part by part: its name, module, counts, inputs and
/// queries, outputs, shadow and limits; every part's problem is reported, not only the first.
fn check_phase(
    i: usize,
    p: &crate::crd::PhaseSpec,
    first_of_its_name: bool,
) -> Result<PhaseDefinition, Vec<DefinitionError>> {
    let field = format!("spec.phases[{i}]");
    let name = || -> Result<(), DefinitionError> {
        if p.name.trim().is_empty() {
            return Err(invalid(format!("{field}.name"), "must not be empty"));
        }
        if !is_label_value(&p.name) {
            return Err(invalid(
                format!("{field}.name"),
                format!("{:?} must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric (it labels outputs)", p.name),
            ));
        }
        if !first_of_its_name {
            return Err(invalid(
                format!("{field}.name"),
                format!("duplicate phase name {:?}", p.name),
            ));
        }
        Ok(())
    };
    let module = || -> Result<(), DefinitionError> {
        match (&p.module, p.is_final) {
            (None, false) => Err(invalid(
                format!("{field}.module"),
                format!("phase {:?} is not final, so it needs a module", p.name),
            )),
            (Some(m), _) => check_module(m, &format!("{field}.module")),
            (None, true) => Ok(()),
        }
    };
    let counts = || -> Result<(), DefinitionError> {
        for (part, count, limit) in [
            ("outputs", p.outputs.len(), MAX_PER_PHASE),
            ("queries", p.queries.len(), MAX_PER_PHASE),
            ("next", p.next.len(), MAX_PHASES),
        ] {
            if count > limit {
                return Err(invalid(
                    format!("{field}.{part}"),
                    format!("{count} entries, more than the host's limit of {limit}"),
                ));
            }
        }
        Ok(())
    };
    // Each input, query and output on its own: one problem per entry that has one.
    let inputs_and_queries = || -> Vec<DefinitionError> {
        let (mut names, mut problems) = match check_inputs(&p.inputs, &field) {
            Ok(names) => (names, Vec::new()),
            // The names of the inputs that are well named still count below.
            Err(problems) => (p.inputs.iter().map(|i| i.name.as_str()).collect(), problems),
        };
        for (j, q) in p.queries.iter().enumerate() {
            let f = format!("{field}.queries[{j}]");
            problems.extend(check_query(q, &f, &mut names).err());
        }
        problems
    };
    let outputs = || -> Vec<DefinitionError> {
        p.outputs
            .iter()
            .enumerate()
            .filter_map(|(j, output)| {
                check_kind(&output.kind, &format!("{field}.outputs[{j}]")).err()
            })
            .collect()
    };
    let shadow = || -> Result<(), DefinitionError> {
        let Some(shadow) = &p.shadow else {
            return Ok(());
        };
        let f = format!("{field}.shadow");
        if p.is_final {
            return Err(invalid(
                f,
                format!("phase {:?} is final: it runs no worker to shadow", p.name),
            ));
        }
        check_module(shadow, &f)?;
        if let Some(oci) = shadow
            .oci
            .as_ref()
            .filter(|o| o.sha256.is_none() && !o.reference.contains("@sha256:"))
        {
            return Err(invalid(
                format!("{f}.oci"),
                format!("a shadow module must be pinned: set sha256, or reference {} by manifest digest (@sha256:…)", oci.reference),
            ));
        }
        Ok(())
    };
    let mut found: Vec<DefinitionError> = [name(), module(), counts()]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    found.extend(inputs_and_queries());
    found.extend(outputs());
    found.extend(shadow().err());
    let limits = gathered(
        &mut found,
        limit_override(p.limits.as_ref(), &format!("{field}.limits")),
    );
    match limits {
        Some(limits) if found.is_empty() => Ok(PhaseDefinition {
            name: p.name.clone(),
            is_final: p.is_final,
            ready: p.is_final || p.ready,
            module: p.module.clone(),
            inputs: p.inputs.clone(),
            outputs: p.outputs.iter().map(|o| o.kind.clone()).collect(),
            update_strategies: p
                .outputs
                .iter()
                .filter_map(|o| Some((o.kind.clone(), o.update_strategy?)))
                .filter(|(_, s)| *s != crate::crd::UpdateStrategy::InPlace)
                .collect(),
            next: p.next.clone(),
            queries: p.queries.clone(),
            limits,
            randomness: randomness(p.randomness),
            shadow: p.shadow.clone(),
        }),
        _ => Err(found),
    }
}

/// Checks one metric query (`f`): its size, its name (not among the phase's input and query
/// `names`, where it is added) and its placeholders.
fn check_query<'a>(
    q: &'a crate::crd::QuerySpec,
    f: &str,
    names: &mut BTreeSet<&'a str>,
) -> Result<(), DefinitionError> {
    check_query_size(q, f)?;
    if !names.insert(q.name.as_str()) {
        return Err(invalid(
            format!("{f}.name"),
            format!(
                "{:?} is already the name of an input or query of this phase",
                q.name
            ),
        ));
    }
    crate::promql::check(q).map_err(|e| invalid(format!("{f}.query"), e.to_string()))
}

/// A query's name, text and parameters are within the host's limits (what a name or parameter
/// says is checked by [`crate::promql::check`]).
fn check_query_size(q: &crate::crd::QuerySpec, field: &str) -> Result<(), DefinitionError> {
    let too_long = |part: &str, len: usize, limit: usize| {
        invalid(
            format!("{field}.{part}"),
            format!("is {len} bytes, more than {limit}"),
        )
    };
    if q.name.trim().is_empty() {
        return Err(invalid(format!("{field}.name"), "must not be empty"));
    }
    if q.name.len() > MAX_NAME_BYTES {
        return Err(too_long("name", q.name.len(), MAX_NAME_BYTES));
    }
    if q.query.len() > MAX_QUERY_BYTES {
        return Err(too_long("query", q.query.len(), MAX_QUERY_BYTES));
    }
    if q.params.len() > MAX_PER_PHASE {
        return Err(invalid(
            format!("{field}.params"),
            format!(
                "{} entries, more than the host's limit of {MAX_PER_PHASE}",
                q.params.len()
            ),
        ));
    }
    for (param, path) in &q.params {
        if param.len() > MAX_NAME_BYTES || path.len() > MAX_NAME_BYTES {
            return Err(invalid(
                format!("{field}.params"),
                format!("a parameter or its field path is more than {MAX_NAME_BYTES} bytes"),
            ));
        }
    }
    Ok(())
}

/// Watches one operator's inputs may need: one per kind and `fields` (inputs of one kind with
/// different fields are cached apart). Each lists and watches every object of its kind the
/// operator may read, so a definition naming thousands of field sets (100 phases × 32 inputs)
/// would hold as many watches and copies of the kind in the shared host.
pub const MAX_INPUT_WATCHES: usize = 32;

/// The watches `spec`'s inputs need beyond [`MAX_INPUT_WATCHES`], as the problem naming them.
fn too_many_input_watches(spec: &WasmOperatorSpec) -> Option<DefinitionError> {
    let watches: BTreeSet<(KindRef, Option<wasmpilot_selection::Projection>)> = spec
        .phases
        .iter()
        .flat_map(|p| &p.inputs)
        .chain(spec.finalizer.iter().flat_map(|f| &f.inputs))
        .map(|i| {
            let projection = if i.fields.is_empty() {
                None
            } else {
                wasmpilot_selection::Projection::new(&i.fields).ok()
            };
            (KindRef::new(&i.api_version, &i.kind), projection)
        })
        .collect();
    (watches.len() > MAX_INPUT_WATCHES).then(|| {
        invalid(
            "spec.phases",
            format!(
                "the inputs need {} watches (one per kind and `fields`), more than {MAX_INPUT_WATCHES}: give inputs of one kind the same `fields` to share one",
                watches.len()
            ),
        )
    })
}

/// The longest WasmOperator name: its outputs carry it as a label value.
pub const MAX_OPERATOR_NAME_BYTES: usize = 63;

/// The role name the finalizer module is reported under.
pub const FINALIZER_ROLE: &str = "finalizer";

fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_kind(k: &KindRef, field: &str) -> Result<(), DefinitionError> {
    if k.api_version.trim().is_empty() {
        return Err(invalid(format!("{field}.apiVersion"), "must not be empty"));
    }
    if k.api_version.split('/').count() > 2 || k.api_version.split('/').any(|s| s.is_empty()) {
        return Err(invalid(
            format!("{field}.apiVersion"),
            format!("{:?} is not of the form group/version or v1", k.api_version),
        ));
    }
    if k.kind.trim().is_empty() {
        return Err(invalid(format!("{field}.kind"), "must not be empty"));
    }
    let (group, version) = k
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &k.api_version));
    let group_ok = group.is_empty() || crate::object_names::is_dns_subdomain(group);
    if !group_ok || !crate::object_names::is_dns_label(version) {
        return Err(invalid(
            format!("{field}.apiVersion"),
            format!(
                "{:?} is not a group (a DNS subdomain) and version",
                crate::worker_text::bounded(&k.api_version, crate::worker_text::NAME_BYTES)
            ),
        ));
    }
    let kind_ok = k.kind.len() <= 63
        && k.kind.starts_with(|c: char| c.is_ascii_alphabetic())
        && k.kind.bytes().all(|b| b.is_ascii_alphanumeric());
    if !kind_ok {
        return Err(invalid(
            format!("{field}.kind"),
            format!(
                "{:?} is not a kind (at most 63 letters and digits, starting with a letter)",
                crate::worker_text::bounded(&k.kind, crate::worker_text::NAME_BYTES)
            ),
        ));
    }
    Ok(())
}

fn check_module(m: &ModuleRef, field: &str) -> Result<(), DefinitionError> {
    crate::modules::check_ref(m).map_err(|e| {
        let field = match e.field() {
            "" => field.to_string(),
            sub => format!("{field}.{sub}"),
        };
        invalid(field, e.to_string())
    })
}

/// An interval (`spec.resyncInterval`, `spec.prometheus.timeout`) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum IntervalError {
    /// `examples` are durations of the kind the field expects, e.g. `30s or 5m`.
    #[error("{text:?} is not a duration like {examples} ({source})")]
    NotADuration {
        text: String,
        examples: &'static str,
        #[source]
        source: humantime::DurationError,
    },
    #[error("{text:?} is shorter than the minimum of 1s")]
    BelowOneSecond { text: String },
}

fn parse_duration(s: &str, examples: &'static str) -> Result<Duration, IntervalError> {
    humantime::parse_duration(s.trim()).map_err(|source| IntervalError::NotADuration {
        text: s.to_string(),
        examples,
        source,
    })
}

fn parse_interval_allowing_subsecond(s: &str) -> Result<Duration, IntervalError> {
    parse_duration(s, "500ms or 5s")
}

/// Parses `30s`, `5m`, `1h30m`; refuses zero and anything below one second.
pub fn parse_interval(s: &str) -> Result<Duration, IntervalError> {
    let d = parse_duration(s, "30s or 5m")?;
    if d < Duration::from_secs(1) {
        return Err(IntervalError::BelowOneSecond {
            text: s.to_string(),
        });
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{FileModule, PhaseSpec};

    fn module(path: &str) -> Option<ModuleRef> {
        Some(ModuleRef {
            file: Some(FileModule {
                path: path.into(),
                sha256: None,
            }),
            ..Default::default()
        })
    }

    fn phase(name: &str, initial: bool, is_final: bool) -> PhaseSpec {
        PhaseSpec {
            name: name.into(),
            ready: false,
            description: None,
            initial,
            is_final,
            module: if is_final { None } else { module("x.wasm") },
            inputs: vec![],
            outputs: vec![],
            next: vec![],
            limits: None,
            queries: vec![],
            randomness: None,
            shadow: None,
        }
    }

    fn spec(phases: Vec<PhaseSpec>) -> WasmOperatorSpec {
        WasmOperatorSpec {
            resource: KindRef::new("examples.io/v1", "AutoRoute"),
            resource_selector: None,
            phases,
            finalizer: None,
            resync_interval: Some("30s".into()),
            prometheus: None,
            history_limit: None,
            allow_sensitive_kinds: Vec::new(),
        }
    }

    #[test]
    fn valid_definition_has_initial_phase_and_resync() {
        let d = OperatorDefinition::validate(
            "a",
            &spec(vec![phase("Init", true, false), phase("Done", false, true)]),
        )
        .unwrap();
        assert_eq!(d.initial_phase, "Init");
        assert_eq!(d.resync, Duration::from_secs(30));
        assert!(d.phase("Done").unwrap().is_final);
        assert_eq!(d.modules().len(), 1);
    }

    #[test]
    fn inputs_needing_more_watches_than_the_bound_are_refused() {
        let input = |i: usize, field: String| -> InputSpec {
            serde_json::from_value(serde_json::json!({
                "name": format!("in{i}"), "apiVersion": "v1", "kind": "ConfigMap", "fields": [field]
            }))
            .unwrap()
        };
        let (mut a, mut b) = (phase("A", true, false), phase("B", false, false));
        // 40 inputs of one kind and one field set: one watch.
        a.inputs = (0..20).map(|i| input(i, "data".into())).collect();
        b.inputs = (0..20).map(|i| input(i, "data".into())).collect();
        assert!(OperatorDefinition::validate("a", &spec(vec![a.clone(), b.clone()])).is_ok());
        // Each with fields of its own: 40 watches.
        a.inputs = (0..20).map(|i| input(i, format!("data.a{i}"))).collect();
        b.inputs = (0..20).map(|i| input(i, format!("data.b{i}"))).collect();
        let e = OperatorDefinition::validate("a", &spec(vec![a, b]))
            .map(|_| ())
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("spec.phases: the inputs need 40 watches") && e.contains("more than 32"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e =
            OperatorDefinition::validate("a", &spec(vec![phase("A", false, false)])).unwrap_err();
        assert_eq!(e.field, "spec.phases");
        assert!(e.problem.contains("no phase is marked initial"));

        let e = OperatorDefinition::validate(
            "a",
            &spec(vec![phase("A", true, false), phase("B", true, false)]),
        )
        .unwrap_err();
        assert!(
            e.problem.contains("2 phases are marked initial (A, B)"),
            "{e}"
        );

        let e = OperatorDefinition::validate(
            "a",
            &spec(vec![phase("A", true, false), phase("A", false, false)]),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.phases[1].name");

        let mut p = phase("A", true, false);
        p.module = None;
        let e = OperatorDefinition::validate("a", &spec(vec![p])).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].module");

        let mut s = spec(vec![phase("A", true, false)]);
        s.resync_interval = Some("soon".into());
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        assert_eq!(e.field, "spec.resyncInterval");

        let mut p = phase("A", true, false);
        p.outputs.push(KindRef::new("", "Service").into());
        let e = OperatorDefinition::validate("a", &spec(vec![p])).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].outputs[0].apiVersion");
        // A kind and a group as Kubernetes names them (and no 40 KB of either in a message).
        for (kind, field) in [
            (KindRef::new("v1", "K".repeat(40_000)), "spec.resource.kind"),
            (KindRef::new("v1", "Config Map"), "spec.resource.kind"),
            (
                KindRef::new("Examples.IO/v1", "Route"),
                "spec.resource.apiVersion",
            ),
            (
                KindRef::new(format!("{}.io/v1", "g".repeat(40_000)), "Route"),
                "spec.resource.apiVersion",
            ),
        ] {
            let mut s = spec(vec![phase("A", true, false)]);
            s.resource = kind;
            let e = OperatorDefinition::validate("a", &s).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().len() < 1024, "{} bytes", e.to_string().len());
        }
        let mut s = spec(vec![phase("A", true, false)]);
        s.resource = KindRef::new("networking.istio.io/v1alpha3", "VirtualService");
        assert!(OperatorDefinition::validate("a", &s).is_ok());

        let mut p = phase("A", true, false);
        let input: crate::crd::InputSpec = serde_json::from_value(serde_json::json!({
            "name": "deployments", "apiVersion": "apps/v1", "kind": "Deployment",
            "fields": ["spec.selector", "spec.template.spec.containers[0].ports"],
        }))
        .unwrap();
        p.inputs.push(input);
        let e = OperatorDefinition::validate("a", &spec(vec![p])).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].inputs[0].fields[1]");
        assert!(e.problem.contains("'['"), "{e}");
    }

    /// Kubernetes' own kinds keep their status and finalizers for their controllers: no
    /// operator's resource is one (a Deployment's Conditions would be overwritten).
    #[test]
    fn kubernetes_own_kinds_are_not_an_operators_resource() {
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("v1", "Namespace"),
            ("apps/v1", "Deployment"),
            ("batch/v1", "Job"),
            ("networking.k8s.io/v1", "Ingress"),
            ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        ] {
            let mut s = spec(vec![phase("A", true, false)]);
            s.resource = KindRef::new(api_version, kind);
            let e = OperatorDefinition::validate("a", &s).unwrap_err();
            assert_eq!(e.field, "spec.resource", "{e}");
            assert!(e.problem.contains("one of Kubernetes' own kinds"), "{e}");
        }
        // Custom resources of any other group, including ones that end like Kubernetes'.
        for group in [
            "examples.io",
            "networking.istio.io",
            "k8s.example.org",
            "fake-k8s.io",
        ] {
            let mut s = spec(vec![phase("A", true, false)]);
            s.resource = KindRef::new(format!("{group}/v1"), "Thing");
            assert!(OperatorDefinition::validate("a", &s).is_ok(), "{group}");
        }
    }

    #[test]
    fn the_hosts_own_kinds_are_not_an_operators() {
        let mut s = spec(vec![phase("A", true, false)]);
        s.resource = KindRef::new("wasmpilot.io/v1alpha1", "WasmOperator");
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        assert_eq!(e.field, "spec.resource");
        assert!(e.problem.contains("a kind of the host's own"), "{e}");

        let mut p = phase("A", true, false);
        p.inputs.push(
            serde_json::from_value(serde_json::json!({
                "name": "definitions", "apiVersion": "wasmpilot.io/v1alpha1", "kind": "WasmOperator",
            }))
            .unwrap(),
        );
        let mut s = spec(vec![p]);
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].inputs[0]");
        assert!(e.problem.contains("is a sensitive kind"), "{e}");
        // An admin may allow reading them (a meta-operator reporting on the others).
        s.allow_sensitive_kinds
            .push(KindRef::new("wasmpilot.io/v1alpha1", "WasmOperator"));
        assert!(OperatorDefinition::validate("a", &s).is_ok());
        // Groups that only end like the host's are anyone's.
        let mut s = spec(vec![phase("A", true, false)]);
        s.resource = KindRef::new("test.wasmpilot.io/v1", "Probe");
        assert!(OperatorDefinition::validate("a", &s).is_ok());
    }

    /// An output of the operator's own resource kind (any version) would let each resource a
    /// worker creates create more, without end: the admin allows it or it is refused. Reading
    /// its own kind is anyone's.
    #[test]
    fn outputs_of_its_own_kind_are_the_admins_to_allow() {
        let mut p = phase("A", true, false);
        p.outputs
            .push(KindRef::new("examples.io/v2", "AutoRoute").into());
        p.inputs.push(
            serde_json::from_value(serde_json::json!({
                "name": "siblings", "apiVersion": "examples.io/v1", "kind": "AutoRoute",
            }))
            .unwrap(),
        );
        let mut s = spec(vec![p]);
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].outputs[0]", "{e}");
        assert!(
            e.problem
                .contains("examples.io/v2 AutoRoute is the operator's own resource kind"),
            "{e}"
        );
        assert!(e.more.is_empty(), "{e}");
        assert_eq!(
            sensitive_uses(&s)
                .into_iter()
                .map(|(_, field, _)| field)
                .collect::<Vec<_>>(),
            ["spec.phases[0].outputs[0]"]
        );
        s.allow_sensitive_kinds
            .push(KindRef::new("examples.io/v1", "AutoRoute"));
        assert!(OperatorDefinition::validate("a", &s).is_ok());
    }

    /// The phases' problems come in one error, so a hostile or hurried definition is fixed in
    /// one round; a flood of them is counted past the first ten.
    #[test]
    fn every_phase_problem_is_reported_at_once() {
        let mut long = phase(&"A".repeat(300), true, false);
        long.next = vec!["B".into(), "Nowhere".into()];
        let mut twin = phase("B", false, false);
        twin.module = None;
        let s = spec(vec![long, phase("B", true, false), twin]);
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.field, "spec.phases[0].name", "{text}");
        let fields: Vec<&str> = e.more.iter().map(|m| m.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                // Both of this phase's problems, not only the first.
                "spec.phases[2].name",
                "spec.phases[2].module",
                "spec.phases[0].next[1]",
                "spec.phases"
            ],
            "{text}"
        );
        assert!(
            text.contains("; spec.phases[2].name: duplicate phase name \"B\""),
            "{text}"
        );
        assert!(
            text.contains("\"Nowhere\" is not a declared phase"),
            "{text}"
        );
        assert!(text.contains("2 phases are marked initial"), "{text}");
        // Within one phase, each part's problems: name, every input, query and output, shadow,
        // limits.
        let mut crowded = phase("bad name", true, false);
        for input in [
            serde_json::json!({"name": "", "apiVersion": "v1", "kind": "ConfigMap"}),
            serde_json::json!({"name": "fine", "apiVersion": "v1", "kind": "ConfigMap"}),
            serde_json::json!({"name": "x", "apiVersion": "v1", "kind": "ConfigMap", "selectorFrom": "spec..x"}),
        ] {
            crowded.inputs.push(serde_json::from_value(input).unwrap());
        }
        crowded.queries.push(
            serde_json::from_value(serde_json::json!({"name": "fine", "query": "up"})).unwrap(),
        );
        crowded
            .outputs
            .push(KindRef::new("v1", "not-a-kind").into());
        crowded.outputs.push(KindRef::new("v1", "ConfigMap").into());
        crowded.outputs.push(KindRef::new("", "Widget").into());
        crowded.shadow = Some(ModuleRef::default());
        crowded.limits = Some(WorkerLimits {
            deadline: Some("soon".into()),
            ..Default::default()
        });
        let e = OperatorDefinition::validate("a", &spec(vec![crowded])).unwrap_err();
        let fields: Vec<&str> = std::iter::once(&e)
            .chain(&e.more)
            .map(|m| m.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.phases[0].name",
                "spec.phases[0].inputs[0].name",
                "spec.phases[0].inputs[2].selectorFrom",
                "spec.phases[0].queries[0].name",
                "spec.phases[0].outputs[0].kind",
                "spec.phases[0].outputs[2].apiVersion",
                "spec.phases[0].shadow",
                "spec.phases[0].limits.deadline",
            ],
            "{e}"
        );

        let many: Vec<PhaseSpec> = (0..30)
            .map(|i| {
                let mut p = phase(&format!("P{i}"), i == 0, false);
                p.next = vec![format!("Q{i}")];
                p
            })
            .collect();
        let text = OperatorDefinition::validate("a", &spec(many))
            .unwrap_err()
            .to_string();
        assert!(text.ends_with("; and 20 more"), "{text}");
        assert_eq!(
            text.matches("is not a declared phase").count(),
            10,
            "{text}"
        );
    }

    /// An operator's name labels its outputs: past a label value's 63 characters every apply
    /// would fail, so the definition is refused.
    #[test]
    fn an_operator_name_must_fit_a_label_value() {
        let s = spec(vec![phase("Init", true, false), phase("Done", false, true)]);
        assert!(OperatorDefinition::validate(&"a".repeat(63), &s).is_ok());
        let e = OperatorDefinition::validate(&"a".repeat(64), &s).unwrap_err();
        assert_eq!(e.field, "metadata.name", "{e}");
        assert!(e.problem.contains("is 64 characters"), "{e}");
    }

    /// Problems outside the phases (the resource, the finalizer, the resync interval,
    /// Prometheus, sensitive kinds) come in the same error as the phases'.
    #[test]
    fn every_problem_of_the_definition_is_reported_at_once() {
        let mut p = phase("A", false, false);
        p.inputs.push(
            serde_json::from_value(serde_json::json!({
                "name": "keys", "apiVersion": "v1", "kind": "Secret",
            }))
            .unwrap(),
        );
        p.outputs
            .push(KindRef::new("rbac.authorization.k8s.io/v1", "ClusterRole").into());
        let mut s = spec(vec![p]);
        s.resource = KindRef::new("wasmpilot.io/v1alpha1", "WasmOperator");
        s.resync_interval = Some("soon".into());
        s.prometheus = Some(
            serde_json::from_value(serde_json::json!({"url": "prometheus:9090", "timeout": "1h"}))
                .unwrap(),
        );
        s.finalizer = Some(
            serde_json::from_value(serde_json::json!({
                "module": {}, "pendingTimeout": "never",
            }))
            .unwrap(),
        );
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        let text = e.to_string();
        let fields: Vec<&str> = std::iter::once(e.field.as_str())
            .chain(e.more.iter().map(|m| m.field.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.resource",
                "spec.phases",
                "spec.finalizer.module",
                "spec.resyncInterval",
                "spec.finalizer.pendingTimeout",
                "spec.prometheus.url",
                "spec.prometheus.timeout",
                "spec.phases[0].inputs[0]",
                "spec.phases[0].outputs[0]",
            ],
            "{text}"
        );
        assert!(text.contains("no phase is marked initial"), "{text}");
        assert!(text.contains("v1 Secret is a sensitive kind"), "{text}");
        // A problem quoting a 40 KB field is cut, so the ones after it still fit a Condition.
        let mut huge = phase("A", true, false);
        huge.module = Some(ModuleRef {
            url: Some(crate::crd::UrlModule {
                url: format!("http://{}.example/m.wasm", "v".repeat(40_000)),
                sha256: "a".repeat(64),
            }),
            ..Default::default()
        });
        let mut s = spec(vec![huge]);
        s.resync_interval = Some("soon".into());
        let text = OperatorDefinition::validate("a", &s)
            .unwrap_err()
            .to_string();
        assert!(
            text.len() < 1024 && text.contains("spec.resyncInterval"),
            "{} bytes: {}",
            text.len(),
            crate::worker_text::bounded(&text, 2048)
        );
        // Counts are bounded: the host keeps gauges, watches and a graph per entry.
        let mut wide = phase("A", true, false);
        wide.outputs = (0..=MAX_PER_PHASE)
            .map(|i| KindRef::new("v1", format!("Kind{i}")).into())
            .collect();
        let many: Vec<PhaseSpec> = std::iter::once(wide)
            .chain((1..=MAX_PHASES).map(|i| phase(&format!("P{i}"), false, true)))
            .collect();
        let e = OperatorDefinition::validate("a", &spec(many)).unwrap_err();
        assert_eq!(e.field, "spec.phases", "{e}");
        assert!(
            e.problem
                .contains("101 phases, more than the host's limit of 100"),
            "{e}"
        );
        assert_eq!(e.more[0].field, "spec.phases[0].outputs", "{e}");
        // Lengths are bounded: a Prometheus URL, a query's name, text and parameters, an OCI
        // reference, a module file's path.
        let mut queried = phase("A", true, false);
        let query = |name: String, text: String| crate::crd::QuerySpec {
            name,
            query: text,
            params: Default::default(),
        };
        queried.queries = vec![query("q".repeat(MAX_NAME_BYTES + 1), "up".into())];
        let mut long_text = phase("B", false, false);
        long_text.queries = vec![query("q".into(), "u".repeat(MAX_QUERY_BYTES + 1))];
        let mut long_ref = phase("C", false, false);
        long_ref.module = Some(ModuleRef {
            oci: Some(crate::crd::OciModule {
                reference: format!("registry.example/{}:1", "r".repeat(MAX_URL_BYTES)),
                sha256: None,
                pull_secret: None,
                insecure: false,
            }),
            ..Default::default()
        });
        let mut long_path = phase("D", false, false);
        long_path.module = Some(ModuleRef {
            file: Some(crate::crd::FileModule {
                path: "p/".repeat(crate::crd::MAX_PATH_BYTES),
                sha256: None,
            }),
            ..Default::default()
        });
        let mut s = spec(vec![queried, long_text, long_ref, long_path]);
        s.prometheus = Some(crate::crd::PrometheusSpec {
            url: format!("http://prometheus/{}", "x".repeat(MAX_URL_BYTES)),
            timeout: None,
        });
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        let fields: Vec<&str> = std::iter::once(&e)
            .chain(&e.more)
            .map(|p| p.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.phases[0].queries[0].name",
                "spec.phases[1].queries[0].query",
                "spec.phases[2].module.oci.reference",
                "spec.phases[3].module.file.path",
                "spec.prometheus.url",
            ],
            "{e}"
        );
        assert!(e.to_string().len() < 2048, "{e}");
        // Without a phase, only that is said of the phases.
        let mut s = spec(vec![]);
        s.resync_interval = Some("soon".into());
        let e = OperatorDefinition::validate("a", &s).unwrap_err();
        assert_eq!(e.to_string().matches("spec.phases").count(), 1, "{e}");
        assert_eq!(e.more.len(), 1, "{e}");
    }

    /// The Prometheus URL names a server and its prefix only; where the host would connect is
    /// checked against its egress policy only when validated for the host.
    #[test]
    fn prometheus_urls_and_literal_addresses() {
        let with_url = |url: &str| {
            let mut s = spec(vec![phase("A", true, true)]);
            s.prometheus = Some(crate::crd::PrometheusSpec {
                url: url.into(),
                timeout: None,
            });
            s
        };
        for (url, says) in [
            (
                "http://prom:9090/api/v1/admin/tsdb/snapshot",
                "names an API path",
            ),
            ("http://prom:9090/%61pi/v1/admin", "names an API path"),
            ("http://prom:9090/?x=", "has a query string or fragment"),
            ("http://prom:9090/#x", "has a query string or fragment"),
            ("http://user:pw@prom:9090/", "carries credentials"),
        ] {
            let e = OperatorDefinition::validate("a", &with_url(url)).unwrap_err();
            assert_eq!(e.field, "spec.prometheus.url", "{url}: {e}");
            assert!(e.problem.contains(says), "{url}: {e}");
        }
        assert!(
            OperatorDefinition::validate("a", &with_url("https://prom.example/prefix/")).is_ok()
        );

        let metadata = with_url("http://169.254.169.254:9090/");
        assert!(
            OperatorDefinition::validate("a", &metadata).is_ok(),
            "offline tools fetch with their user's reach"
        );
        let host = crate::egress::EgressPolicy::default();
        let e = OperatorDefinition::validate_for_host("a", &metadata, &host).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.prometheus.url: a link-local address 169.254.169.254, which the host does not fetch from for an operator (an admin allows it with `wasmpilot run --allow-fetch-from 169.254.169.254`)"
        );
        let allowed = crate::egress::EgressPolicy::allowing(&["169.254.0.0/16".into()]).unwrap();
        assert!(OperatorDefinition::validate_for_host("a", &metadata, &allowed).is_ok());
        // A name is checked as the host resolves it, not here.
        let named = with_url("http://prometheus.monitoring:9090/");
        assert!(OperatorDefinition::validate_for_host("a", &named, &host).is_ok());
    }

    #[test]
    fn transitions_and_limits() {
        let mut a = phase("A", true, false);
        a.next = vec!["B".into()];
        a.limits = Some(WorkerLimits {
            deadline: Some("500ms".into()),
            memory_mib: Some(16),
            max_outputs: None,
            max_output_kib: Some(4),
            log_lines: Some(0),
            log_kib: None,
            max_status_kib: None,
        });
        let d = OperatorDefinition::validate(
            "a",
            &spec(vec![
                a.clone(),
                phase("B", false, true),
                phase("C", false, true),
            ]),
        )
        .unwrap();
        let p = d.phase("A").unwrap();
        assert!(p.allows("A") && p.allows("B") && !p.allows("C"));
        assert_eq!(p.limits.deadline, Some(Duration::from_millis(500)));
        assert_eq!(p.limits.memory_bytes, Some(16 << 20));
        assert_eq!(p.limits.max_output_bytes, Some(4 << 10));
        assert_eq!(p.limits.log_lines, Some(0), "a phase may forbid logging");

        a.next = vec!["Nowhere".into()];
        let e = OperatorDefinition::validate("a", &spec(vec![a.clone(), phase("B", false, true)]))
            .unwrap_err();
        assert_eq!(e.field, "spec.phases[0].next[0]");

        a.next = vec![];
        a.limits = Some(WorkerLimits {
            deadline: Some("fast".into()),
            ..Default::default()
        });
        let e = OperatorDefinition::validate("a", &spec(vec![a.clone()])).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].limits.deadline");

        a.limits = Some(WorkerLimits {
            log_kib: Some(0),
            ..Default::default()
        });
        let e = OperatorDefinition::validate("a", &spec(vec![a])).unwrap_err();
        assert_eq!(e.field, "spec.phases[0].limits.logKib");
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_interval("0s").unwrap_err().to_string(),
            "\"0s\" is shorter than the minimum of 1s"
        );
        assert!(parse_interval("100ms").is_err());
        let e = parse_interval("soon").unwrap_err().to_string();
        assert!(
            e.starts_with("\"soon\" is not a duration like 30s or 5m ("),
            "{e}"
        );
    }
}
