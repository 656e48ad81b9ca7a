//! The phase step's effects on the cluster ([`ClusterEffects`]): inputs from the shared watch
//! caches, outputs applied and pruned as the operator's account, its status written conditionally.

use crate::controller::context::OperatorContext;
use crate::controller::own_writes::OwnWrites;
use crate::crd::KindRef;
use crate::definition::PhaseDefinition;
use crate::evidence::case::RecordedResult;
use crate::evidence::record::LiveCall;
use crate::pipeline::effects::{Effects, PhaseReads, StatusWrite, WorkerCall, WorkerReads};
use crate::pipeline::outputs::{self, ApplyReport, CheckedOutput, OutputError};
use crate::pipeline::request::Samples;
use crate::pipeline::status::{self, StatusUpdate};
use crate::pipeline::ReconcileError;
use crate::sandbox::RunError;
use kube::api::{DynamicObject, ObjectMeta};
use kube::{Api, Resource, ResourceExt};
use std::time::Duration;

/// Where the object a decision is made from comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Read {
    /// The controller's watch cache, which may lag behind the API server: checked against a
    /// fresh read of its metadata before outputs are applied.
    FromCache,
    /// The API server's answer just now (a status write's, or a read after a stale decision):
    /// not read again.
    FromApiServer,
}

/// One decision's reads and writes on the cluster, for [`crate::pipeline::step::run`].
pub struct ClusterEffects<'a> {
    pub ctx: &'a OperatorContext,
    /// The resource's API, as the operator's account.
    pub api: &'a Api<DynamicObject>,
    /// The resource the step decides on (Events about its outputs name it).
    pub resource: &'a DynamicObject,
    /// The resource as the API server last had it: `resource` itself, unless the status of
    /// phases before this one is held in memory (then `resource` carries it unwritten). Status
    /// writes go onto this version.
    pub on_server: &'a DynamicObject,
    pub read: Read,
    /// Whether a holdable status update ([`StatusWrite::holdable`]) may be held (the
    /// reconcile chains another phase after this one).
    pub may_hold: bool,
    /// Set when this step's status update was held, not written.
    pub held: bool,
    /// The worker call, kept when the evidence step wants it.
    pub live: Option<LiveCall>,
}

impl WorkerReads for ClusterEffects<'_> {
    type Source = crate::controller::context::InputCaches;

    async fn reads(
        &mut self,
        phase: &PhaseDefinition,
    ) -> Result<PhaseReads<'_, Self::Source>, ReconcileError> {
        let ctx = self.ctx;
        let def = &ctx.definition;
        let module =
            ctx.workers
                .get(&phase.name)
                .cloned()
                .ok_or_else(|| ReconcileError::UnknownPhase {
                    phase: phase.name.clone(),
                    operator: def.name.clone(),
                    declared: def.phase_names(),
                })?;
        let namespace = self.resource.metadata.namespace.as_deref();
        ctx.inputs_synced(&phase.inputs, namespace).await?;
        // The takeover check and pruning read the output caches: not before their first list.
        ctx.outputs_synced(&phase.outputs, namespace).await?;
        // The request (every selected input, copied) is built once a worker slot is held, so
        // calls waiting for one hold no request.
        let slot = ctx
            .sandbox
            .slot(&def.name)
            .await
            .map_err(|source| ReconcileError::Worker {
                phase: phase.name.clone(),
                digest: module.digest.clone(),
                source,
            })?;
        Ok(PhaseReads {
            module,
            source: &ctx.inputs,
            samples: Samples::Query {
                prometheus: &ctx.metrics_source.client,
                fallback_url: ctx.metrics_source.default_url.as_deref(),
            },
            slot: Some(slot),
        })
    }

    fn keeps_request(&self, phase: &str) -> bool {
        crate::controller::live_evidence::wanted(self.ctx, phase)
    }

    fn called(&mut self, call: WorkerCall<'_>) {
        let error = match call.decided {
            Err(ReconcileError::Worker { source, .. }) => Some(source),
            _ => None,
        };
        record_worker_call(&self.ctx.definition.name, call.phase, call.duration, error);
        if let Some(request) = call.request {
            self.live = Some(LiveCall {
                request,
                result: RecordedResult::of(call.decided),
                module: call.module.to_string(),
                duration: call.duration,
                trace_id: crate::trace_export::current_trace_id(),
            });
        }
    }
}

impl Effects for ClusterEffects<'_> {
    type Existing = crate::controller::context::OutputCaches;

    fn existing(&self) -> &Self::Existing {
        &self.ctx.outputs
    }

    async fn before_writes(&mut self, resource: &DynamicObject) -> Result<(), ReconcileError> {
        match self.read {
            // Nothing is written from a decision about an object that has changed since.
            Read::FromCache => ensure_unchanged(self.ctx, self.api, resource).await,
            Read::FromApiServer => Ok(()),
        }
    }

    async fn apply(
        &mut self,
        phase: &str,
        owner_uid: &str,
        outputs: Vec<CheckedOutput>,
    ) -> ApplyReport {
        let ctx = self.ctx;
        // Nothing goes into the host's own namespaces, whatever the resource's namespace or the
        // worker's choice (a cluster-scoped resource's outputs name theirs).
        let (outputs, reserved): (Vec<_>, Vec<_>) = outputs
            .into_iter()
            .partition(|o| !ctx.reserved_namespaces.holds(o.namespace.as_deref()));
        // A cluster-scoped resource's worker names its outputs' namespaces: only the grant's.
        let resource_namespace = self.resource.metadata.namespace.clone();
        let (outputs, ungranted): (Vec<_>, Vec<_>) = outputs.into_iter().partition(|o| {
            ctx.output_namespace_granted(resource_namespace.as_deref(), o.namespace.as_deref())
        });
        // Until each answer is read back below, the outputs' watch events are held: one that
        // brings this very write is no news to the resource that applied it.
        let in_flight: Vec<_> = outputs
            .iter()
            .flat_map(|o| {
                let (namespace, name) = (o.namespace.as_deref(), o.name.as_str());
                let inputs = ctx.inputs.writing(&o.kind, namespace, name);
                inputs
                    .into_iter()
                    .chain(ctx.outputs.writing(&o.kind, namespace, name))
            })
            .collect();
        ctx.before_writes(outputs.len()).await;
        let mut report = outputs::apply_outputs(
            &ctx.as_operator,
            &ctx.definition.name,
            phase,
            owner_uid,
            &ctx.kinds,
            outputs,
        )
        .await;
        for out in reserved {
            tracing::warn!(object = %out.describe(), "refused an output into the host's own namespace");
            report.failed.push(OutputError::ReservedNamespace {
                object: out.describe(),
                namespace: out.namespace.unwrap_or_default(),
            });
        }
        for out in ungranted {
            tracing::warn!(object = %out.describe(), "refused an output into a namespace its grant does not list");
            report.failed.push(OutputError::NamespaceNotGranted {
                object: out.describe(),
                namespace: out.namespace.unwrap_or_default(),
            });
        }
        // Read your own writes: the next decision on this resource (the phase chained, or the
        // reconcile the status write brings) reads its owned inputs from these caches.
        for (kind, object) in &report.written {
            ctx.inputs.wrote(kind, object);
            ctx.outputs.wrote(kind, object);
        }
        drop(in_flight);
        if !report.converged.is_empty() {
            let reference = self.resource.object_ref(&ctx.resource.api);
            for (object, how) in &report.converged {
                report_convergence(ctx, &reference, object, how).await;
            }
        }
        report
    }

    async fn prune(
        &mut self,
        objects: Vec<(KindRef, ObjectMeta)>,
    ) -> Result<usize, (usize, OutputError)> {
        let ctx = self.ctx;
        let gone = |kind: &KindRef, m: &ObjectMeta| {
            let name = m.name.as_deref().unwrap_or_default();
            ctx.inputs.deleted(kind, m.namespace.as_deref(), name);
            ctx.outputs.deleted(kind, m.namespace.as_deref(), name);
        };
        ctx.before_writes(objects.len()).await;
        let pruned = outputs::prune_outputs(&ctx.as_operator, &ctx.kinds, objects, gone).await;
        if let Ok(pruned @ 1..) = pruned {
            tracing::info!(pruned, "deleted outputs the worker no longer returns");
        }
        pruned
    }

    async fn write_status(
        &mut self,
        resource: &DynamicObject,
        update: &StatusUpdate,
        now: &str,
        how: StatusWrite,
    ) -> Result<Option<DynamicObject>, ReconcileError> {
        if how.holdable && self.may_hold {
            if let Some(after) = status::status_after(resource.data.get("status"), update, now) {
                let mut held = resource.clone();
                held.data["status"] = after;
                self.held = true;
                return Ok(Some(held));
            }
        }
        self.ctx.before_writes(1).await;
        let started = std::time::Instant::now();
        let written = write_status_over(
            self.api,
            resource,
            self.on_server,
            update,
            now,
            how.conditional,
            &self.ctx.own_writes,
        )
        .await;
        crate::metrics::METRICS
            .status_write_duration
            .get_or_create(&crate::metrics::OperatorLabels {
                operator: self.ctx.definition.name.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        written
    }
}

/// Writes a status update if it changes anything; returns the resource as written, if it wrote.
/// The write is remembered in `own`, so its watch event does not reconcile the resource again.
pub async fn write_status(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    update: &StatusUpdate,
    now: &str,
    conditional: bool,
    own: &OwnWrites,
) -> Result<Option<DynamicObject>, ReconcileError> {
    write_status_over(api, obj, obj, update, now, conditional, own).await
}

/// [`write_status`] of an update decided on `decided_on`, which may carry status updates held
/// in memory (see [`StatusWrite::holdable`]) on top of `on_server`, the version the API server
/// has: one patch takes `on_server`'s status to `decided_on`'s with the update applied.
pub async fn write_status_over(
    api: &Api<DynamicObject>,
    decided_on: &DynamicObject,
    on_server: &DynamicObject,
    update: &StatusUpdate,
    now: &str,
    conditional: bool,
    own: &OwnWrites,
) -> Result<Option<DynamicObject>, ReconcileError> {
    let decided_status = decided_on.data.get("status");
    let server_status = on_server.data.get("status");
    let patch = if decided_status == server_status {
        status::status_patch(decided_status, update, now)
    } else {
        let after = status::status_after(decided_status, update, now)
            .or_else(|| decided_status.cloned())
            .unwrap_or_default();
        let empty = serde_json::Value::Object(Default::default());
        status::merge_patch_between(server_status.unwrap_or(&empty), &after)
    };
    let Some(patch) = patch else {
        return Ok(None);
    };
    let obj = on_server;
    let rv = if conditional {
        obj.metadata.resource_version.as_deref()
    } else {
        None
    };
    let uid = obj.metadata.uid.as_deref();
    own.begin(uid);
    let written = status::patch_status(api, &obj.name_any(), rv, patch).await;
    own.finish(uid, written.as_ref().ok());
    match written {
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(ReconcileError::StatusConflict),
        Err(source) => Err(ReconcileError::Api {
            action: "patching the status",
            source,
        }),
    }
}

/// Fails with [`ReconcileError::StaleDecision`] when the resource changed after the version the
/// decision was made from: its outputs would be applied from an outdated spec or phase. The
/// caller decides again from a fresh read. The check reads the resource kind's watch cache (no
/// request), and this host's own status write not yet back from the watch: a change that
/// arrived while the worker ran is there. One the watch has not
/// delivered yet (its lag, milliseconds) is caught by the status write, conditional on the same
/// resourceVersion: its 409 has the caller decide again at once from the API server, which
/// applies the current outputs over the stale ones and prunes what only they named. Without a
/// watch cache (a context no controller runs), the API server is asked.
async fn ensure_unchanged(
    ctx: &OperatorContext,
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<(), ReconcileError> {
    if let Some(store) = ctx.resources.get() {
        let key = kube::runtime::reflector::ObjectRef::from_obj_with(obj, ctx.resource.api.clone());
        // The newest version known: the watch's, or this host's own status write if the watch
        // has not brought it yet.
        let newest = store
            .get(&key)
            .map(|cached| ctx.own_writes.newer_than(&cached).unwrap_or(cached));
        return match newest {
            Some(newest) if newest.metadata.resource_version == obj.metadata.resource_version => {
                Ok(())
            }
            _ => Err(ReconcileError::StaleDecision),
        };
    }
    let fresh = api
        .get_metadata_opt(&obj.name_any())
        .await
        .map_err(|source| ReconcileError::Api {
            action: "reading the resource before applying its outputs",
            source,
        })?;
    match fresh {
        Some(m) if m.metadata.resource_version == obj.metadata.resource_version => Ok(()),
        _ => Err(ReconcileError::StaleDecision),
    }
}

/// An output that server-side apply alone could not converge, and what the host did instead:
/// a log line and an Event on the resource naming the object and the field managers overridden.
async fn report_convergence(
    ctx: &OperatorContext,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    object: &str,
    how: &outputs::Convergence,
) {
    let (reason, note) = match how {
        outputs::Convergence::Applied | outputs::Convergence::Kept => return,
        outputs::Convergence::Replaced { lists, managers } => (
            "OutputReplaced",
            format!(
                "{object}: replaced {} holding entries of field manager(s) {} with the worker's, then applied",
                lists.join(", "),
                managers.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ),
        outputs::Convergence::Recreated { reason } => (
            "OutputRecreated",
            format!("{object}: deleted and created again from the worker's decision ({reason})"),
        ),
    };
    tracing::info!(reason, "{note}");
    status::publish_event(&ctx.recorder, reference, false, reason, "Apply", note).await;
}

/// Worker call duration, and limit kills, for `/metrics`.
fn record_worker_call(operator: &str, phase: &str, elapsed: Duration, error: Option<&RunError>) {
    let m = &crate::metrics::METRICS;
    let labels = crate::metrics::PhaseLabels {
        operator: operator.to_string(),
        phase: phase.to_string(),
    };
    m.worker_duration
        .get_or_create(&labels)
        .observe(elapsed.as_secs_f64());
    let limit = match error {
        Some(RunError::DeadlineExceeded(_)) => "deadline",
        Some(RunError::MemoryLimit { .. }) => "memory",
        _ => return,
    };
    m.limit_kills
        .get_or_create(&crate::metrics::LimitLabels {
            operator: labels.operator,
            phase: labels.phase,
            limit: limit.into(),
        })
        .inc();
}

/// `sha256:0123456789ab` — enough to tell modules apart in messages.
pub fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}
