//! `wasmpilot simulate`: runs an operator's real components offline, reconcile after reconcile,
//! against objects from a file, and prints every step (phase, outputs, status) as YAML.
//!
//! Each step is the controller's phase step ([`crate::pipeline::step::run`]: the host's input
//! gathering, sandbox, transition and output checks, takeover refusal, pruning, status write)
//! with the simulated cluster as its effects:
//! - outputs are applied to it (labelled with operator and phase; an output replaces the
//!   object of the same kind/namespace/name) and objects this phase applied before and no
//!   longer returns are pruned; an output naming an object the resource does not control is
//!   refused, as the host refuses it;
//! - the status info is merged into `.status` with phase, observedGeneration, moduleDigest and
//!   the `Synced` condition ([`crate::pipeline::status::status_patch`]);
//! - the virtual clock moves like the host's schedule: a phase change is followed at once (the
//!   host decides the next phase in the same reconcile, up to
//!   [`MAX_CHAINED_PHASES`](crate::pipeline::decision::MAX_CHAINED_PHASES) changes after the
//!   first, then 1 s later); a step that stays waits for the worker's requeue-after (within 1 s
//!   and 24 h) or the resync interval, whatever it wrote: the host's own writes wake nothing. A
//!   step that stays, changes nothing and asks for no requeue has converged: the host would
//!   decide the same on every resync.
//!
//! A final phase stops the run (unless the generation changed: then the resource restarts at
//! the initial phase, as the host does). The clock starts at `--now`, by default
//! [`DEFAULT_NOW`], so the output is the same on every run: golden-file friendly.

use crate::crd::{KindRef, UpdateStrategy};
use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::modules::{compile_cache_dir, ModuleCache};
use crate::offline::{self, ObjectsByKind};
use crate::pipeline::decision::{self, MAX_CHAINED_PHASES, MIN_REQUEUE_AFTER};
use crate::pipeline::effects::{Effects, PhaseReads, StatusWrite, WorkerCall, WorkerReads};
use crate::pipeline::outputs::{
    self, describe, ApplyReport, CheckedOutput, ExistingObjects, ObjectKey, OutputError,
};
use crate::pipeline::status::{self, StatusUpdate};
use crate::pipeline::step::{self, StepOutcome};
use crate::pipeline::ReconcileError;
use crate::sandbox::{NamedObjects, Sandbox, SandboxLimits};
use anyhow::{anyhow, bail, Context};
use kube::api::{DynamicObject, ObjectMeta};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The clock a simulation starts at unless `--now` says otherwise (the SDK's test clock).
pub const DEFAULT_NOW: &str = "2025-01-01T00:00:00Z";

/// The uid a resource without one gets (outputs' ownerReferences name it).
pub const SIMULATED_UID: &str = "00000000-0000-0000-0000-000000000001";

/// `wasmpilot simulate` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct SimulateArgs {
    /// The operator directory (with operator.yaml and the worker crates) or its operator.yaml.
    pub operator: PathBuf,
    /// The top-level resource (YAML); its `.status` is the starting state.
    #[arg(long)]
    pub resource: PathBuf,
    /// Objects already in the cluster (multi-document YAML): inputs, and outputs of earlier runs.
    #[arg(long)]
    pub objects: Option<PathBuf>,
    /// Where the built components are (default: the operator directory's cargo target dir,
    /// wasm32-wasip2/release, where `wasmpilot build` puts them).
    #[arg(long)]
    pub module_dir: Option<PathBuf>,
    /// What Prometheus answers to the phases' metric queries, every step (YAML: query name →
    /// a number, or a list of numbers or `{labels, value}`). Queries it does not name get no
    /// samples.
    #[arg(long)]
    pub samples: Option<PathBuf>,
    /// The clock at the first step, RFC 3339.
    #[arg(long, default_value = DEFAULT_NOW)]
    pub now: String,
    /// Stop after this many reconciles at most.
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// Directories of CustomResourceDefinitions saying which output kinds are cluster-scoped
    /// (default: the operator directory's crds/); Kubernetes' own kinds are known.
    #[arg(long)]
    pub crds: Vec<PathBuf>,
    /// Then delete the resource: run the operator's finalizer as the host does on deletion (its
    /// inputs selected from the simulated objects) until it reports done, at most --steps times.
    #[arg(long)]
    pub delete: bool,
}

fn key_of(v: &Value) -> Option<ObjectKey> {
    Some((
        KindRef::new(v["apiVersion"].as_str()?, v["kind"].as_str()?),
        v["metadata"]["namespace"].as_str().map(str::to_string),
        v["metadata"]["name"].as_str()?.to_string(),
    ))
}

/// One reconcile, as printed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StepReport {
    step: usize,
    time: String,
    phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_phase: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    changes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    outputs: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    status: Value,
    then: String,
}

/// How a simulation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A step changed nothing and asked for no requeue.
    Converged { phase: String },
    /// The resource reached a final phase.
    Final { phase: String },
    /// `--steps` reconciles ran.
    StepLimit { phase: String },
}

/// The simulated cluster: the resource and every other object, keyed.
pub(crate) struct World {
    pub(crate) resource: DynamicObject,
    pub(crate) objects: BTreeMap<ObjectKey, Value>,
}

impl World {
    pub(crate) fn source(&self) -> anyhow::Result<ObjectsByKind> {
        let resource = serde_json::to_value(&self.resource)?;
        ObjectsByKind::from_values(self.objects.values().cloned().chain([resource]))
    }

    fn status(&self) -> Value {
        self.resource
            .data
            .get("status")
            .cloned()
            .unwrap_or_else(|| json!({}))
    }

    /// Merges a status update like the host; returns the top-level fields it changed.
    fn write_status(&mut self, update: &StatusUpdate, now: &str) -> Vec<String> {
        let current = self.resource.data.get("status");
        let Some(patch) = status::status_patch(current, update, now) else {
            return Vec::new();
        };
        let before = current.cloned().unwrap_or_else(|| json!({}));
        let mut merged = before.clone();
        json_patch::merge(&mut merged, &patch);
        let changed = patch
            .as_object()
            .into_iter()
            .flat_map(|p| p.keys())
            .filter(|k| before.get(k.as_str()) != merged.get(k.as_str()))
            .cloned()
            .collect();
        self.resource.data["status"] = merged;
        changed
    }
}

impl ExistingObjects for World {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<ObjectMeta> {
        let key = (
            kind.clone(),
            namespace.map(str::to_string),
            name.to_string(),
        );
        meta_of(self.objects.get(&key)?)
    }

    fn each_maybe_controlled_by(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        _controller: &str,
        visit: &mut dyn FnMut(&ObjectMeta),
    ) {
        for ((k, ns, _), object) in &self.objects {
            if k == kind && (namespace.is_none() || ns.as_deref() == namespace) {
                if let Some(meta) = meta_of(object) {
                    visit(&meta);
                }
            }
        }
    }
}

/// An object's metadata, with its namespace as the key has it.
fn meta_of(object: &Value) -> Option<ObjectMeta> {
    serde_json::from_value(object["metadata"].clone()).ok()
}

/// One simulated reconcile's reads and writes: the worker's component and inputs as the
/// offline commands read them, writes to the simulated cluster, what changed noted for the
/// step's report.
pub(crate) struct SimulatedCluster<'a> {
    reads: offline::OfflineReads<'a, ObjectsByKind>,
    world: &'a mut World,
    operator: &'a str,
    /// "created …", "updated …", "deleted …".
    changes: Vec<String>,
    /// The applied objects, in key order.
    applied: Vec<Value>,
    /// The status fields the step changed.
    status_changed: Vec<String>,
}

impl<'a> SimulatedCluster<'a> {
    /// `operator`'s step on `world`, its worker read through `reads`.
    pub(crate) fn new(
        reads: offline::OfflineReads<'a, ObjectsByKind>,
        world: &'a mut World,
        operator: &'a str,
    ) -> Self {
        SimulatedCluster {
            reads,
            world,
            operator,
            changes: Vec::new(),
            applied: Vec::new(),
            status_changed: Vec::new(),
        }
    }
}

impl WorkerReads for SimulatedCluster<'_> {
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
        self.reads.called(call)
    }
}

impl Effects for SimulatedCluster<'_> {
    type Existing = World;

    fn existing(&self) -> &World {
        self.world
    }

    /// Outputs labelled like the host's replace the object of the same kind/namespace/name.
    async fn apply(
        &mut self,
        phase: &str,
        _owner_uid: &str,
        outputs: Vec<CheckedOutput>,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        for o in outputs {
            let mut object = o.object.clone();
            outputs::label(&mut object, self.operator, phase);
            let existing = self.world.objects.get(&o.key());
            if let (Some(kept), UpdateStrategy::OnDelete) = (existing, o.update) {
                // Left as it is (updateStrategy OnDelete).
                self.applied.push(kept.clone());
                report.applied += 1;
                continue;
            }
            match self.world.objects.insert(o.key(), object.clone()) {
                None => self.changes.push(format!("created {}", o.describe())),
                Some(previous) if previous != object => {
                    let how = match o.update {
                        UpdateStrategy::Recreate => "recreated",
                        _ => "updated",
                    };
                    self.changes.push(format!("{how} {}", o.describe()))
                }
                Some(_) => {}
            }
            self.applied.push(object);
            report.applied += 1;
        }
        self.applied.sort_by_key(key_of);
        report
    }

    async fn prune(
        &mut self,
        objects: Vec<(KindRef, ObjectMeta)>,
    ) -> Result<usize, (usize, OutputError)> {
        let mut pruned = 0;
        for (kind, m) in objects {
            let key = (
                kind,
                m.namespace.clone(),
                m.name.clone().unwrap_or_default(),
            );
            if self.world.objects.remove(&key).is_some() {
                pruned += 1;
                self.changes
                    .push(format!("deleted {} (no longer returned)", describe(&key)));
            }
        }
        Ok(pruned)
    }

    async fn write_status(
        &mut self,
        _resource: &DynamicObject,
        update: &StatusUpdate,
        now: &str,
        _how: StatusWrite,
    ) -> Result<Option<DynamicObject>, ReconcileError> {
        self.status_changed = self.world.write_status(update, now);
        Ok((!self.status_changed.is_empty()).then(|| self.world.resource.clone()))
    }
}

/// Where the project is: the directory and its operator.yaml.
fn locate(operator: &Path) -> (PathBuf, PathBuf) {
    let manifest = super::graph::operator_manifest(operator);
    let dir = manifest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    (dir, manifest)
}

/// Runs the simulation, writing YAML documents to `out` as it goes.
pub async fn simulate(
    args: &SimulateArgs,
    limits: SandboxLimits,
    out: &mut dyn Write,
) -> anyhow::Result<End> {
    let (dir, manifest) = locate(&args.operator);
    let (_, def) = offline::load_operator(&manifest)?;
    let module_dir = match &args.module_dir {
        Some(d) => d.clone(),
        None => crate::component_build::out_dir(&dir).with_context(|| {
            format!(
                "finding the components of {} (pass --module-dir DIR to name where they are)",
                dir.display()
            )
        })?,
    };
    check_modules_built(&def, &module_dir, &dir)?;
    let crd_dirs = if args.crds.is_empty() {
        vec![dir.join("crds")]
    } else {
        args.crds.clone()
    };
    let namespaced = offline::output_scopes(&def, &crd_dirs)?;
    let mut world = load_world(args, &def)?;
    let samples = match &args.samples {
        Some(path) => Samples::read(path, &def)?,
        None => Samples::default(),
    };
    let mut now: jiff::Timestamp = args.now.parse().map_err(|e| {
        anyhow!(
            "--now {:?} is not an RFC 3339 time like {DEFAULT_NOW}: {e}",
            args.now
        )
    })?;
    // The compile cache `wasmpilot run` uses: a rerun loads unchanged components in milliseconds.
    let modules = ModuleCache::new(Sandbox::new(limits)?, None, Some(module_dir))
        .with_compile_cache(compile_cache_dir(None, false))
        .with_progress();
    let name = describe(&(
        def.resource.clone(),
        world.resource.metadata.namespace.clone(),
        world.resource.metadata.name.clone().unwrap_or_default(),
    ));
    writeln!(
        out,
        "# wasmpilot simulate: operator {}, {name}, clock from {now}",
        def.name
    )?;
    let mut noted_queries = BTreeSet::new();
    let operator = offline::OfflineOperator {
        modules: &modules,
        definition: &def,
        namespaced: &namespaced,
    };
    let mut last_phase = step::current_phase(&def, &world.resource).to_string();
    // Phase changes made since the clock last moved: one reconcile of the host follows at most
    // MAX_CHAINED_PHASES of them after its first decision.
    let mut moves_in_reconcile = 0;
    let end = 'phases: {
        for step_number in 1..=args.steps {
            let time = now.to_string();
            let phase_name = step::current_phase(&def, &world.resource).to_string();
            last_phase = phase_name.clone();
            let mut report = StepReport {
                step: step_number,
                time: time.clone(),
                phase: phase_name.clone(),
                module: None,
                next_phase: None,
                changes: Vec::new(),
                outputs: Vec::new(),
                error: None,
                status: Value::Null,
                then: String::new(),
            };
            // The samples each query of the standing phase gets now (a final phase has none).
            let given: Vec<NamedObjects> = def
                .phase(&phase_name)
                .into_iter()
                .flat_map(|p| p.queries.iter())
                .map(|q| NamedObjects {
                    name: q.name.clone(),
                    objects: samples.at(&q.name, now),
                })
                .collect();
            for q in def
                .phase(&phase_name)
                .into_iter()
                .flat_map(|p| p.queries.iter())
            {
                if !samples.0.contains_key(&q.name) && noted_queries.insert(q.name.clone()) {
                    eprintln!(
                        "note: no --samples for query {} of phase {phase_name}: it gets no samples",
                        q.name
                    );
                }
            }
            let source = world.source()?;
            let resource = world.resource.clone();
            let reads = offline::OfflineReads::new(&modules, &source, step::Samples::Given(given));
            let mut cluster = SimulatedCluster::new(reads, &mut world, &def.name);
            let outcome = step::run(operator.step(&resource, &time), &mut cluster).await;
            let SimulatedCluster {
                changes,
                applied,
                status_changed,
                ..
            } = cluster;
            report.changes = changes;
            report.outputs = applied;
            let decided = match outcome {
                Ok(StepOutcome::Final) => {
                    writeln!(
                        out,
                        "# stop: {phase_name} is final; the host runs no worker until the spec changes"
                    )?;
                    break 'phases End::Final { phase: phase_name };
                }
                Ok(StepOutcome::Restarted { .. }) => {
                    moves_in_reconcile += 1;
                    report.next_phase = Some(def.initial_phase.clone());
                    report.status = world.status();
                    report.then = format!(
                        "reconcile again at once: the status ({}) changed",
                        status_changed.join(", ")
                    );
                    print_step(out, &report)?;
                    continue;
                }
                Ok(StepOutcome::Decided(decided)) => decided,
                Err(e @ ReconcileError::UnknownPhase { .. }) => {
                    return Err(anyhow::Error::from(e).context(format!("step {step_number}")));
                }
                Err(e) => {
                    report.error = Some(crate::error_report::one_line(&e));
                    report.status = world.status();
                    report.then = "stop: the host would record this in the Synced condition and retry (with backoff, or on the next change for a fatal error)".into();
                    print_step(out, &report)?;
                    bail!(
                        "step {step_number} ({phase_name}) failed: {}\nfix the worker (test it natively with cargo test), then run wasmpilot build again",
                        crate::error_report::one_line(&e)
                    );
                }
            };
            let decision = &decided.decision;
            report.module = Some(decision.module.clone());
            report.next_phase = Some(decision.next_phase.clone());
            report.status = world.status();
            let objects_changed = !report.changes.is_empty();
            let status_changed_what = format!("the status ({})", status_changed.join(", "));
            let status_changed = !status_changed.is_empty();
            let wrote = match (status_changed, objects_changed) {
                (true, true) => Some(format!("{status_changed_what} and outputs")),
                (true, false) => Some(status_changed_what),
                (false, true) => Some("outputs".to_string()),
                (false, false) => None,
            };
            last_phase = decision.next_phase.clone();
            let moved = decision.next_phase != phase_name;
            let wait = if moved {
                moves_in_reconcile += 1;
                (moves_in_reconcile > MAX_CHAINED_PHASES).then_some((
                    MIN_REQUEUE_AFTER,
                    format!("{MAX_CHAINED_PHASES} phase changes followed in one reconcile"),
                ))
            } else {
                let (delay, why) =
                    decision::wait_after_staying(decision.requeue_after_ms, def.resync);
                Some((delay, why.to_string()))
            };
            match wait {
                None => {
                    report.then = format!(
                        "reconcile again at once: the phase moved to {} (the host follows it in the same reconcile)",
                        decision.next_phase
                    );
                }
                Some(_) if wrote.is_none() && decision.requeue_after_ms.is_none() && !moved => {
                    report.then = format!(
                        "stop: converged; nothing changed, the host would decide the same every {}",
                        humantime::format_duration(def.resync)
                    );
                    print_step(out, &report)?;
                    break 'phases End::Converged { phase: last_phase };
                }
                Some((delay, why)) => {
                    moves_in_reconcile = 0;
                    now = now
                        .checked_add(delay)
                        .map_err(|e| anyhow!("the virtual clock overflowed: {e}"))?;
                    report.then = format!(
                        "reconcile again after {} ({why}), at {now}{}",
                        humantime::format_duration(delay),
                        wrote
                            .map(|w| format!(
                                "; {w} changed, which wakes nothing: the host's own writes"
                            ))
                            .unwrap_or_default()
                    );
                }
            }
            print_step(out, &report)?;
        }
        writeln!(
            out,
            "# stop: {} steps ran (raise --steps to see more); phase {last_phase}",
            args.steps
        )?;
        End::StepLimit { phase: last_phase }
    };
    if args.delete {
        simulate_deletion(&modules, &def, &mut world, now, args.steps, out).await?;
    }
    Ok(end)
}

/// The resource deleted where the phases stopped: the operator's finalizer runs as the host
/// runs it on deletion ([`crate::pipeline::finalize::decide`], inputs from the simulated
/// objects, status info merged into the resource), again after the delay it asks for, until it
/// reports done or ran `steps` times.
async fn simulate_deletion(
    modules: &ModuleCache,
    def: &OperatorDefinition,
    world: &mut World,
    mut now: jiff::Timestamp,
    steps: usize,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let Some(module_ref) = &def.finalizer else {
        writeln!(
            out,
            "# deleted: {} declares no finalizer, so the resource goes at once (its outputs are garbage-collected after it)",
            def.name
        )?;
        return Ok(());
    };
    let module = offline::finalizer_module(modules, def, module_ref).await?;
    world.resource.metadata.deletion_timestamp =
        serde_json::from_value(json!(now.to_string())).context("the deletion time")?;
    writeln!(out, "# deleted at {now}: the host runs the finalizer")?;
    for run in 1..=steps {
        let time = now.to_string();
        let source = world.source()?;
        let mut report = StepReport {
            step: run,
            time: time.clone(),
            phase: crate::definition::FINALIZER_ROLE.to_string(),
            module: Some(module.digest.clone()),
            next_phase: None,
            changes: Vec::new(),
            outputs: Vec::new(),
            error: None,
            status: Value::Null,
            then: String::new(),
        };
        let decided = match crate::pipeline::finalize::decide(
            modules.sandbox(),
            def,
            &module,
            &world.resource,
            &source,
            time.clone(),
        )
        .await
        {
            Ok(d) => d,
            Err(e) => {
                report.error = Some(crate::error_report::one_line(&e));
                report.status = world.status();
                report.then = "stop: the host would report this on the resource and retry with backoff; the deletion waits".into();
                print_step(out, &report)?;
                bail!(
                    "the finalizer failed: {}\nfix the worker (test it natively), then run wasmpilot build again",
                    crate::error_report::one_line(&e)
                );
            }
        };
        if decided.status_info.is_some() {
            let update = StatusUpdate {
                status_info: decided.status_info,
                ..Default::default()
            };
            world.write_status(&update, &time);
        }
        report.status = world.status();
        if decided.done {
            report.then =
                "stop: finalizer done; the host removes its finalizer and the resource is gone"
                    .into();
            print_step(out, &report)?;
            return Ok(());
        }
        now = now
            .checked_add(decided.requeue_after)
            .map_err(|e| anyhow!("the virtual clock overflowed: {e}"))?;
        report.then = format!(
            "run the finalizer again after {}, at {now}",
            humantime::format_duration(decided.requeue_after)
        );
        print_step(out, &report)?;
    }
    writeln!(
        out,
        "# stop: the finalizer ran {steps} times without reporting done (raise --steps to see more)"
    )?;
    Ok(())
}

fn print_step(out: &mut dyn Write, report: &StepReport) -> anyhow::Result<()> {
    writeln!(out, "---")?;
    out.write_all(serde_yaml::to_string(report)?.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Metric samples by query name, as `wasmpilot_guest::Sample` objects without a timestamp.
#[derive(Default)]
struct Samples(BTreeMap<String, Vec<Value>>);

impl Samples {
    fn read(path: &Path, def: &OperatorDefinition) -> anyhow::Result<Samples> {
        let hint = "write query name → a number, or a list of numbers or {labels, value}";
        let doc = offline::read_documents(path)?
            .into_iter()
            .next()
            .unwrap_or_else(|| json!({}));
        let map = doc
            .as_object()
            .ok_or_else(|| anyhow!("{}: not a map ({hint})", path.display()))?;
        let queries: BTreeSet<&str> = def
            .phases
            .iter()
            .flat_map(|p| p.queries.iter().map(|q| q.name.as_str()))
            .collect();
        let mut samples = BTreeMap::new();
        for (name, v) in map {
            if !queries.contains(name.as_str()) {
                bail!(
                    "{}: {name:?} is not a query of {} (queries: {})",
                    path.display(),
                    def.name,
                    queries.iter().copied().collect::<Vec<_>>().join(", ")
                );
            }
            let items = match v {
                Value::Array(items) => items.clone(),
                one => vec![one.clone()],
            };
            let list = items
                .into_iter()
                .map(|item| match item {
                    Value::Number(_) | Value::Null => Ok(json!({"labels": {}, "value": item})),
                    Value::Object(mut o) if o.contains_key("value") => {
                        o.entry("labels").or_insert_with(|| json!({}));
                        Ok(Value::Object(o))
                    }
                    other => Err(anyhow!(
                        "{}: {name}: {other} is not a sample ({hint})",
                        path.display()
                    )),
                })
                .collect::<anyhow::Result<Vec<Value>>>()?;
            samples.insert(name.clone(), list);
        }
        Ok(Samples(samples))
    }

    /// The samples of a query as the host passes them, taken at `now`.
    fn at(&self, query: &str, now: jiff::Timestamp) -> Vec<String> {
        let seconds = now.as_millisecond() as f64 / 1000.0;
        self.0
            .get(query)
            .into_iter()
            .flatten()
            .map(|s| {
                let mut s = s.clone();
                s["timestamp"] = json!(seconds);
                s.to_string()
            })
            .collect()
    }
}

/// Every `file` module must exist in the module directory before a run starts.
fn check_modules_built(
    def: &OperatorDefinition,
    module_dir: &Path,
    dir: &Path,
) -> anyhow::Result<()> {
    let missing: Vec<String> = def
        .phases
        .iter()
        .filter_map(|p| p.module.as_ref()?.file.as_ref())
        .map(|f| f.path.clone())
        .filter(|path| !module_dir.join(path).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} not found in {}: build the components first (wasmpilot build {}), or pass --module-dir",
            missing.join(", "),
            module_dir.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The resource (first document of `--resource`, given a uid and generation when it has none)
/// and the objects of `--objects` (without the resource itself).
fn load_world(args: &SimulateArgs, def: &OperatorDefinition) -> anyhow::Result<World> {
    let doc = offline::read_documents(&args.resource)?
        .into_iter()
        .find(|d| {
            d["kind"] == def.resource.kind.as_str()
                && d["apiVersion"] == def.resource.api_version.as_str()
        })
        .ok_or_else(|| {
            anyhow!(
                "{} holds no {} {}: pass a file with the resource to simulate",
                args.resource.display(),
                def.resource.api_version,
                def.resource.kind
            )
        })?;
    let mut resource: DynamicObject = serde_json::from_value(doc)
        .with_context(|| format!("{} is not a Kubernetes object", args.resource.display()))?;
    if resource.metadata.uid.is_none() {
        resource.metadata.uid = Some(SIMULATED_UID.into());
    }
    if resource.metadata.generation.is_none() {
        resource.metadata.generation = Some(1);
    }
    let resource_key = (
        def.resource.clone(),
        resource.metadata.namespace.clone(),
        resource.metadata.name.clone().unwrap_or_default(),
    );
    let mut objects = BTreeMap::new();
    if let Some(path) = &args.objects {
        for doc in offline::read_documents(path)? {
            let key = key_of(&doc).ok_or_else(|| {
                anyhow!(
                    "{}: every object needs apiVersion, kind and metadata.name",
                    path.display()
                )
            })?;
            if key != resource_key {
                objects.insert(key, doc);
            }
        }
    }
    Ok(World { resource, objects })
}
