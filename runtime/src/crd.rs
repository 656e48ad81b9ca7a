//! The `WasmOperator` custom resource: one operator's phase table and modules; and the admin's
//! `WasmOperatorGrant` consenting to one. Their Rust types are the source of `deploy/crds/`
//! (see `wasmpilot crd`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most phases a definition declares: the host keeps gauges and a graph per phase.
pub const MAX_PHASES: usize = 100;
/// The most inputs, outputs or metric queries one phase (or the finalizer) declares, and the
/// most `allowSensitiveKinds` entries.
pub const MAX_PER_PHASE: usize = 32;
/// The longest input or query name, `selectorFrom` path and query parameter.
pub const MAX_NAME_BYTES: usize = 253;
/// The longest URL (a module's, Prometheus') and OCI reference.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest `apiVersion`: a group (a DNS subdomain, 253) and a version (a DNS label, 63).
pub const MAX_API_VERSION_BYTES: usize = 253 + 1 + 63;
/// The longest PromQL query text, before its parameters are filled in.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The longest module file path.
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest phase description (the generated APIs' comments carry it).
pub const MAX_DESCRIPTION_BYTES: usize = 4096;

/// Declares an operator: the top-level resource it manages, the phases that resource
/// moves through, and the Wasm component that decides each phase.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "wasmpilot.io",
    version = "v1alpha1",
    kind = "WasmOperator",
    shortname = "wop",
    status = "WasmOperatorStatus",
    printcolumn = r#"{"name":"Resource","type":"string","jsonPath":".spec.resource.kind"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WasmOperatorSpec {
    /// The top-level custom resource this operator reconciles.
    pub resource: KindRef,
    /// Only the resources whose labels match this selector are this operator's, e.g.
    /// `matchLabels: {version: v1}`: the host watches only those (a resource relabelled out
    /// of it is left as it is). Unset: every resource of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// The phases the resource moves through. Exactly one must be `initial`.
    #[schemars(length(min = 1, max = MAX_PHASES))]
    pub phases: Vec<PhaseSpec>,
    /// Runs when a resource is deleted; the host holds the finalizer `wasmpilot.io/<operator>` until it reports done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<FinalizerSpec>,
    /// How often every resource is reconciled even when nothing changed (e.g. `30s`, `5m`). Default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub resync_interval: Option<String>,
    /// The Prometheus that phases' `queries` run against; overrides `wasmpilot run --prometheus-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSpec>,
    /// How many phase transitions each resource keeps in `.status.history` (default 10, at
    /// most 100; 0 keeps none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub history_limit: Option<u32>,
    /// Sensitive kinds this operator reads or writes, listed for an admin to review: Secrets,
    /// RBAC kinds, admission webhook configurations and policies, CustomResourceDefinitions,
    /// CertificateSigningRequests, Nodes, PersistentVolumes, any cluster-scoped output, and an
    /// output of the operator's own resource kind (its resources could create more without end).
    /// A definition using one that is not listed here is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PER_PHASE))]
    pub allow_sensitive_kinds: Vec<KindRef>,
}

/// Where a worker's WASI random bytes come from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RandomnessSpec {
    /// Seeded from the request's sha256: one request, one decision (the default).
    Seeded,
    /// The host's OS generator, for workers that need unpredictable bytes; not replayable.
    Host,
}

/// Where metric queries go.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSpec {
    /// Base URL of the Prometheus HTTP API, e.g. `http://prometheus.istio-system:9090`.
    #[schemars(length(max = MAX_URL_BYTES))]
    pub url: String,
    /// Per-query timeout (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,
}

/// A named PromQL query the host runs before the phase's worker; its result reaches the worker
/// as the input of the same name (one object per sample: `labels`, `value`, `timestamp`).
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuerySpec {
    /// The input name the worker reads the samples by.
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub name: String,
    /// PromQL with `{{param}}` placeholders, e.g.
    /// `sum(rate(requests_total{deployment="{{target}}",code!~"5.."}[1m]))`.
    #[schemars(length(min = 1, max = MAX_QUERY_BYTES))]
    pub query: String,
    /// Placeholder → dotted field path into the resource (`spec.targetRef.name`, `metadata.namespace`).
    /// Values are inserted escaped for a PromQL string literal; nothing else is templated.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_PER_PHASE))]
    pub params: BTreeMap<String, String>,
}

/// An admin's consent to run one WasmOperator (the one named as this grant, with the uid
/// below), and what it may use beyond the ordinary. Authors write WasmOperators; only an admin
/// writes grants: a field of the WasmOperator (`allowSensitiveKinds`) is the author's request,
/// this is the consent. A host started with `--require-operator-grants` runs no WasmOperator
/// without one.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[kube(
    group = "wasmpilot.io",
    version = "v1alpha1",
    kind = "WasmOperatorGrant",
    shortname = "wopgrant",
    printcolumn = r#"{"name":"Operator UID","type":"string","jsonPath":".spec.operatorUID"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WasmOperatorGrantSpec {
    /// The `metadata.uid` of the WasmOperator this grant is for: a WasmOperator made again
    /// under the same name (by anyone) has another uid and is not granted until an admin reviews
    /// it (`wasmpilot grant <name>`).
    #[serde(rename = "operatorUID")]
    #[schemars(length(min = 1, max = 128))]
    pub operator_uid: String,
    /// Kinds the operator may use although they are sensitive (Secrets, RBAC kinds, …, and its
    /// own resource kind as an output): each must also be in the WasmOperator's
    /// `spec.allowSensitiveKinds` (what its author asks for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PER_PHASE))]
    pub sensitive_kinds: Vec<KindRef>,
    /// Where its modules may come from: every module source of the WasmOperator (each phase's,
    /// shadow's and the finalizer's) must be listed, and every pull Secret it names. The host
    /// reads ConfigMaps and pull Secrets as itself, so this is what keeps one operator from
    /// loading another's module or using another team's registry credentials.
    #[serde(default, skip_serializing_if = "ModuleSourcesGrant::is_empty")]
    pub modules: ModuleSourcesGrant,
    /// Namespaces a cluster-scoped resource's namespaced outputs may go to (a namespaced
    /// resource's outputs stay in its own namespace); `"*"`: every namespace but the host's
    /// own (which no output ever reaches). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES), inner(length(min = 1, max = 63)))]
    pub output_namespaces: Vec<String>,
    /// The Prometheus its phases' `queries` may run against, and those queries. Unset: it runs
    /// no query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusGrant>,
    /// Addresses or CIDR blocks beyond public ones that this operator's module URLs, registries
    /// and Prometheus may connect to (for this operator only; the host's `--allow-fetch-from`
    /// applies to every operator).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES), inner(length(min = 1, max = 64)))]
    pub allow_fetch_from: Vec<String>,
    /// The team (tenant) the operator belongs to: the operators of one tenant share one turn of
    /// the host's worker slots and module fetch and compile slots, however many WasmOperators
    /// its authors create. Unset: the operator is a tenant of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub tenant: Option<String>,
}

/// The most entries of one list of a grant.
pub const MAX_GRANT_ENTRIES: usize = 64;

/// Where a granted operator's modules may come from.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModuleSourcesGrant {
    /// Hosts (`host` or `host:port`) of OCI registries and HTTPS module URLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES), inner(length(min = 1, max = 253)))]
    pub hosts: Vec<String>,
    /// ConfigMaps holding modules (a split module's parts `<name>-<i>` are covered by `<name>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES))]
    pub config_maps: Vec<NamespacedName>,
    /// `kubernetes.io/dockerconfigjson` Secrets its OCI modules may be pulled with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES))]
    pub pull_secrets: Vec<NamespacedName>,
    /// `file` module paths (development hosts with `--module-dir` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES), inner(length(min = 1, max = MAX_PATH_BYTES)))]
    pub files: Vec<String>,
}

impl ModuleSourcesGrant {
    /// Grants no module source.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
            && self.config_maps.is_empty()
            && self.pull_secrets.is_empty()
            && self.files.is_empty()
    }
}

/// An object of a namespace, by name.
#[derive(
    Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedName {
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The Prometheus a granted operator may query, and what.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusGrant {
    /// The operator's `spec.prometheus.url`, as written there. Unset: the host's own
    /// `--prometheus-url` (which holds every tenant's metrics: grant it only to queries that
    /// select this operator's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_URL_BYTES))]
    pub url: Option<String>,
    /// The query texts (its phases' `queries[].query`, placeholders and all) it may run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GRANT_ENTRIES), inner(length(min = 1, max = MAX_QUERY_BYTES)))]
    pub queries: Vec<String>,
}

/// An apiVersion + kind pair, e.g. `apps/v1` `Deployment`.
#[derive(
    Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version`, or `v1` for the core group.
    #[schemars(length(min = 1, max = MAX_API_VERSION_BYTES))]
    pub api_version: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

/// An output kind a phase may return, and how the host changes an object of it that exists.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OutputSpec {
    #[serde(flatten)]
    pub kind: KindRef,
    /// How an existing object of this kind is changed when the worker returns it changed:
    /// `InPlace` (default: server-side applied), `OnDelete` (left as it is; created again as
    /// returned once someone deletes it) or `Recreate` (deleted and created as returned, when
    /// a field the operator sets differs; fields other managers set count for nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

impl From<KindRef> for OutputSpec {
    fn from(kind: KindRef) -> Self {
        OutputSpec {
            kind,
            update_strategy: None,
        }
    }
}

/// How the host changes an existing output object (see [`OutputSpec::update_strategy`]).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Default, Hash)]
pub enum UpdateStrategy {
    /// Server-side applied: the fields the operator sets converge, others' stay.
    #[default]
    InPlace,
    /// Left as it is once it exists; created as returned after it is deleted.
    OnDelete,
    /// Deleted, then created as returned, when a field the operator sets differs.
    Recreate,
}

/// One phase: the component that decides it and what it reads and writes.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PhaseSpec {
    /// The value of `.status.phase` while the resource is in this phase, e.g. `Syncing`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// What the phase does, for people (the generated typed APIs' comments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_DESCRIPTION_BYTES))]
    pub description: Option<String>,
    /// The phase a new resource (empty `.status.phase`) starts in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initial: bool,
    /// A resource in this phase counts as done: condition `Ready=True` (what `kubectl wait
    /// --for=condition=Ready`, Flux and Argo CD read). Final phases always do; mark the steady
    /// phase of an operator whose worker keeps watching (e.g. AutoRoute's `Ready`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    /// A final phase runs no worker; a spec change (new generation) restarts the resource at the initial phase.
    #[serde(default, rename = "final", skip_serializing_if = "std::ops::Not::not")]
    pub is_final: bool,
    /// The component run in this phase. Required unless the phase is final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<ModuleRef>,
    /// Objects handed to the worker, read from the host's watch caches in the resource's namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PER_PHASE))]
    pub inputs: Vec<InputSpec>,
    /// Kinds the worker may return as outputs; the host watches them and applies them owned by
    /// the resource, each kind as its `updateStrategy` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PER_PHASE))]
    pub outputs: Vec<OutputSpec>,
    /// Phases this phase's worker may move to (besides staying). Empty: any declared phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PHASES))]
    pub next: Vec<String>,
    /// Per-call limits for this phase's worker, overriding the host's defaults (never beyond
    /// the host's ceilings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<WorkerLimits>,
    /// Metric queries run by the host (against Prometheus) before this phase's worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PER_PHASE))]
    pub queries: Vec<QuerySpec>,
    /// Where the worker's WASI random bytes come from (default `seeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randomness: Option<RandomnessSpec>,
    /// A candidate component run on the same requests as `module`, after each live decision is
    /// applied; its decisions are only compared (metrics, `status.shadows`, `ShadowDiffered`
    /// Events), never applied. Pinned by digest like every module; promote it by making it the
    /// `module`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ModuleRef>,
}

/// Limits of one worker call.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkerLimits {
    /// Wall-clock deadline, e.g. `500ms`, `2s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub deadline: Option<String>,
    /// Linear memory limit in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_mib: Option<u32>,
    /// Most outputs one call may return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_outputs: Option<u32>,
    /// Most bytes of outputs (their JSON) one call may return, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_kib: Option<u32>,
    /// Most log lines one call may send; one more fails the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_lines: Option<u32>,
    /// Most bytes of log messages and fields one call may send, in KiB; more fails the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub log_kib: Option<u32>,
    /// Most bytes of status info (its JSON) one call may return, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_status_kib: Option<u32>,
}

/// A named input: every object of a kind in the resource's namespace (or every namespace),
/// optionally narrowed by labels, namespace and name — declared, or read from the resource.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InputSpec {
    /// The name the worker reads it by, e.g. `deployments`.
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub name: String,
    #[schemars(length(min = 1, max = MAX_API_VERSION_BYTES))]
    pub api_version: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Only objects whose labels match all of these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Only objects whose labels meet all of these (`In`, `NotIn`, `Exists`, `DoesNotExist`),
    /// as in a Kubernetes label selector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions:
        Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>,
    /// Only objects matched by the label selector at this field path of the resource, e.g.
    /// `spec.deploymentSelector` (each resource selects its own; an invalid or missing selector
    /// is a `InvalidSelector` Condition naming the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub selector_from: Option<String>,
    /// Only objects this resource controls (the outputs the host applied for it), e.g. for a
    /// steady phase that checks its outputs were not changed by hand. A change requeues only
    /// the controlling resource, not the whole namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owned: bool,
    /// Objects in every namespace the operator may read, not only the resource's own (a
    /// cluster-scoped resource reads every namespace anyway); narrowed per resource by
    /// `namespaceFrom`. What the operator's account may list still bounds it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_namespaces: bool,
    /// Only objects in the namespace named at this field path of the resource, e.g.
    /// `spec.sourceNamespace` (a string; where the resource does not set it, the input's
    /// namespaces as they are: the resource's own, or every one with `allNamespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub namespace_from: Option<String>,
    /// Only the object named at this field path of the resource, e.g. `spec.sourceName` (a
    /// string; missing or not a name is an `InvalidSelector` Condition naming the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub name_from: Option<String>,
    /// Only objects carrying every label of the map at this field path of the resource, e.g.
    /// `spec.sourceLabels: {app: web}` (a plain label map, as a Service's `spec.selector`; an
    /// empty map selects every object; missing or invalid is an `InvalidSelector` Condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub match_labels_from: Option<String>,
    /// Only these field paths of each object reach the worker, and the host's cache keeps only
    /// them, besides `apiVersion`, `kind`, `metadata.name` and `metadata.namespace`: e.g.
    /// `spec.selector`, `spec.template.spec.containers.ports` (a path through a list applies to
    /// each element). A change to other fields reconciles nothing. Left out: whole objects
    /// (without managedFields and kubectl's last-applied annotation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = wasmpilot_selection::projection::MAX_PATHS), inner(length(min = 1, max = wasmpilot_selection::projection::MAX_PATH_BYTES)))]
    pub fields: Vec<String>,
}

impl InputSpec {
    /// Whether this input reads namespaces besides its resource's (`allNamespaces`, or any
    /// input of a cluster-scoped resource): its cache must then hold every namespace, and the
    /// operator's account must be granted reading it cluster-wide.
    pub fn reads_other_namespaces(&self, resource_namespaced: bool) -> bool {
        self.all_namespaces || !resource_namespaced
    }
}

/// The finalizer worker.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerSpec {
    pub module: ModuleRef,
    /// Objects the finalizer reads, declared and selected as a phase's inputs are (its
    /// `finalizer-inputs` import returns them), e.g. the leases to release before the resource
    /// goes. A change to one requeues a resource still being deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PER_PHASE))]
    pub inputs: Vec<InputSpec>,
    /// Per-call limits for the finalizer worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<WorkerLimits>,
    /// Where the finalizer's WASI random bytes come from (default `seeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randomness: Option<RandomnessSpec>,
    /// What deleting this WasmOperator does to its resources' finalizer: `release` (default)
    /// removes it without running the worker; `runFinalizer` runs the finalizer worker once per
    /// resource first (each call within its deadline), then removes it, done or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_operator_deletion: Option<OnOperatorDeletion>,
    /// How long a deleted resource's finalizer worker may stay pending (not done, or failing)
    /// before it is reported (`FinalizerStuck`; e.g. `10m`). Unset: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub pending_timeout: Option<String>,
    /// Past `pendingTimeout`: `report` (default) keeps running the worker and reports it stuck;
    /// `giveUp` removes the finalizer without it (`FinalizerAbandoned`), so the deletion ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_pending_timeout: Option<OnPendingTimeout>,
}

/// What deleting a WasmOperator does to its resources' finalizer.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum OnOperatorDeletion {
    /// Remove the finalizer without running the worker (the default).
    Release,
    /// Run the finalizer worker once per resource, then remove the finalizer.
    RunFinalizer,
}

/// What happens to a finalizer pending longer than its `pendingTimeout`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum OnPendingTimeout {
    /// Keep running the worker and report the resource `FinalizerStuck` (the default).
    Report,
    /// Remove the finalizer without the worker (`FinalizerAbandoned`).
    GiveUp,
}

/// Where a component comes from. Exactly one source must be set; every source resolves to the
/// sha256 of the component bytes, and bytes that differ from a pin are refused.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModuleRef {
    /// A component in an OCI registry, published as a Wasm OCI artifact (`wasmpilot push`, wkg,
    /// ORAS): the manifest's single `application/wasm` layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciModule>,
    /// A component downloaded over HTTPS, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<UrlModule>,
    /// A key of a ConfigMap's `binaryData`, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapModule>,
    /// A file on the host's filesystem (development; relative paths resolve against `wasmpilot run --module-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileModule>,
}

impl ModuleRef {
    /// The names of the sources that are set (exactly one in a valid reference).
    pub fn sources(&self) -> Vec<&'static str> {
        [
            ("oci", self.oci.is_some()),
            ("url", self.url.is_some()),
            ("configMap", self.config_map.is_some()),
            ("file", self.file.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OciModule {
    /// `registry/repository:tag` or `registry/repository@sha256:<manifest digest>`.
    #[schemars(length(min = 1, max = MAX_URL_BYTES))]
    pub reference: String,
    /// Hex sha256 of the component bytes (the Wasm layer). Unset: the digest the manifest names,
    /// verified while pulling; pin it (or reference the manifest by digest) for reproducibility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(sha256:)?[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret with credentials for the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<SecretRef>,
    /// Plain HTTP instead of HTTPS (loopback or test registries only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

/// A Secret by name.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Secret. Default: the host's namespace (`wasmpilot-system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UrlModule {
    /// An `https://` URL of the component bytes (at most 64 MiB).
    #[schemars(regex(pattern = r"^https://"), length(max = MAX_URL_BYTES))]
    pub url: String,
    /// Hex sha256 of the component bytes (required: a URL names no digest).
    #[schemars(regex(pattern = r"^(sha256:)?[0-9a-f]{64}$"))]
    pub sha256: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapModule {
    /// ConfigMap name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the ConfigMap. Default: the host's namespace (`wasmpilot-system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// Key in `binaryData`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// Hex sha256 of the component bytes; a module whose bytes differ is refused.
    #[schemars(regex(pattern = r"^(sha256:)?[0-9a-f]{64}$"))]
    pub sha256: String,
    /// A component larger than a ConfigMap holds (1 MiB) is split across this many ConfigMaps,
    /// `<name>-0` … `<name>-<parts-1>`, each with a piece under `key`, joined in order (then
    /// decompressed, for a `.gz` key) before the sha256 is checked. `wasmpilot deploy` splits
    /// what does not fit (a Python or JavaScript component).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub parts: Option<u32>,
}

#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileModule {
    /// Relative to the host's `--module-dir` (development hosts only).
    #[schemars(length(min = 1, max = MAX_PATH_BYTES))]
    pub path: String,
    /// Optional pin: when set, a file whose bytes differ is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// What the host observed about the operator definition.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WasmOperatorStatus {
    /// `Ready` (the controller runs) and `ModulesLoaded`, with messages naming the problem.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The digest (`sha256:…`) of the component active for each phase (and `finalizer`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub modules: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Per phase with a shadow module: how often its decisions agreed with the live ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<ShadowStatus>,
    /// With replicas run with `--shard`: which replica holds which of the operator's buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<ShardingStatus>,
}

/// How the operator's resources are shared among sharded replicas (`wasmpilot run --shard`).
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShardingStatus {
    /// Buckets the operator's resources fall into (by namespace).
    pub buckets: u32,
    /// Per replica (its identity: the pod's name): the buckets it holds.
    #[serde(default)]
    pub replicas: BTreeMap<String, ReplicaShare>,
}

/// One replica's share of an operator's buckets.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaShare {
    /// The buckets it holds.
    pub buckets: Vec<u32>,
    /// The operator's resources in those buckets when it last reported.
    pub resources: u64,
}

/// One phase's shadow counts, as `status.shadows` of the WasmOperator shows them.
#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    pub phase: String,
    /// The shadow component's digest (`sha256:…`); absent when it could not be loaded (see
    /// `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Shadow decisions equal to the live one.
    pub same: u64,
    pub different: u64,
    /// Shadow runs that made no decision where the live module did.
    pub errors: u64,
    /// The last differing (or failed) shadow run: when, on which resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_difference: Option<String>,
    /// Why the shadow is not running (it could not be loaded); the live phase is unaffected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    /// The schema states the host's limits, so the API server refuses a definition past one at
    /// `kubectl apply` (the host checks them again, for a CRD installed without them).
    #[test]
    fn the_schema_states_the_hosts_limits() {
        let crd = serde_json::to_value(WasmOperator::crd()).expect("the CRD as JSON");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let phase = &spec["properties"]["phases"]["items"];
        let input = &phase["properties"]["inputs"]["items"];
        let query = &phase["properties"]["queries"]["items"];
        for (at, key, limit) in [
            (&spec["properties"]["phases"], "maxItems", MAX_PHASES),
            (
                &spec["properties"]["allowSensitiveKinds"],
                "maxItems",
                MAX_PER_PHASE,
            ),
            (&phase["properties"]["name"], "maxLength", 63),
            (
                &phase["properties"]["description"],
                "maxLength",
                MAX_DESCRIPTION_BYTES,
            ),
            (&phase["properties"]["next"], "maxItems", MAX_PHASES),
            (&phase["properties"]["inputs"], "maxItems", MAX_PER_PHASE),
            (&phase["properties"]["outputs"], "maxItems", MAX_PER_PHASE),
            (&phase["properties"]["queries"], "maxItems", MAX_PER_PHASE),
            (&input["properties"]["name"], "maxLength", MAX_NAME_BYTES),
            (
                &input["properties"]["selectorFrom"],
                "maxLength",
                MAX_NAME_BYTES,
            ),
            (&input["properties"]["kind"], "maxLength", 63),
            (&query["properties"]["query"], "maxLength", MAX_QUERY_BYTES),
            (
                &query["properties"]["params"],
                "maxProperties",
                MAX_PER_PHASE,
            ),
            (
                &spec["properties"]["prometheus"]["properties"]["url"],
                "maxLength",
                MAX_URL_BYTES,
            ),
            (
                &spec["properties"]["finalizer"]["properties"]["inputs"],
                "maxItems",
                MAX_PER_PHASE,
            ),
        ] {
            assert_eq!(at[key], limit, "{key} of {at}");
        }
        let module = &phase["properties"]["module"]["properties"];
        assert_eq!(
            module["oci"]["properties"]["reference"]["maxLength"],
            MAX_URL_BYTES
        );
        assert_eq!(
            module["url"]["properties"]["url"]["maxLength"],
            MAX_URL_BYTES
        );
        assert_eq!(
            module["file"]["properties"]["path"]["maxLength"],
            MAX_PATH_BYTES
        );
    }

    /// No `enum` of the schema lists `null`: kubectl's validation and the API server (1.20)
    /// refuse such a CRD ("unknown object type nil"). An optional enum whose variants are
    /// undocumented gets one from schemars; documented variants do not.
    #[test]
    fn no_enum_of_the_schema_lists_null() {
        fn walk(v: &serde_json::Value, at: &str, found: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    if let Some(serde_json::Value::Array(values)) = m.get("enum") {
                        if values.iter().any(serde_json::Value::is_null) {
                            found.push(at.to_string());
                        }
                    }
                    for (k, child) in m {
                        walk(child, &format!("{at}.{k}"), found);
                    }
                }
                serde_json::Value::Array(items) => {
                    for (i, child) in items.iter().enumerate() {
                        walk(child, &format!("{at}[{i}]"), found);
                    }
                }
                _ => {}
            }
        }
        let crd = serde_json::to_value(WasmOperator::crd()).unwrap();
        let mut found = Vec::new();
        walk(&crd, "", &mut found);
        assert!(found.is_empty(), "enums listing null: {found:#?}");
    }

    /// `deploy/crds/wasmoperatorgrant.yaml` likewise (`wasmpilot crd --grant`).
    #[test]
    fn committed_grant_crd_matches_generated() {
        let generated = serde_yaml::to_string(&WasmOperatorGrant::crd()).unwrap();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/crds/wasmoperatorgrant.yaml"
        );
        if std::env::var_os("WASMPILOT_UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &generated).expect("writing the CRD");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "deploy/crds/wasmoperatorgrant.yaml is stale: run `cargo run -p wasmpilot -- crd --grant > deploy/crds/wasmoperatorgrant.yaml`"
        );
        let crd = serde_json::to_value(WasmOperatorGrant::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
    }

    /// `deploy/crds/wasmoperator.yaml` is generated from these types; regenerate with
    /// `cargo run -p wasmpilot -- crd > deploy/crds/wasmoperator.yaml` (or run this test with
    /// `WASMPILOT_UPDATE_GOLDEN=1`).
    #[test]
    fn committed_crd_matches_generated() {
        let generated = serde_yaml::to_string(&WasmOperator::crd()).unwrap();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/crds/wasmoperator.yaml"
        );
        if std::env::var_os("WASMPILOT_UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &generated).expect("writing the CRD");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "deploy/crds/wasmoperator.yaml is stale: run `cargo run -p wasmpilot -- crd > deploy/crds/wasmoperator.yaml`"
        );
    }

    #[test]
    fn crd_is_cluster_scoped_with_status_and_readiness_column() {
        let crd = serde_json::to_value(WasmOperator::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let v = &crd["spec"]["versions"][0];
        assert!(v["subresources"]["status"].is_object());
        assert!(v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "Ready"));
    }
}
