//! Runs one phase of an operator from files, without a cluster: the same definition checks,
//! input gathering, sandbox and output checks as the controller, printed instead of applied.
//!
//! [`OfflineOperator::call`] runs one pipeline step as the controller does (the request
//! [`crate::pipeline::step::request`] builds, the phase's component, [`crate::pipeline::decision::decide`]);
//! `wasmpilot run-phase`, `simulate`, `plan` and `capture` all go through it.

use crate::crd::{KindRef, WasmOperator};
use crate::definition::{OperatorDefinition, PhaseDefinition};
use crate::modules::ModuleCache;
use crate::pipeline::effects::{PhaseReads, WorkerCall, WorkerReads};
use crate::pipeline::inputs::ObjectSource;
use crate::pipeline::step::{self, PhaseStep, Samples};
use crate::pipeline::ReconcileError;
use crate::sandbox::{Sandbox, SandboxLimits, SyncRequest};
use anyhow::{anyhow, bail, Context};
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What to run.
pub struct OfflineRun {
    /// A WasmOperator manifest.
    pub operator: PathBuf,
    /// Where `file` modules resolve.
    pub module_dir: PathBuf,
    /// The top-level resource (YAML or JSON).
    pub resource: PathBuf,
    /// Objects standing in for the cluster (multi-document YAML), optional.
    pub objects: Option<PathBuf>,
    /// Override the phase (default: the resource's `.status.phase`, else the initial phase;
    /// [`run_finalizer`] ignores it).
    pub phase: Option<String>,
    /// The clock handed to the worker (default: now).
    pub now: Option<String>,
    /// Directories of CustomResourceDefinitions saying which output kinds are cluster-scoped
    /// (default: `crds/` beside the operator manifest).
    pub crds: Vec<PathBuf>,
}

/// What the worker decided, after the host's output checks.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OfflineOutcome {
    pub phase: String,
    pub next_phase: String,
    pub module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_info: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    pub outputs: Vec<Value>,
}

pub use crate::pipeline::decision::Decision;

/// What the finalizer worker answered, after the host's checks.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OfflineFinalizeOutcome {
    /// Always `finalizer`: what ran.
    pub phase: String,
    pub module: String,
    /// The resource may go (the controller would remove its finalizer).
    pub done: bool,
    /// Not done: when the controller would run the finalizer again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_info: Option<Value>,
}

pub use crate::pipeline::inputs::ObjectsByKind;

/// Parses every document of a YAML (or JSON) stream into JSON values, skipping empty ones.
pub fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_documents(&text).with_context(|| format!("parsing {}", path.display()))
}

pub fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// What to do about a manifest that holds no (valid) WasmOperator.
const HINT_OPERATOR: &str =
    "compare examples/autoroute/operator.yaml, or scaffold a project with `wasmpilot init <dir>`";

/// The documents of a manifest to read as WasmOperators: each WasmOperator document, else its
/// first document (so the error names the field that makes it none).
fn operator_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let docs = read_documents(path).with_context(|| {
        format!(
            "no WasmOperator manifest at {}: pass the operator directory (holding operator.yaml) or the manifest's path",
            path.display()
        )
    })?;
    let operators: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "WasmOperator")
        .cloned()
        .collect();
    if !operators.is_empty() {
        return Ok(operators);
    }
    let first = docs.into_iter().next().ok_or_else(|| {
        anyhow!(
            "{} is empty: it must hold a WasmOperator ({HINT_OPERATOR})",
            path.display()
        )
    })?;
    Ok(vec![first])
}

fn parse_operator(doc: Value, path: &Path) -> anyhow::Result<WasmOperator> {
    serde_json::from_value(doc).with_context(|| {
        format!(
            "{} is not a WasmOperator: fix the field named below ({HINT_OPERATOR})",
            path.display()
        )
    })
}

/// Reads a manifest of one WasmOperator (with other documents beside it, say its CRDs); one
/// holding several is an error naming them, rather than the first read and the rest ignored.
pub fn read_operator(path: &Path) -> anyhow::Result<WasmOperator> {
    let mut docs = operator_documents(path)?;
    if docs.len() > 1 {
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap_or("(no name)"))
            .collect();
        anyhow::bail!(
            "{} holds {} WasmOperators ({}): pass a manifest with one",
            path.display(),
            docs.len(),
            names.join(", ")
        );
    }
    parse_operator(docs.remove(0), path)
}

/// Reads every WasmOperator of a manifest (`wasmpilot rbac` grants each of them).
pub fn read_operators(path: &Path) -> anyhow::Result<Vec<WasmOperator>> {
    operator_documents(path)?
        .into_iter()
        .map(|doc| parse_operator(doc, path))
        .collect()
}

/// Reads a WasmOperator manifest ([`read_operator`]) and validates it as the host does.
pub fn load_operator(path: &Path) -> anyhow::Result<(WasmOperator, OperatorDefinition)> {
    let op = read_operator(path)?;
    let name = op.metadata.name.clone().unwrap_or_else(|| "offline".into());
    let def = OperatorDefinition::validate(&name, &op.spec).with_context(|| {
        format!(
            "{} is not a valid WasmOperator: fix what is named below",
            path.display()
        )
    })?;
    Ok((op, def))
}

/// Whether each output kind of `def` is namespaced, known offline as the controller knows it
/// from discovery: Kubernetes' own kinds from a built-in table, custom kinds from the
/// CustomResourceDefinitions in `crd_dirs` (YAML/JSON files; missing directories are skipped).
/// A kind found in neither is left out (the output checks then take it as namespaced, which is
/// what most kinds are) and named on stderr, with how to make the check exact.
pub fn output_scopes(
    def: &OperatorDefinition,
    crd_dirs: &[PathBuf],
) -> anyhow::Result<HashMap<KindRef, bool>> {
    let mut docs = Vec::new();
    for dir in crd_dirs.iter().filter(|d| d.is_dir()) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        files.sort();
        for file in files {
            docs.extend(read_documents(&file)?);
        }
    }
    let from_crds = crate::kinds::crd_scopes(&docs);
    let mut scopes = HashMap::new();
    for kind in def.output_kinds() {
        match crate::kinds::builtin_namespaced(&kind).or_else(|| from_crds.get(&kind).copied()) {
            Some(namespaced) => {
                scopes.insert(kind, namespaced);
            }
            None => {
                let looked = crd_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                eprintln!(
                    "note: whether {kind} is namespaced is not known offline (not a Kubernetes kind, no CRD for it in {}): its outputs are checked as namespaced; put its CRD there or pass --crds DIR",
                    if looked.is_empty() { "no CRD directory" } else { &looked }
                );
            }
        }
    }
    Ok(scopes)
}

/// The CRD directory of an operator manifest: `crds/` beside it.
pub fn crds_beside(manifest: &Path) -> PathBuf {
    manifest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("crds")
}

/// An operator as the offline commands run it: its definition, its components (loaded as the
/// controller loads them, through `modules`) and whether each output kind is namespaced.
pub struct OfflineOperator<'a> {
    pub modules: &'a ModuleCache,
    pub definition: &'a OperatorDefinition,
    pub namespaced: &'a HashMap<KindRef, bool>,
}

/// One worker call of an offline step: exactly what the worker was handed, which component
/// decided, how long it took, and its checked decision or the host's error for it.
pub struct OfflineCall {
    pub request: SyncRequest,
    pub module: String,
    pub duration: Duration,
    pub decided: Result<Decision, ReconcileError>,
}

impl OfflineOperator<'_> {
    /// Runs `phase`'s worker once for `resource`, as a reconcile decides
    /// ([`step::decide`]: the phase's component with its limits, the request built from
    /// `source`, metric `samples` and the clock `now`, the decision checked). Errors before
    /// the worker runs (a final phase, a component that does not load, an invalid selector, a
    /// failed query) are returned; the decision's own error is in the call.
    pub async fn call(
        &self,
        resource: &DynamicObject,
        phase: &PhaseDefinition,
        source: &impl ObjectSource,
        samples: Samples<'_>,
        now: &str,
    ) -> anyhow::Result<OfflineCall> {
        let mut reads = OfflineReads::new(self.modules, source, samples);
        let decided = step::decide(self.step(resource, now), phase, &mut reads).await;
        match reads.call.take() {
            Some(call) => Ok(OfflineCall {
                request: call.request,
                module: call.module,
                duration: call.duration,
                decided,
            }),
            None => Err(decided
                .err()
                .map(anyhow::Error::from)
                .unwrap_or_else(|| anyhow!("phase {}: the worker was not called", phase.name))),
        }
    }

    /// [`Self::call`]'s decision; its errors are the host's own ([`ReconcileError`]), so their
    /// messages read like the resource's `Synced` condition would.
    pub async fn decide(
        &self,
        resource: &DynamicObject,
        phase: &PhaseDefinition,
        source: &impl ObjectSource,
        samples: Samples<'_>,
        now: &str,
    ) -> anyhow::Result<Decision> {
        Ok(self
            .call(resource, phase, source, samples, now)
            .await?
            .decided?)
    }

    /// The phase step of `resource` at `now` with this operator.
    pub fn step<'a>(&'a self, resource: &'a DynamicObject, now: &'a str) -> PhaseStep<'a> {
        PhaseStep {
            definition: self.definition,
            resource,
            now,
            sandbox: self.modules.sandbox(),
            namespaced: self.namespaced,
        }
    }
}

/// A worker call an offline step kept: what the worker was handed, which component, how long.
pub struct KeptCall {
    pub request: SyncRequest,
    pub module: String,
    pub duration: Duration,
}

/// A phase's worker as the offline commands read it: its component loaded through `modules`
/// (as the controller loads it), its inputs selected from `source`, its metric samples given
/// once; the call is kept.
pub struct OfflineReads<'a, S> {
    modules: &'a ModuleCache,
    source: &'a S,
    samples: Option<Samples<'a>>,
    /// The worker call, once made.
    pub call: Option<KeptCall>,
}

impl<'a, S: ObjectSource> OfflineReads<'a, S> {
    pub fn new(modules: &'a ModuleCache, source: &'a S, samples: Samples<'a>) -> Self {
        OfflineReads {
            modules,
            source,
            samples: Some(samples),
            call: None,
        }
    }
}

impl<S: ObjectSource> WorkerReads for OfflineReads<'_, S> {
    type Source = S;

    async fn reads(
        &mut self,
        phase: &PhaseDefinition,
    ) -> Result<PhaseReads<'_, S>, ReconcileError> {
        let Some(module_ref) = &phase.module else {
            return Err(ReconcileError::NoWorker {
                phase: phase.name.clone(),
            });
        };
        let module = self
            .modules
            .phase_worker(CLI_LOADS, module_ref, &phase.limits, phase.randomness)
            .await
            .map_err(|source| ReconcileError::ModuleNotLoaded {
                phase: phase.name.clone(),
                source: Box::new(source),
            })?;
        Ok(PhaseReads {
            module,
            source: self.source,
            samples: self.samples.take().unwrap_or(Samples::Given(Vec::new())),
            slot: None,
        })
    }

    fn keeps_request(&self, _phase: &str) -> bool {
        true
    }

    fn called(&mut self, call: WorkerCall<'_>) {
        if let Some(request) = call.request {
            self.call = Some(KeptCall {
                request,
                module: call.module.to_string(),
                duration: call.duration,
            });
        }
    }
}

/// Whom the CLI's tools load modules for: one user's, so the module cache's turns between
/// operators (see `ModuleCache::phase`) have no one else to serve.
const CLI_LOADS: &str = "wasmpilot CLI";

/// Loads `module_ref` as `phase`'s component, with the phase's limits and randomness, as the
/// controller does.
pub async fn phase_module(
    modules: &ModuleCache,
    phase: &PhaseDefinition,
    module_ref: &crate::crd::ModuleRef,
) -> anyhow::Result<crate::sandbox::PhaseModule> {
    modules
        .phase_worker(CLI_LOADS, module_ref, &phase.limits, phase.randomness)
        .await
        .with_context(|| format!("loading the module of phase {}", phase.name))
}

/// The finalizer's component, loaded as the controller loads it (its limits and randomness).
pub async fn finalizer_module(
    modules: &ModuleCache,
    def: &OperatorDefinition,
    module_ref: &crate::crd::ModuleRef,
) -> anyhow::Result<crate::sandbox::FinalizerModule> {
    modules
        .finalizer_worker(
            CLI_LOADS,
            module_ref,
            &def.finalizer_limits,
            def.finalizer_randomness,
        )
        .await
        .context("loading the finalizer's component")
}

/// `wasmpilot run-phase`: one decision from files.
pub async fn run_phase(run: &OfflineRun, limits: SandboxLimits) -> anyhow::Result<OfflineOutcome> {
    let prepared = Prepared::read(run, limits)?;
    let def = &prepared.definition;
    let phase_name = match &run.phase {
        Some(p) => p.as_str(),
        None => step::current_phase(def, &prepared.resource),
    };
    let phase = step::declared_phase(def, phase_name)?;
    let crd_dirs = if run.crds.is_empty() {
        vec![crds_beside(&run.operator)]
    } else {
        run.crds.clone()
    };
    let namespaced = output_scopes(def, &crd_dirs)?;
    let operator = OfflineOperator {
        modules: &prepared.modules,
        definition: def,
        namespaced: &namespaced,
    };
    let decision = operator
        .decide(
            &prepared.resource,
            phase,
            &prepared.objects,
            Samples::Given(Vec::new()),
            &prepared.now,
        )
        .await?;
    Ok(OfflineOutcome {
        phase: decision.phase,
        next_phase: decision.next_phase,
        module: decision.module,
        status_info: decision.status_info.map(Value::Object),
        requeue_after_ms: decision.requeue_after_ms,
        outputs: decision.outputs.into_iter().map(|c| c.object).collect(),
    })
}

/// Runs the operator's finalizer once for the resource, as the controller does on its deletion
/// ([`crate::pipeline::finalize::decide`]: the finalizer's declared inputs selected from the
/// objects, its component with its limits, its answer checked).
pub async fn run_finalizer(
    run: &OfflineRun,
    limits: SandboxLimits,
) -> anyhow::Result<OfflineFinalizeOutcome> {
    let prepared = Prepared::read(run, limits)?;
    let def = &prepared.definition;
    let Some(module_ref) = &def.finalizer else {
        bail!(
            "operator {} declares no finalizer (spec.finalizer): nothing runs on deletion",
            def.name
        )
    };
    let modules = &prepared.modules;
    let module = finalizer_module(modules, def, module_ref).await?;
    let decided = crate::pipeline::finalize::decide(
        modules.sandbox(),
        def,
        &module,
        &prepared.resource,
        &prepared.objects,
        prepared.now.clone(),
    )
    .await
    .context("the finalizer")?;
    Ok(OfflineFinalizeOutcome {
        phase: crate::definition::FINALIZER_ROLE.to_string(),
        module: module.digest.clone(),
        done: decided.done,
        requeue_after_ms: (!decided.done)
            .then(|| u64::try_from(decided.requeue_after.as_millis()).unwrap_or(u64::MAX)),
        status_info: decided.status_info.map(Value::Object),
    })
}

/// What one offline run reads before any worker runs.
struct Prepared {
    definition: OperatorDefinition,
    resource: DynamicObject,
    objects: ObjectsByKind,
    modules: ModuleCache,
    now: String,
}

impl Prepared {
    fn read(run: &OfflineRun, limits: SandboxLimits) -> anyhow::Result<Self> {
        let (_, definition) = load_operator(&run.operator)?;
        let resource_doc = read_documents(&run.resource)?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("{} is empty", run.resource.display()))?;
        let resource: DynamicObject = serde_json::from_value(resource_doc)
            .context("the resource is not a Kubernetes object")?;
        let objects = match &run.objects {
            Some(path) => ObjectsByKind::from_values(read_documents(path)?)
                .with_context(|| format!("in {}", path.display()))?,
            None => ObjectsByKind::default(),
        };
        // The compile cache `simulate` and `plan` use: an 18 MB Python component compiles in
        // seconds, once.
        let modules = ModuleCache::new(Sandbox::new(limits)?, None, Some(run.module_dir.clone()))
            .with_compile_cache(crate::modules::compile_cache_dir(None, false))
            .with_progress();
        let now = run
            .now
            .clone()
            .unwrap_or_else(crate::pipeline::step::now_rfc3339);
        Ok(Prepared {
            definition,
            resource,
            objects,
            modules,
            now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_errors_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.yaml");
        std::fs::write(&empty, "# nothing yet\n").unwrap();
        let e = format!("{:#}", read_operator(&empty).unwrap_err());
        assert!(
            e.contains("empty.yaml is empty: it must hold a WasmOperator"),
            "{e}"
        );
        assert!(e.contains("wasmpilot init <dir>"), "{e}");

        let other = dir.path().join("route.yaml");
        std::fs::write(
            &other,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        )
        .unwrap();
        let e = format!("{:#}", read_operator(&other).unwrap_err());
        assert!(e.contains("route.yaml is not a WasmOperator: fix the field named below (compare examples/autoroute/operator.yaml"), "{e}");

        let two = dir.path().join("two.yaml");
        let operator = |name: &str| {
            format!("apiVersion: wasmpilot.io/v1alpha1\nkind: WasmOperator\nmetadata: {{name: {name}}}\nspec:\n  resource: {{apiVersion: x.io/v1, kind: X}}\n  phases: [{{name: A, initial: true, module: {{file: {{path: a.wasm}}}}}}]\n")
        };
        std::fs::write(
            &two,
            format!("{}---\n{}", operator("kite"), operator("lark")),
        )
        .unwrap();
        let e = format!("{:#}", read_operator(&two).unwrap_err());
        assert!(
            e.contains("two.yaml holds 2 WasmOperators (kite, lark): pass a manifest with one"),
            "{e}"
        );
        let names: Vec<_> = read_operators(&two)
            .unwrap()
            .into_iter()
            .filter_map(|op| op.metadata.name)
            .collect();
        assert_eq!(names, ["kite", "lark"]);

        let missing = dir.path().join("nope/operator.yaml");
        let e = format!("{:#}", load_operator(&missing).unwrap_err());
        assert!(
            e.contains(
                "pass the operator directory (holding operator.yaml) or the manifest's path"
            ),
            "{e}"
        );
    }
}
