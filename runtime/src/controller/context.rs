//! Everything one operator's reconciles share, built by the manager when the operator loads:
//! its definition, clients, components, and the shared watch caches of its inputs and outputs.

use crate::controller::finalizer;
use crate::controller::informers::{
    Cached, Informer, MetadataInformer, ObjectInformer, WriteInFlight,
};
use crate::controller::own_writes::OwnWrites;
use crate::controller::schedule::Backoff;
use crate::crd::{InputSpec, KindRef};
use crate::definition::OperatorDefinition;
use crate::kinds::ResolvedKind;
use crate::pipeline::inputs::{ObjectSource, Wanted, WorkerObject};
use crate::pipeline::outputs;
use crate::pipeline::ReconcileError;
use crate::sandbox::{FinalizerModule, PhaseModule, Sandbox};
use kube::api::DynamicObject;
use kube::runtime::events::Recorder;
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a reconcile waits for a cache's first list before retrying.
const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything one operator's reconciles share; built by the manager when the operator loads.
pub struct OperatorContext {
    pub definition: OperatorDefinition,
    /// Sends every request as the operator's own account (impersonated): its writes, and the
    /// reads that decide one (a resource read after a stale decision).
    pub as_operator: Client,
    /// The host's own identity: the watches of the shared caches.
    pub host_client: Client,
    /// What the operator's account is granted, per namespace.
    pub grants: crate::controller::grants::OperatorGrants,
    /// Events the host reports itself on the operator's resources (a refusal for missing
    /// grants, which the operator's account may not be able to report there).
    pub host_recorder: Recorder,
    pub resource: ResolvedKind,
    /// Phase name → its component.
    pub workers: HashMap<String, PhaseModule>,
    pub finalizer: Option<FinalizerModule>,
    /// Input and output kinds, resolved.
    pub kinds: HashMap<KindRef, ResolvedKind>,
    pub namespaced: HashMap<KindRef, bool>,
    pub inputs: InputCaches,
    pub outputs: OutputCaches,
    pub sandbox: Arc<Sandbox>,
    /// Events on the operator's resources, sent as the operator's account.
    pub recorder: Recorder,
    pub backoff: Backoff,
    pub metrics_source: MetricsSource,
    /// Resources whose finalizer worker reported done (it runs once per deletion).
    pub finalized: finalizer::FinalizedResources,
    /// Where decisions are recorded (`wasmpilot run --record-dir`), if anywhere.
    pub record_sink: Option<crate::evidence::record::RecordSink>,
    /// The phases' shadow components, if any phase declares one.
    pub shadows: Option<crate::controller::shadow::Shadows>,
    /// Which resources an input object's change requeues.
    pub input_requeue: InputRequeue,
    /// The resource versions this host's own status writes produced (their watch events wake
    /// nothing).
    pub own_writes: OwnWrites,
    /// The host's own namespaces: no output of this operator is applied there.
    pub reserved_namespaces: ReservedNamespaces,
    /// The admin's grant it runs under (its output namespaces); `None` on a host that requires
    /// none (`--require-operator-grants` unset).
    pub grant: Option<crate::crd::WasmOperatorGrantSpec>,
    /// The host's write budget, shared by the operators of a tenant.
    pub writes: Arc<crate::controller::write_budget::WriteBudget>,
    /// The resource kind's watch cache, once the controller runs: a decision is checked against
    /// it before its writes (a newer version there means the decision is stale).
    pub resources: std::sync::OnceLock<kube::runtime::reflector::Store<DynamicObject>>,
    /// With `--shard`: the buckets of this operator this replica holds (it reconciles only
    /// their resources); `None`: every resource.
    pub shard: Option<Arc<crate::controller::buckets::OperatorShard>>,
    /// Whether the resource kind's watch works (the inputs' and outputs' caches say their own).
    pub resource_watch: crate::controller::watch_health::WatchHealth,
}

/// Which resources a change of a (non-owned) input object requeues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InputRequeue {
    /// Those whose selector for the object matches its labels before or after the change (every
    /// resource of its namespace for inputs without a selector).
    #[default]
    Selected,
    /// Every resource of its namespace, as hosts did before inputs had selectors: a benchmark
    /// baseline (`wasmpilot run --requeue-whole-namespace`), one reconcile per resource per change.
    WholeNamespace,
}

/// Where phases' metric queries go unless the WasmOperator names its own Prometheus.
#[derive(Clone, Default)]
pub struct MetricsSource {
    pub client: crate::promql::Prometheus,
    pub default_url: Option<String>,
}

/// The shared informers of the operator's inputs: per kind, one per projection declared (the
/// `fields` as written; inputs declaring the same fields, or none, share one).
#[derive(Clone, Default)]
pub struct InputCaches {
    informers: HashMap<KindRef, Vec<ProjectedInformer>>,
    /// Whether the operator's resource kind is namespaced (see
    /// [`InputSpec::reads_other_namespaces`]).
    resource_namespaced: bool,
    /// The host's own namespaces: their objects, and their Namespace objects, are no worker's
    /// input (another operator's module ConfigMaps live there; no output may go there).
    hidden: ReservedNamespaces,
}

/// An informer, the `fields` (as declared) of the inputs reading it, and whether it caches
/// every namespace (also on a sharded replica).
type ProjectedInformer = (Vec<String>, bool, Arc<ObjectInformer>);

impl InputCaches {
    /// No caches yet, for an operator whose resource kind is `resource_namespaced` or not,
    /// hiding the `hidden` namespaces from its workers.
    pub fn new(resource_namespaced: bool, hidden: ReservedNamespaces) -> Self {
        InputCaches {
            informers: HashMap::new(),
            resource_namespaced,
            hidden,
        }
    }

    /// Adds the informer of inputs of `kind` declaring `fields`, caching `every_namespace` or
    /// not, unless there is one.
    pub fn add(
        &mut self,
        kind: KindRef,
        fields: &[String],
        every_namespace: bool,
        informer: impl FnOnce() -> Arc<ObjectInformer>,
    ) {
        let slot = self.informers.entry(kind).or_default();
        if !slot
            .iter()
            .any(|(f, every, _)| f == fields && *every == every_namespace)
        {
            slot.push((fields.to_vec(), every_namespace, informer()));
        }
    }

    /// Each informer of these caches (its address, to count a shared one once) and the objects
    /// it holds.
    pub fn held(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.informers
            .values()
            .flatten()
            .map(|(_, _, i)| (Arc::as_ptr(i) as usize, i.cache.len()))
    }

    /// The informer `input` reads.
    pub fn informer(&self, input: &InputSpec) -> Option<&Arc<ObjectInformer>> {
        let kind = KindRef::new(&input.api_version, &input.kind);
        let slot = self.informers.get(&kind)?;
        let every_namespace = input.reads_other_namespaces(self.resource_namespaced);
        slot.iter()
            .find(|(f, every, _)| *f == input.fields && *every == every_namespace)
            .map(|(_, _, i)| i)
    }

    /// Caches an object this host just wrote in every informer of its kind (see
    /// [`ObjectInformer::wrote`]).
    pub fn wrote(&self, kind: &KindRef, object: &DynamicObject) {
        for (_, _, informer) in self.informers.get(kind).into_iter().flatten() {
            informer.wrote(object);
        }
    }

    /// Drops an object this host just deleted from every informer of its kind.
    pub fn deleted(&self, kind: &KindRef, namespace: Option<&str>, name: &str) {
        for (_, _, informer) in self.informers.get(kind).into_iter().flatten() {
            informer.deleted(namespace, name);
        }
    }

    /// A write this host is about to send, in every informer of its kind (see
    /// [`ObjectInformer::writing`]).
    pub fn writing(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Vec<WriteInFlight> {
        self.informers
            .get(kind)
            .into_iter()
            .flatten()
            .map(|(_, _, informer)| informer.writing(namespace, name))
            .collect()
    }

    /// Every distinct informer, with its kind (two projections of a kind may share one).
    pub fn all(&self) -> Vec<(&KindRef, &Arc<ObjectInformer>)> {
        let mut all: Vec<(&KindRef, &Arc<ObjectInformer>)> = Vec::new();
        for (kind, slot) in &self.informers {
            for (_, _, informer) in slot {
                if !all.iter().any(|(_, i)| Arc::ptr_eq(i, informer)) {
                    all.push((kind, informer));
                }
            }
        }
        all
    }

    /// The kinds read.
    pub fn kinds(&self) -> impl Iterator<Item = &KindRef> {
        self.informers.keys()
    }
}

impl ObjectSource for InputCaches {
    fn worker_objects(&self, input: &InputSpec, wanted: &Wanted<'_>) -> Vec<Arc<WorkerObject>> {
        let Some(informer) = self.informer(input) else {
            return Vec::new();
        };
        let mut objects = informer.cache.candidates(wanted);
        // Cluster-scoped objects (indexed under "") are visible to namespaced resources too.
        if wanted.namespace.is_some_and(|ns| !ns.is_empty()) {
            objects.extend(informer.cache.candidates(&Wanted {
                namespace: Some(""),
                ..*wanted
            }));
        }
        if self.hidden.iter().next().is_some() {
            let namespaces = input.api_version == "v1" && input.kind == "Namespace";
            objects.retain(|o| {
                let meta = o.metadata();
                let in_hidden = self.hidden.holds(meta.namespace.as_deref());
                let is_hidden = namespaces && self.hidden.holds(meta.name.as_deref());
                !(in_hidden || is_hidden)
            });
        }
        objects
    }
}

/// The shared metadata informers of every output kind (for pruning and owner requeues).
#[derive(Clone, Default)]
pub struct OutputCaches(pub HashMap<KindRef, Arc<MetadataInformer>>);

impl OutputCaches {
    /// Each informer of these caches (its address) and the objects it holds.
    pub fn held(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0
            .values()
            .map(|i| (Arc::as_ptr(i) as usize, i.cache.len()))
    }

    /// Caches the metadata of an object this host just wrote (see [`MetadataInformer::wrote`]).
    pub fn wrote(&self, kind: &KindRef, object: &DynamicObject) {
        if let Some(informer) = self.0.get(kind) {
            informer.wrote(object);
        }
    }

    pub fn deleted(&self, kind: &KindRef, namespace: Option<&str>, name: &str) {
        if let Some(informer) = self.0.get(kind) {
            informer.deleted(namespace, name);
        }
    }

    /// A write this host is about to send (see [`MetadataInformer::writing`]).
    pub fn writing(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<WriteInFlight> {
        self.0
            .get(kind)
            .map(|informer| informer.writing(namespace, name))
    }
}

impl outputs::ExistingObjects for OutputCaches {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<kube::api::ObjectMeta> {
        let found = self.0.get(kind)?.cache.get(namespace, name)?;
        Some(found.metadata.clone())
    }

    fn each_maybe_controlled_by(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        controller: &str,
        visit: &mut dyn FnMut(&kube::api::ObjectMeta),
    ) {
        if let Some(informer) = self.0.get(kind) {
            let wanted = Wanted {
                namespace,
                controller: Some(controller),
                selector: None,
            };
            for m in informer.cache.candidates(&wanted) {
                visit(&m.metadata);
            }
        }
    }
}

/// A grant's `outputNamespaces` entry allowing every namespace but the host's own.
pub const EVERY_OUTPUT_NAMESPACE: &str = "*";

/// The namespaces that are the host's own — its replicas and their Leases, the operators'
/// ServiceAccounts: an output there could act as the host (a pod with its ServiceAccount's
/// token acts as every operator) or stop it (a Lease labelled like a replica's member Lease).
#[derive(Clone, Debug, Default)]
pub struct ReservedNamespaces(Arc<std::collections::BTreeSet<String>>);

impl ReservedNamespaces {
    /// These namespaces (empty names are left out).
    pub fn new(namespaces: impl IntoIterator<Item = String>) -> Self {
        ReservedNamespaces(Arc::new(
            namespaces.into_iter().filter(|n| !n.is_empty()).collect(),
        ))
    }

    /// Whether an object in `namespace` (none: cluster-scoped) is in one of them.
    pub fn holds(&self, namespace: Option<&str>) -> bool {
        namespace.is_some_and(|n| self.0.contains(n))
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl OperatorContext {
    /// Waits for this operator's tenant's turn to make `writes` writes (see
    /// [`crate::controller::write_budget`]).
    pub async fn before_writes(&self, writes: usize) {
        let tenant = self.sandbox.tenant_of(&self.definition.name);
        let waited = self.writes.take(&tenant, writes).await;
        if !waited.is_zero() {
            crate::metrics::METRICS
                .writes_delayed
                .get_or_create(&crate::metrics::OperatorLabels {
                    operator: self.definition.name.clone(),
                })
                .inc_by(writes as u64);
            tracing::debug!(writes, waited_ms = waited.as_millis() as u64, %tenant, "writes waited for the tenant's write budget");
        }
    }

    /// Whether an output of a resource in `resource_namespace` may go to `namespace`: its own
    /// namespace (or none: cluster-scoped) always; another only where the grant, if the host
    /// requires one, lists it or [`EVERY_OUTPUT_NAMESPACE`] (the host's own namespaces are
    /// refused before this, whatever the grant says).
    pub fn output_namespace_granted(
        &self,
        resource_namespace: Option<&str>,
        namespace: Option<&str>,
    ) -> bool {
        match (namespace, &self.grant) {
            (None, _) | (_, None) => true,
            (Some(ns), Some(grant)) => {
                resource_namespace == Some(ns)
                    || grant
                        .output_namespaces
                        .iter()
                        .any(|g| g == ns || g == EVERY_OUTPUT_NAMESPACE)
            }
        }
    }

    /// Every watch the operator depends on: its resource's, its inputs' and its outputs'.
    pub fn watches(&self) -> crate::controller::watch_health::OperatorWatches {
        let mut watches = crate::controller::watch_health::OperatorWatches::default();
        watches.add(&self.definition.resource, self.resource_watch.subscribe());
        for (kind, informer) in self.inputs.all() {
            watches.add(kind, informer.health());
        }
        for (kind, informer) in &self.outputs.0 {
            watches.add(kind, informer.health());
        }
        watches
    }

    pub fn api_for(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        self.resource.api(&self.as_operator, namespace)
    }

    /// `namespace/name` (or `name`), as logs, backoff and cases name a resource.
    pub fn key(obj: &DynamicObject) -> String {
        crate::controller::schedule::resource_key(obj)
    }
}

impl OperatorContext {
    /// Waits (bounded) until the caches `inputs` read hold `namespace` (the resource's): listed,
    /// and on a sharded replica listed since its bucket was gained.
    pub async fn inputs_synced(
        &self,
        inputs: &[InputSpec],
        namespace: Option<&str>,
    ) -> Result<(), ReconcileError> {
        for informer in inputs.iter().filter_map(|i| self.inputs.informer(i)) {
            synced(informer, namespace).await?;
        }
        Ok(())
    }

    /// Waits (bounded) until the output caches of `kinds` hold `namespace`.
    pub async fn outputs_synced(
        &self,
        kinds: &[KindRef],
        namespace: Option<&str>,
    ) -> Result<(), ReconcileError> {
        for informer in kinds.iter().filter_map(|k| self.outputs.0.get(k)) {
            synced(informer, namespace).await?;
        }
        Ok(())
    }
}

/// Waits (bounded) until an informer's cache holds `namespace`.
async fn synced<T: Cached>(
    informer: &Informer<T>,
    namespace: Option<&str>,
) -> Result<(), ReconcileError> {
    match tokio::time::timeout(CACHE_SYNC_TIMEOUT, informer.wait_until_covers(namespace)).await {
        Ok(true) => Ok(()),
        _ => Err(ReconcileError::InputsNotSynced(informer.kind.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::ReservedNamespaces;

    #[test]
    fn reserved_namespaces_hold_only_their_namespaced_objects() {
        let reserved = ReservedNamespaces::new(["wasmpilot-system".into(), String::new()]);
        assert!(reserved.holds(Some("wasmpilot-system")));
        assert!(!reserved.holds(Some("team-a")));
        assert!(!reserved.holds(Some("")), "an empty name is not reserved");
        assert!(
            !reserved.holds(None),
            "cluster-scoped objects are in no namespace"
        );
        assert!(!ReservedNamespaces::default().holds(Some("wasmpilot-system")));
    }
}
