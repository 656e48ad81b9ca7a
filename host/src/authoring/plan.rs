//! `wasmpilot plan <kind>/<name> [-n ns] [--operator <op>]`: what the operator would do to one
//! live resource right now, without writing anything. Without `--operator`, the WasmOperator
//! whose `spec.resource` kind is `<kind>` (its kind or plural, any case) is used.
//!
//! It reads the WasmOperator, the resource and the current phase's inputs from the cluster,
//! loads the phase's module as the host does ([`ModuleCache`]: ConfigMap, OCI, URL, verified by
//! sha256, compile cache), runs it through [`crate::offline::OfflineOperator`], then asks the API server:
//! each output is server-side applied with `dryRun=All` (same field manager, labels and
//! ownerReference as the host), objects the phase would prune are deleted with `dryRun=All`,
//! and the status patch is sent to the status subresource with `dryRun=All`. The answers are
//! diffed field by field against the live objects.

use crate::crd::{KindRef, UpdateStrategy, WasmOperator};
use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::diff::{diff, without_bookkeeping, Change};
use crate::kinds::{self, ResolvedKind};
use crate::modules::{compile_cache_dir, ModuleCache};
use crate::offline::{self, ObjectsByKind};
use crate::pipeline::decision;
use crate::pipeline::effects::{Effects, PhaseReads, StatusWrite, WorkerCall, WorkerReads};
use crate::pipeline::outputs::{self, drift, ApplyReport, CheckedOutput, OutputError};
use crate::pipeline::status::{self, StatusUpdate};
use crate::pipeline::step::{self, Samples, StepOutcome};
use crate::pipeline::ReconcileError;
use crate::promql::Prometheus;
use crate::sandbox::{Sandbox, SandboxLimits};
use anyhow::{anyhow, bail, Context};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// `wasmpilot plan` arguments (and `capture`'s: the same live resource).
#[derive(clap::Args, Clone, Debug)]
pub struct PlanArgs {
    /// The resource as kind/name, e.g. `autoroute/example` (kind, plural or singular).
    pub target: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The WasmOperator that manages it (default: the one whose spec.resource is that kind).
    #[arg(long)]
    pub operator: Option<String>,
    /// Where `file` modules resolve (only for operators deployed with file modules).
    #[arg(long, env = "WASMPILOT_MODULE_DIR")]
    pub module_dir: Option<PathBuf>,
    /// Prometheus for phases' metric queries, unless the WasmOperator names one.
    #[arg(long, env = "WASMPILOT_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// The clock handed to the worker, RFC 3339 (default: now).
    #[arg(long)]
    pub now: Option<String>,
}

/// What a plan found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanSummary {
    pub phase: String,
    /// `None` for a final phase (no worker runs).
    pub next_phase: Option<String>,
    pub create: usize,
    pub update: usize,
    pub unchanged: usize,
    pub delete: usize,
}

/// A live resource of a deployed operator, as `plan` and `capture` find it.
pub(crate) struct LiveResource {
    pub operator: String,
    pub def: OperatorDefinition,
    pub resource_kind: ResolvedKind,
    pub resource: DynamicObject,
    pub namespace: Option<String>,
    pub name: String,
}

/// Finds `kind/name` and the WasmOperator managing it (named, or the one whose `spec.resource`
/// is that kind), with errors saying what to check.
pub(crate) async fn find_live(client: &Client, args: &PlanArgs) -> anyhow::Result<LiveResource> {
    let (target, namespace, operator) = (
        args.target.as_str(),
        args.namespace.as_deref(),
        args.operator.as_deref(),
    );
    let (kind_arg, name) = target
        .split_once('/')
        .ok_or_else(|| anyhow!("{target:?} is not kind/name: write e.g. autoroute/example"))?;
    let operators = Api::<WasmOperator>::all(client.clone());
    let operator = match operator {
        Some(op) => op.to_string(),
        None => infer_operator(client, &operators, kind_arg).await?,
    };
    let op = operators
        .get_opt(&operator)
        .await
        .context("reading WasmOperators (is KUBECONFIG set, and the wasmpilot CRD applied?)")?
        .ok_or_else(|| {
            anyhow!(
                "WasmOperator {operator} not found: deploy it first (wasmpilot deploy <dir>), or list them with kubectl get wasmoperators"
            )
        })?;
    let def = OperatorDefinition::validate(&operator, &op.spec)
        .with_context(|| format!("WasmOperator {operator} is invalid: fix it and redeploy (wasmpilot deploy <dir>); kubectl describe wasmoperator {operator} shows its Ready condition"))?;
    let resource_kind = kinds::resolve(client, &def.resource, "spec.resource").await?;
    let wanted = kind_arg.to_ascii_lowercase();
    if wanted != def.resource.kind.to_ascii_lowercase() && wanted != resource_kind.api.plural {
        bail!(
            "WasmOperator {operator} manages {} ({}), not {kind_arg:?}: use {}/{name}, or drop --operator to find the operator of {kind_arg:?}",
            def.resource.kind,
            resource_kind.api.plural,
            def.resource.kind.to_ascii_lowercase()
        );
    }
    let namespace = resource_kind.namespaced.then(|| {
        namespace
            .map(str::to_string)
            .unwrap_or_else(|| client.default_namespace().to_string())
    });
    let api = dynamic_api(client, &resource_kind, namespace.as_deref());
    let resource = api
        .get_opt(name)
        .await
        .with_context(|| {
            format!(
                "reading {} {name}: check access with `kubectl get {} {name}{}`",
                def.resource.kind,
                resource_kind.api.plural,
                namespace
                    .as_deref()
                    .map(|ns| format!(" -n {ns}"))
                    .unwrap_or_default()
            )
        })?
        .ok_or_else(|| {
            anyhow!(
                "{} {}/{name} not found (kubectl get {} -n {})",
                def.resource.kind,
                namespace.clone().unwrap_or_default(),
                resource_kind.api.plural,
                namespace.clone().unwrap_or_default()
            )
        })?;
    Ok(LiveResource {
        operator,
        def,
        resource_kind,
        resource,
        namespace,
        name: name.to_string(),
    })
}

/// What a phase's worker would be handed for a live resource now: the clock (`--now`, else
/// now), its inputs listed from the cluster, and where its metric samples come from (the
/// WasmOperator's Prometheus, else `--prometheus-url`).
pub(crate) async fn live_inputs<'a>(
    client: &Client,
    live: &LiveResource,
    phase: &PhaseDefinition,
    args: &'a PlanArgs,
    prometheus: &'a Prometheus,
) -> anyhow::Result<(String, ObjectsByKind, Samples<'a>)> {
    let now = args.now.clone().unwrap_or_else(step::now_rfc3339);
    let source = read_inputs(client, phase, live.namespace.as_deref()).await?;
    let samples = Samples::Query {
        prometheus,
        fallback_url: args.prometheus_url.as_deref(),
    };
    Ok((now, source, samples))
}

/// The hint a failed metric query of a live decision gets: where `plan` and `capture` look for
/// Prometheus.
pub(crate) fn with_query_hint(e: anyhow::Error) -> anyhow::Error {
    if matches!(
        e.downcast_ref::<ReconcileError>(),
        Some(ReconcileError::Query { .. })
    ) {
        e.context("the phase's metric queries failed (pass --prometheus-url if the WasmOperator names no Prometheus)")
    } else {
        e
    }
}

/// Modules loaded as the host loads them (ConfigMap, OCI, URL, verified by sha256), with the
/// compile cache, for a decision about a live resource.
pub(crate) fn live_modules(
    client: &Client,
    args: &PlanArgs,
    limits: SandboxLimits,
) -> anyhow::Result<ModuleCache> {
    Ok(ModuleCache::new(
        Sandbox::new(limits)?,
        Some(client.clone()),
        args.module_dir.clone(),
    )
    .with_compile_cache(compile_cache_dir(None, false))
    .with_progress())
}

/// Runs the plan and writes it to `out`: the controller's phase step ([`step::run`]) with a
/// server-side dry run as its effects ([`DryRun`]).
pub async fn plan(
    client: Client,
    args: &PlanArgs,
    limits: SandboxLimits,
    out: &mut dyn Write,
) -> anyhow::Result<PlanSummary> {
    let live = find_live(&client, args).await?;
    let operator = live.operator.clone();
    let name = live.name.as_str();
    let namespace = live.namespace.clone();
    let def = &live.def;
    let resource = &live.resource;
    let api = dynamic_api(&client, &live.resource_kind, namespace.as_deref());
    let described = outputs::describe(&(def.resource.clone(), namespace.clone(), name.to_string()));
    let phase_name = step::current_phase(def, resource).to_string();
    writeln!(out, "plan for {described} (operator {operator})")?;
    let phase = step::declared_phase(def, &phase_name)?;

    // What the phase reads, and the objects of its output kinds, listed once.
    let prometheus = Prometheus::default();
    let (now, source, samples) = live_inputs(&client, &live, phase, args, &prometheus).await?;
    let mut output_kinds: HashMap<KindRef, ResolvedKind> = HashMap::new();
    let mut existing = ListedObjects::default();
    for (i, k) in phase.outputs.iter().enumerate() {
        let resolved = kinds::resolve(&client, k, &format!("outputs[{i}]")).await?;
        let listed = dynamic_api(&client, &resolved, namespace.as_deref())
            .list_metadata(&ListParams::default())
            .await
            .with_context(|| {
                format!(
                    "listing the {} objects, to check takeovers and find what the phase would prune: check that KUBECONFIG's user may list them (kubectl auth can-i list {})",
                    k.kind, resolved.api.plural
                )
            })?;
        existing.0.insert(
            k.clone(),
            listed.items.into_iter().map(|m| m.metadata).collect(),
        );
        output_kinds.insert(k.clone(), resolved);
    }
    let namespaced: HashMap<KindRef, bool> = output_kinds
        .iter()
        .map(|(k, r)| (k.clone(), r.namespaced))
        .collect();
    let modules = live_modules(&client, args, limits)?;
    let operator_run = offline::OfflineOperator {
        modules: &modules,
        definition: def,
        namespaced: &namespaced,
    };
    let mut dry = DryRun {
        reads: offline::OfflineReads::new(&modules, &source, samples),
        client: &client,
        status_api: &api,
        operator: &def.name,
        output_kinds: &output_kinds,
        existing,
        out,
        summary: PlanSummary {
            phase: phase_name.clone(),
            ..Default::default()
        },
        redactor: Default::default(),
        status_changed: false,
        described: &described,
    };
    let outcome = step::run(operator_run.step(resource, &now), &mut dry).await;
    let DryRun {
        out,
        mut summary,
        status_changed,
        ..
    } = dry;
    let decided = match outcome {
        Ok(StepOutcome::Final) => {
            writeln!(
                out,
                "phase {phase_name} is final: the host runs no worker until the spec changes"
            )?;
            return Ok(summary);
        }
        Ok(StepOutcome::Restarted { .. }) => {
            writeln!(out, "\nphase {phase_name} is final, but the spec changed (generation {}): the host restarts it at {}", resource.metadata.generation.unwrap_or(0), def.initial_phase)?;
            return Ok(summary);
        }
        Ok(StepOutcome::Decided(decided)) => decided,
        Err(ReconcileError::Apply { failures, .. }) => {
            for failure in &failures {
                writeln!(out, "\n! {failure}")?;
            }
            writeln!(
                out,
                "\n{} to create, {} to update, {} unchanged; the host prunes nothing and writes no status until every output applies.\nNothing was written (server-side dry run).",
                summary.create, summary.update, summary.unchanged
            )?;
            return Err(refusals(&failures));
        }
        Err(e) => return Err(with_query_hint(e.into())),
    };
    let decision = &decided.decision;
    summary.next_phase = Some(decision.next_phase.clone());
    let then = if decision.next_phase != phase_name {
        format!(
            "at once: the phase moves to {}, and the host follows it in the same reconcile",
            decision.next_phase
        )
    } else {
        let (wait, why) = decision::wait_after_staying(decision.requeue_after_ms, def.resync);
        format!(
            "after {} ({why}{})",
            humantime::format_duration(wait),
            if status_changed || summary.create + summary.update + summary.delete > 0 {
                "; what it writes wakes nothing: the host's own writes"
            } else {
                ""
            }
        )
    };
    writeln!(
        out,
        "\n{} to create, {} to update, {} unchanged, {} to delete; next reconcile {then}.\nNothing was written (server-side dry run).",
        summary.create, summary.update, summary.unchanged, summary.delete
    )?;
    Ok(summary)
}

/// Why a plan fails when the host would not apply every output: the outputs it would refuse
/// (someone else's objects) and those the API server refuses.
fn refusals(failures: &[OutputError]) -> anyhow::Error {
    let (taken, refused): (Vec<&OutputError>, Vec<&OutputError>) = failures
        .iter()
        .partition(|f| matches!(f, OutputError::NotOurs { .. }));
    let objects = |fs: &[&OutputError]| {
        fs.iter()
            .map(|f| match f {
                OutputError::NotOurs { object, .. }
                | OutputError::ApplyFailed { object, .. }
                | OutputError::ConvergeFailed { object, .. }
                | OutputError::PruneFailed { object, .. } => object.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !taken.is_empty() {
        return anyhow!(
            "the host would refuse {} (OutputRefused: they exist without this resource as controller) and apply the other outputs; delete or rename them, or have the worker return other names",
            objects(&taken)
        );
    }
    anyhow!(
        "the API server refuses {} (the host would report ApplyFailed): fix the worker's outputs",
        objects(&refused)
    )
}

/// The metadata of the objects of each output kind in the resource's namespace, listed once:
/// what the plan checks takeovers and pruning against, as the host checks its caches.
#[derive(Default)]
struct ListedObjects(HashMap<KindRef, Vec<kube::api::ObjectMeta>>);

impl outputs::ExistingObjects for ListedObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<kube::api::ObjectMeta> {
        self.0
            .get(kind)?
            .iter()
            .find(|m| m.name.as_deref() == Some(name) && m.namespace.as_deref() == namespace)
            .cloned()
    }

    fn each_maybe_controlled_by(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        _controller: &str,
        visit: &mut dyn FnMut(&kube::api::ObjectMeta),
    ) {
        for m in self.0.get(kind).into_iter().flatten() {
            if namespace.is_none() || m.namespace.as_deref() == namespace {
                visit(m);
            }
        }
    }
}

/// The phase step's effects as a server-side dry run: each output applied with `dryRun=All`
/// (same field manager, labels and ownerReference as the host), each prune a `dryRun=All`
/// delete, the status patch sent to the status subresource with `dryRun=All`; every answer
/// diffed against the live object and written to `out`.
struct DryRun<'a> {
    reads: offline::OfflineReads<'a, ObjectsByKind>,
    client: &'a Client,
    /// The resource's API (its status subresource).
    status_api: &'a Api<DynamicObject>,
    operator: &'a str,
    output_kinds: &'a HashMap<KindRef, ResolvedKind>,
    existing: ListedObjects,
    out: &'a mut dyn Write,
    summary: PlanSummary,
    /// Secret data the worker read, or writes, is not printed (keys and changes still are).
    redactor: crate::redaction::Redactor,
    status_changed: bool,
    /// The resource, as messages name it.
    described: &'a str,
}

impl WorkerReads for DryRun<'_> {
    type Source = ObjectsByKind;

    async fn reads(
        &mut self,
        phase: &PhaseDefinition,
    ) -> Result<PhaseReads<'_, ObjectsByKind>, ReconcileError> {
        self.reads.reads(phase).await
    }

    fn keeps_request(&self, phase: &str) -> bool {
        self.reads.keeps_request(phase)
    }

    fn called(&mut self, call: WorkerCall<'_>) {
        let request = call.request.as_ref();
        let inputs = request.map(|r| r.inputs.as_slice()).unwrap_or_default();
        self.redactor = crate::redaction::Redactor::of_objects(
            inputs
                .iter()
                .flat_map(|i| i.objects.iter().map(String::as_str)),
        );
        if let Ok(decision) = call.decided {
            let seen: Vec<String> = inputs
                .iter()
                .map(|i| format!("{} ({})", i.name, i.objects.len()))
                .collect();
            // A failed write of the plan is reported by the writes after it.
            let _ = writeln!(
                self.out,
                "phase {} → {}, decided by {}{}",
                call.phase,
                decision.next_phase,
                decision.module,
                if seen.is_empty() {
                    String::new()
                } else {
                    format!(" from inputs {}", seen.join(", "))
                }
            );
        }
        self.reads.called(call)
    }
}

impl DryRun<'_> {
    fn redact(&self, value: &mut Value, kind: &KindRef) {
        if kind.api_version == "v1" && kind.kind == "Secret" {
            crate::redaction::redact_secret_object(value);
        }
        self.redactor.json(value);
    }

    /// One output, dry-run applied and diffed; a refusal is returned.
    async fn apply_one(
        &mut self,
        o: &CheckedOutput,
        uid: &str,
    ) -> anyhow::Result<Result<(), OutputError>> {
        let field_manager = crate::field_manager(self.operator);
        let what = o.describe();
        let resolved = &self.output_kinds[&o.kind];
        let api = dynamic_api(self.client, resolved, o.namespace.as_deref());
        let live = api.get_opt(&o.name).await.with_context(|| {
            format!("reading the live {what} to diff against: check that KUBECONFIG's user may get it (kubectl auth can-i get {})", resolved.api.plural)
        })?;
        let params = PatchParams::apply(&field_manager).force().dry_run();
        let live = live
            .map(|l| serde_json::to_value(l).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        let ours = !live.is_null() && outputs::controlled_by(&live, uid);
        // What the host does when server-side apply alone cannot converge an object of the
        // resource's (outputs::Convergence): said before the diff, blaming the right party.
        let planned = match api.patch(&o.name, &params, &Patch::Apply(&o.object)).await {
            Ok(p) => {
                let planned = serde_json::to_value(p)?;
                let foreign = drift::foreign_lists(&planned, &o.object, &field_manager);
                if ours && !foreign.is_empty() {
                    write_replacement(self.out, &what, &foreign, None)?;
                    drift::with_lists_replaced(&planned, &foreign)
                } else {
                    planned
                }
            }
            Err(kube::Error::Api(e)) if ours && e.code == 422 => {
                let foreign = drift::foreign_lists(&live, &o.object, &field_manager);
                if !foreign.is_empty() {
                    write_replacement(self.out, &what, &foreign, Some(&e.message))?;
                    // No dry run can follow a dry run: the apply after the replacement is
                    // approximated by merging the worker's object over the replaced one.
                    let mut planned = drift::with_lists_replaced(&live, &foreign);
                    json_patch::merge(&mut planned, &o.object);
                    planned
                } else if e.message.contains("immutable") {
                    writeln!(
                        self.out,
                        "\n~ recreate {what}: the worker changes a field that cannot change once set ({}); the host deletes it and creates it from the worker's decision (OutputRecreated)",
                        e.message
                    )?;
                    self.summary.update += 1;
                    return Ok(Ok(()));
                } else {
                    return Ok(Err(OutputError::ApplyFailed {
                        object: what,
                        source: kube::Error::Api(e),
                    }));
                }
            }
            Err(source) => {
                return Ok(Err(OutputError::ApplyFailed {
                    object: what,
                    source,
                }))
            }
        };
        let (mut live, mut planned) = (live, planned);
        self.redact(&mut live, &o.kind);
        self.redact(&mut planned, &o.kind);
        let changes = diff(&without_bookkeeping(&live), &without_bookkeeping(&planned));
        let verb = if live.is_null() {
            self.summary.create += 1;
            "+ create"
        } else if changes.is_empty() {
            self.summary.unchanged += 1;
            "= unchanged"
        } else if o.update == UpdateStrategy::OnDelete {
            // The host leaves it as it is: these changes wait until someone deletes it.
            self.summary.unchanged += 1;
            "= kept (updateStrategy OnDelete: these changes once it is deleted)"
        } else if o.update == UpdateStrategy::Recreate && ours {
            self.summary.update += 1;
            "~ recreate (updateStrategy Recreate: deleted, then created as the worker returns it)"
        } else {
            self.summary.update += 1;
            "~ update"
        };
        writeln!(self.out, "\n{verb} {what}")?;
        write_changes(self.out, &changes)?;
        Ok(Ok(()))
    }

    async fn prune_one(&mut self, kind: &KindRef, m: &kube::api::ObjectMeta) -> anyhow::Result<()> {
        let key = (
            kind.clone(),
            m.namespace.clone(),
            m.name.clone().unwrap_or_default(),
        );
        let api = dynamic_api(
            self.client,
            &self.output_kinds[kind],
            m.namespace.as_deref(),
        );
        let params = DeleteParams {
            dry_run: true,
            ..Default::default()
        };
        api.delete(&key.2, &params).await.with_context(|| {
            format!(
                "dry-run delete of {} failed: the host could not prune it either; grant it with `wasmpilot rbac <operator.yaml> | kubectl apply -f -`",
                outputs::describe(&key)
            )
        })?;
        self.summary.delete += 1;
        let phase = m
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::PHASE_LABEL))
            .cloned()
            .unwrap_or_default();
        writeln!(
            self.out,
            "\n- delete {} (phase {phase} no longer returns it)",
            outputs::describe(&key)
        )?;
        Ok(())
    }

    async fn status_one(
        &mut self,
        resource: &DynamicObject,
        update: &StatusUpdate,
        now: &str,
    ) -> anyhow::Result<Option<DynamicObject>> {
        let current = resource.data.get("status");
        let Some(patch) = status::status_patch(current, update, now) else {
            writeln!(self.out, "\n= status of {} unchanged", self.described)?;
            return Ok(None);
        };
        let params = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        let name = resource.metadata.name.clone().unwrap_or_default();
        let planned = self
            .status_api
            .patch_status(&name, &params, &Patch::Merge(&json!({ "status": patch })))
            .await
            .with_context(|| format!("dry-run status patch of {}", self.described))?;
        let changes = diff(
            current.unwrap_or(&Value::Null),
            planned.data.get("status").unwrap_or(&Value::Null),
        );
        writeln!(self.out, "\n~ status of {}", self.described)?;
        write_changes(self.out, &changes)?;
        self.status_changed = true;
        Ok(Some(planned))
    }
}

/// A failure of the plan itself (not of the host's would-be write), as the step's error.
fn plan_failed(action: &'static str) -> impl Fn(anyhow::Error) -> ReconcileError {
    move |e| ReconcileError::Effect {
        action,
        source: e.into(),
    }
}

impl Effects for DryRun<'_> {
    type Existing = ListedObjects;

    fn existing(&self) -> &ListedObjects {
        &self.existing
    }

    async fn apply(
        &mut self,
        phase: &str,
        owner_uid: &str,
        mut checked: Vec<CheckedOutput>,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        checked.sort_by_key(CheckedOutput::key);
        for mut o in checked {
            outputs::label(&mut o.object, self.operator, phase);
            match self.apply_one(&o, owner_uid).await {
                Ok(Ok(())) => report.applied += 1,
                Ok(Err(refused)) => report.failed.push(refused),
                Err(e) => report.failed.push(OutputError::ApplyFailed {
                    object: o.describe(),
                    source: kube::Error::Service(e.into()),
                }),
            }
        }
        report
    }

    async fn prune(
        &mut self,
        objects: Vec<(KindRef, kube::api::ObjectMeta)>,
    ) -> Result<usize, (usize, OutputError)> {
        let mut pruned = 0;
        for (kind, m) in objects {
            if let Err(e) = self.prune_one(&kind, &m).await {
                let object = outputs::describe(&(
                    kind,
                    m.namespace.clone(),
                    m.name.clone().unwrap_or_default(),
                ));
                return Err((
                    pruned,
                    OutputError::PruneFailed {
                        object,
                        source: kube::Error::Service(e.into()),
                    },
                ));
            }
            pruned += 1;
        }
        Ok(pruned)
    }

    async fn write_status(
        &mut self,
        resource: &DynamicObject,
        update: &StatusUpdate,
        now: &str,
        _how: StatusWrite,
    ) -> Result<Option<DynamicObject>, ReconcileError> {
        self.status_one(resource, update, now)
            .await
            .map_err(plan_failed("the dry-run status patch"))
    }
}

/// Says which lists the host replaces in an object of the resource's, whose entries they hold,
/// and (when apply alone is refused) the API server's refusal.
fn write_replacement(
    out: &mut dyn Write,
    what: &str,
    foreign: &[drift::ForeignList],
    refusal: Option<&str>,
) -> anyhow::Result<()> {
    let mut managers = BTreeSet::new();
    for f in foreign {
        managers.extend(f.managers.iter().cloned());
    }
    let lists: Vec<String> = foreign.iter().map(drift::ForeignList::path).collect();
    writeln!(
        out,
        "\n~ replace {} of {what}: field manager(s) {} hold entries there that the worker does not return{}; the host replaces the list(s) with the worker's, then applies (OutputReplaced)",
        lists.join(", "),
        managers.into_iter().collect::<Vec<_>>().join(", "),
        match refusal {
            Some(r) => format!(" (server-side apply alone is refused: {r})"),
            None => String::new(),
        }
    )?;
    Ok(())
}

/// A WasmOperator and the kind of its top-level resource.
struct Managed {
    operator: String,
    kind: KindRef,
    /// The kind's plural, when the API server serves it.
    plural: Option<String>,
}

impl Managed {
    /// `kind` as users type it: the kind or its plural, any case.
    fn manages(&self, kind: &str) -> bool {
        let kind = kind.to_ascii_lowercase();
        kind == self.kind.kind.to_ascii_lowercase() || self.plural.as_deref() == Some(kind.as_str())
    }
}

/// The WasmOperator whose `spec.resource` is `kind` (kind or plural, any case).
async fn infer_operator(
    client: &Client,
    operators: &Api<WasmOperator>,
    kind: &str,
) -> anyhow::Result<String> {
    let list = operators
        .list(&ListParams::default())
        .await
        .context("listing WasmOperators to find the one managing the resource (is KUBECONFIG set, and the wasmpilot CRD applied?); or name it with --operator")?;
    let mut managed = Vec::new();
    for op in list.items {
        let resource = op.spec.resource.clone();
        let plural = kinds::resolve(client, &resource, "spec.resource")
            .await
            .ok()
            .map(|r| r.api.plural);
        managed.push(Managed {
            operator: op.metadata.name.unwrap_or_default(),
            kind: resource,
            plural,
        });
    }
    choose_operator(kind, &managed)
}

/// The one operator managing `kind`; none or several is an error saying what to do.
fn choose_operator(kind: &str, managed: &[Managed]) -> anyhow::Result<String> {
    let matching: Vec<&Managed> = managed.iter().filter(|m| m.manages(kind)).collect();
    match matching.as_slice() {
        [one] => Ok(one.operator.clone()),
        [] => bail!(
            "no WasmOperator manages {kind:?}: check the kind, deploy its operator (wasmpilot deploy <dir>), or name one with --operator (kubectl get wasmoperators lists them{})",
            if managed.is_empty() {
                "; there are none".to_string()
            } else {
                format!(
                    ": {}",
                    managed
                        .iter()
                        .map(|m| format!("{} manages {}", m.operator, m.kind))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
        several => bail!(
            "{} WasmOperators manage {kind:?}: {}; choose one with --operator",
            several.len(),
            several
                .iter()
                .map(|m| format!("{} ({})", m.operator, m.kind))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn write_changes(out: &mut dyn Write, changes: &[Change]) -> std::io::Result<()> {
    for c in changes {
        writeln!(out, "    {c}")?;
    }
    Ok(())
}

fn dynamic_api(
    client: &Client,
    kind: &ResolvedKind,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    kind.api(client, namespace)
}

/// The phase's input objects, listed from the resource's namespace (the host reads the same
/// from its watch caches).
async fn read_inputs(
    client: &Client,
    phase: &PhaseDefinition,
    namespace: Option<&str>,
) -> anyhow::Result<ObjectsByKind> {
    let mut objects: HashMap<KindRef, Vec<Arc<DynamicObject>>> = HashMap::new();
    for (i, input) in phase.inputs.iter().enumerate() {
        let kind = KindRef::new(&input.api_version, &input.kind);
        if objects.contains_key(&kind) {
            continue;
        }
        let resolved = kinds::resolve(client, &kind, &format!("inputs[{i}]")).await?;
        let list = dynamic_api(client, &resolved, namespace)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {kind} for input {}", input.name))?;
        objects.insert(kind, list.items.into_iter().map(Arc::new).collect());
    }
    Ok(ObjectsByKind(objects))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed(operator: &str, api_version: &str, kind: &str, plural: &str) -> Managed {
        Managed {
            operator: operator.into(),
            kind: KindRef::new(api_version, kind),
            plural: Some(plural.into()),
        }
    }

    #[test]
    fn the_operator_is_found_by_kind_or_plural() {
        let ops = [
            managed("autoroute", "examples.io/v1", "AutoRoute", "autoroutes"),
            managed(
                "shell",
                "cache.example.com/v1alpha1",
                "MyOwnShell",
                "myownshells",
            ),
        ];
        for kind in ["autoroute", "AutoRoute", "autoroutes", "AUTOROUTES"] {
            assert_eq!(choose_operator(kind, &ops).unwrap(), "autoroute", "{kind}");
        }
        assert_eq!(choose_operator("myownshell", &ops).unwrap(), "shell");

        let none = choose_operator("service", &ops).unwrap_err().to_string();
        assert!(
            none.starts_with("no WasmOperator manages \"service\""),
            "{none}"
        );
        assert!(none.contains("kubectl get wasmoperators"), "{none}");
        assert!(
            none.contains("autoroute manages examples.io/v1 AutoRoute"),
            "{none}"
        );

        let both = [
            managed("autoroute", "examples.io/v1", "AutoRoute", "autoroutes"),
            managed("autoroute-v2", "examples.io/v2", "AutoRoute", "autoroutes"),
        ];
        let several = choose_operator("autoroute", &both).unwrap_err().to_string();
        assert!(
            several.contains("2 WasmOperators manage \"autoroute\": autoroute (examples.io/v1 AutoRoute), autoroute-v2 (examples.io/v2 AutoRoute); choose one with --operator"),
            "{several}"
        );
        assert!(choose_operator("x", &[])
            .unwrap_err()
            .to_string()
            .contains("there are none"));
    }
}
