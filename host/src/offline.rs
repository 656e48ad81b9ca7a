//! Runs one phase of an operator from files, without a cluster: the same definition checks,
//! input gathering, sandbox and output checks as the controller, printed instead of applied.

use crate::crd::{KindRef, WasmOperator};
use crate::definition::OperatorDefinition;
use crate::inputs::{self, ObjectSource};
use crate::modules::ModuleCache;
use crate::outputs::{self, Owner};
use crate::sandbox::{Sandbox, SandboxLimits, SyncRequest};
use anyhow::{anyhow, bail, Context};
use kube::api::DynamicObject;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Override the phase (default: the resource's `.status.phase`, else the initial phase).
    pub phase: Option<String>,
    /// The clock handed to the worker (default: now).
    pub now: Option<String>,
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

struct FileObjects(HashMap<KindRef, Vec<Arc<DynamicObject>>>);

impl ObjectSource for FileObjects {
    fn objects(&self, kind: &KindRef) -> Vec<Arc<DynamicObject>> {
        self.0.get(kind).cloned().unwrap_or_default()
    }
}

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

use serde::Deserialize;

pub async fn run_phase(run: &OfflineRun, limits: SandboxLimits) -> anyhow::Result<OfflineOutcome> {
    let op_doc = read_documents(&run.operator)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is empty", run.operator.display()))?;
    let op: WasmOperator = serde_json::from_value(op_doc)
        .with_context(|| format!("{} is not a WasmOperator", run.operator.display()))?;
    let name = op.metadata.name.clone().unwrap_or_else(|| "offline".into());
    let def = OperatorDefinition::validate(&name, &op.spec)?;

    let resource_doc = read_documents(&run.resource)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is empty", run.resource.display()))?;
    let resource: DynamicObject =
        serde_json::from_value(resource_doc).context("the resource is not a Kubernetes object")?;
    let phase_name = run
        .phase
        .clone()
        .or_else(|| {
            resource.data["status"]["phase"]
                .as_str()
                .filter(|p| !p.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| def.initial_phase.clone());
    let phase = def
        .phase(&phase_name)
        .ok_or_else(|| anyhow!("phase {phase_name:?} is not declared by {name}"))?;
    let Some(module_ref) = &phase.module else {
        bail!("phase {phase_name} is final: it runs no worker")
    };

    let mut objects: HashMap<KindRef, Vec<Arc<DynamicObject>>> = HashMap::new();
    if let Some(path) = &run.objects {
        for doc in read_documents(path)? {
            let o: DynamicObject = serde_json::from_value(doc)
                .context("an object in --objects is not a Kubernetes object")?;
            let types = o
                .types
                .clone()
                .ok_or_else(|| anyhow!("object {:?} has no apiVersion/kind", o.metadata.name))?;
            objects
                .entry(KindRef::new(types.api_version, types.kind))
                .or_default()
                .push(Arc::new(o));
        }
    }
    let sandbox = Sandbox::new(limits)?;
    let modules = ModuleCache::new(sandbox.clone(), None, Some(run.module_dir.clone()));
    let module = modules
        .phase(module_ref)
        .await?
        .with_limits(sandbox.call_limits(&phase.limits));
    let request = SyncRequest {
        operator: name.clone(),
        phase: phase_name.clone(),
        resource: inputs::to_worker_json(&resource, &def.resource),
        inputs: inputs::gather(
            phase,
            resource.metadata.namespace.as_deref(),
            &FileObjects(objects),
        ),
        now: run
            .now
            .clone()
            .unwrap_or_else(crate::reconcile::now_rfc3339),
    };
    let result = sandbox
        .run_sync(&module, request)
        .await
        .with_context(|| format!("worker for phase {phase_name}"))?;
    if def.phase(&result.next_phase).is_none() {
        bail!(
            "worker for phase {phase_name} returned undeclared next phase {:?}",
            result.next_phase
        );
    }
    if !phase.allows(&result.next_phase) {
        bail!(
            "worker for phase {phase_name} returned next phase {:?}, but {phase_name} may only move to {}",
            result.next_phase,
            phase.next.join(", ")
        );
    }
    let uid = resource.metadata.uid.clone().unwrap_or_default();
    let rname = resource.metadata.name.clone().unwrap_or_default();
    let owner = Owner {
        api_version: &def.resource.api_version,
        kind: &def.resource.kind,
        name: &rname,
        uid: &uid,
        namespace: resource.metadata.namespace.as_deref(),
    };
    let checked = outputs::check(phase, &owner, &HashMap::new(), &result.outputs)?;
    let status_info = match result.status_info.as_deref() {
        Some(s) => Some(serde_json::from_str(s).context("status info is not JSON")?),
        None => None,
    };
    Ok(OfflineOutcome {
        phase: phase_name,
        next_phase: result.next_phase,
        module: module.digest,
        status_info,
        requeue_after_ms: result.requeue_after_ms,
        outputs: checked.into_iter().map(|c| c.object).collect(),
    })
}
