//! `wasmpilot import metacontroller`: a Metacontroller CompositeController and its hook file
//! become a wasmpilot operator directory — operator.yaml, the worker(s) wrapping the unchanged
//! hook with the SDK's Metacontroller adapter, and what Metacontroller did that we do otherwise.

use crate::authoring::workspace::relative_path;
use crate::crd::{InputSpec, KindRef, OutputSpec, UpdateStrategy, WasmOperator};
use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Arguments of `wasmpilot import metacontroller`.
#[derive(clap::Args, Debug)]
pub struct ImportMetacontrollerArgs {
    /// The manifest holding the CompositeController (other documents in it are read for
    /// CustomResourceDefinitions, to know the kinds of its resources).
    pub controller: PathBuf,
    /// The hook file (`.py` or `.js`) defining the sync (and finalize) hook functions.
    #[arg(long)]
    pub hook: PathBuf,
    /// The operator directory to write (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// The sync hook's function name in the hook file.
    #[arg(long, default_value = "sync")]
    pub sync_function: String,
    /// The finalize hook's function name (used when the controller has a finalize hook).
    #[arg(long, default_value = "finalize")]
    pub finalize_function: String,
    /// More CustomResourceDefinition files (the parent's, a child's), when the manifest does not
    /// hold them.
    #[arg(long)]
    pub crd: Vec<PathBuf>,
    /// The guest SDK directory (`guest-sdk-python` or `guest-sdk-js` of a wasmpilot checkout);
    /// default: the enclosing checkout's.
    #[arg(long)]
    pub sdk_path: Option<PathBuf>,
}

/// What the import could not carry over as it was, said to the user.
pub struct Imported {
    pub operator: WasmOperator,
    pub notes: Vec<String>,
    pub files: Vec<PathBuf>,
}

/// The built-in kinds Metacontroller controllers commonly name by plural.
const BUILT_IN: &[(&str, &str, &str)] = &[
    ("v1", "configmaps", "ConfigMap"),
    ("v1", "secrets", "Secret"),
    ("v1", "services", "Service"),
    ("v1", "pods", "Pod"),
    ("v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    ("v1", "serviceaccounts", "ServiceAccount"),
    ("v1", "namespaces", "Namespace"),
    ("apps/v1", "deployments", "Deployment"),
    ("apps/v1", "replicasets", "ReplicaSet"),
    ("apps/v1", "statefulsets", "StatefulSet"),
    ("apps/v1", "daemonsets", "DaemonSet"),
    ("batch/v1", "jobs", "Job"),
    ("batch/v1", "cronjobs", "CronJob"),
    ("rbac.authorization.k8s.io/v1", "roles", "Role"),
    (
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "RoleBinding",
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "ClusterRole",
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
    ),
    ("networking.k8s.io/v1", "ingresses", "Ingress"),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"),
];

/// The hook's language, by its file name.
#[derive(Clone, Copy, Debug, PartialEq)]
enum HookLanguage {
    Python,
    JavaScript,
}

/// Reads the controller and writes the operator directory; prints what it did and the notes.
pub fn import(args: &ImportMetacontrollerArgs) -> anyhow::Result<Imported> {
    let docs = crate::offline::read_documents(&args.controller)?;
    let mut crd_docs = docs.clone();
    for path in &args.crd {
        crd_docs.extend(crate::offline::read_documents(path)?);
    }
    let kinds = Kinds::from_crds(&crd_docs);
    let controller = docs
        .iter()
        .find(|d| d["kind"] == "CompositeController")
        .ok_or_else(|| {
            anyhow!(
                "{}: no CompositeController in it (DecoratorControllers are not imported yet)",
                args.controller.display()
            )
        })?;
    let language = match args.hook.extension().and_then(|e| e.to_str()) {
        Some("py") => HookLanguage::Python,
        Some("js" | "mjs") => HookLanguage::JavaScript,
        _ => bail!(
            "--hook {}: a .py or .js file defining the hook functions",
            args.hook.display()
        ),
    };
    let hook_text = std::fs::read_to_string(&args.hook)
        .with_context(|| format!("reading the hook {}", args.hook.display()))?;
    let (operator, notes) = operator_of(controller, &kinds, language)?;
    let out = &args.out;
    if out.exists() && std::fs::read_dir(out)?.next().is_some() {
        bail!(
            "--out {}: exists and is not empty (choose a new directory)",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let lang = match language {
        HookLanguage::Python => crate::authoring::scaffold::Lang::Python,
        HookLanguage::JavaScript => crate::authoring::scaffold::Lang::Javascript,
    };
    let sdk = crate::authoring::init::guest_sdk_dir(out, lang, args.sdk_path.as_deref())?;
    let finalize = operator.spec.finalizer.is_some();
    let version = hook_version(controller);
    let files = worker_files(
        language,
        &hook_text,
        &args.sync_function,
        finalize.then_some(args.finalize_function.as_str()),
        &version,
        &relative_path(out, &sdk).display().to_string(),
    );
    let mut written = Vec::new();
    let manifest = format!(
        "# Imported from {} by `wasmpilot import metacontroller`: the hook is run unchanged by the\n# SDK's Metacontroller adapter (workers/). Review the notes it printed.\n{}",
        args.controller.display(),
        serde_yaml::to_string(&operator)?
    );
    for (rel, text) in std::iter::once(("operator.yaml".to_string(), manifest)).chain(files) {
        let path = out.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(Imported {
        operator,
        notes,
        files: written,
    })
}

/// The kinds the import knows by plural: the CRDs given, and common built-in ones.
struct Kinds(BTreeMap<(String, String), String>);

impl Kinds {
    fn from_crds(docs: &[Value]) -> Self {
        let mut known: BTreeMap<(String, String), String> = BUILT_IN
            .iter()
            .map(|(v, plural, kind)| ((v.to_string(), plural.to_string()), kind.to_string()))
            .collect();
        for crd in docs
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            let spec = &crd["spec"];
            let (Some(group), Some(plural), Some(kind)) = (
                spec["group"].as_str(),
                spec["names"]["plural"].as_str(),
                spec["names"]["kind"].as_str(),
            ) else {
                continue;
            };
            for version in spec["versions"].as_array().into_iter().flatten() {
                if let Some(v) = version["name"].as_str() {
                    known.insert((format!("{group}/{v}"), plural.to_string()), kind.into());
                }
            }
        }
        Kinds(known)
    }

    /// The kind of `resource` (a plural) in `api_version`; `field` names it in the error.
    fn kind(&self, api_version: &str, resource: &str, field: &str) -> anyhow::Result<KindRef> {
        let kind = self
            .0
            .get(&(api_version.to_string(), resource.to_string()))
            .ok_or_else(|| {
                anyhow!("{field}: {api_version} {resource}: unknown kind — pass its CustomResourceDefinition with --crd")
            })?;
        Ok(KindRef::new(api_version, kind))
    }
}

/// The hook version the controller's sync hook asks for (`v1` unless it says `v2`).
fn hook_version(controller: &Value) -> String {
    controller["spec"]["hooks"]["sync"]["version"]
        .as_str()
        .unwrap_or("v1")
        .to_string()
}

/// The WasmOperator for `controller`, and notes on what is done otherwise.
fn operator_of(
    controller: &Value,
    kinds: &Kinds,
    language: HookLanguage,
) -> anyhow::Result<(WasmOperator, Vec<String>)> {
    let spec = &controller["spec"];
    let name = controller["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("the CompositeController has no metadata.name"))?;
    let parent = &spec["parentResource"];
    let resource = kinds.kind(
        parent["apiVersion"].as_str().unwrap_or_default(),
        parent["resource"].as_str().unwrap_or_default(),
        "spec.parentResource",
    )?;
    let mut notes = Vec::new();
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for (i, child) in spec["childResources"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let kind = kinds.kind(
            child["apiVersion"].as_str().unwrap_or_default(),
            child["resource"].as_str().unwrap_or_default(),
            &format!("spec.childResources[{i}]"),
        )?;
        let method = child["updateStrategy"]["method"]
            .as_str()
            .unwrap_or("OnDelete");
        let update_strategy = match method {
            "OnDelete" => UpdateStrategy::OnDelete,
            "Recreate" => UpdateStrategy::Recreate,
            "InPlace" => UpdateStrategy::InPlace,
            rolling => {
                notes.push(format!(
                    "{} {}: updateStrategy {rolling} is not available yet: children of it are changed in place (InPlace)",
                    kind.api_version, kind.kind
                ));
                UpdateStrategy::InPlace
            }
        };
        inputs.push(InputSpec {
            name: format!("children/{}.{}", kind.kind, kind.api_version),
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
            owned: true,
            ..Default::default()
        });
        outputs.push(OutputSpec {
            kind,
            update_strategy: Some(update_strategy),
        });
    }
    let hooks = &spec["hooks"];
    if !hooks["customize"].is_null() {
        notes.push("the customize hook is not run: declare the related objects it chose as inputs named related/<Kind>.<apiVersion>, narrowed by the parent's fields (allNamespaces, namespaceFrom, nameFrom, matchLabelsFrom, selectorFrom; docs/concepts.md)".into());
    }
    if spec["generateSelector"] == true {
        notes.push("generateSelector: not needed — children are the parent's by its controller reference, not by labels".into());
    }
    let module = |file: &str| json!({"file": {"path": file}});
    let mut phase = json!({
        "name": "Sync",
        "description": "The Metacontroller sync hook, run unchanged: its children are the outputs, its status the status.",
        "initial": true,
        "ready": true,
        "module": module("sync.wasm"),
        "inputs": inputs,
        "outputs": outputs,
    });
    if inputs_are_empty(&phase) {
        phase.as_object_mut().map(|p| p.remove("inputs"));
    }
    let mut operator = json!({
        "apiVersion": "wasmpilot.io/v1alpha1",
        "kind": "WasmOperator",
        "metadata": {"name": name},
        "spec": {"resource": resource, "phases": [phase]},
    });
    if let Some(selector) = parent.get("labelSelector").filter(|s| !s.is_null()) {
        if hooks["finalize"].is_null() {
            operator["spec"]["resourceSelector"] = selector.clone();
        } else {
            notes.push("parentResource.labelSelector is not carried over: with a finalizer, a parent relabelled out of it would keep a finalizer no one removes; every parent of the kind is the operator's".into());
        }
    }
    if let Some(seconds) = spec["resyncPeriodSeconds"].as_u64() {
        operator["spec"]["resyncInterval"] = json!(format!("{seconds}s"));
    }
    if !hooks["finalize"].is_null() {
        operator["spec"]["finalizer"] = json!({
            "module": module("finalize.wasm"),
            "inputs": operator["spec"]["phases"][0]["inputs"].clone(),
        });
        if operator["spec"]["finalizer"]["inputs"].is_null() {
            operator["spec"]["finalizer"]
                .as_object_mut()
                .map(|f| f.remove("inputs"));
        }
    }
    let mut operator: WasmOperator = serde_json::from_value(operator)
        .context("the imported definition is not a WasmOperator (a bug: please report it)")?;
    let asked: Vec<KindRef> = crate::definition::sensitive_uses(&operator.spec)
        .into_iter()
        .map(|(kind, _, _)| kind)
        .collect();
    for kind in asked {
        if !operator.spec.allow_sensitive_kinds.contains(&kind) {
            notes.push(format!(
                "{} {} is a sensitive kind: asked for in spec.allowSensitiveKinds; an admin consents with `wasmpilot grant {name}`",
                kind.api_version, kind.kind
            ));
            operator.spec.allow_sensitive_kinds.push(kind);
        }
    }
    crate::definition::OperatorDefinition::validate(name, &operator.spec)
        .map_err(|e| anyhow!("the imported definition is refused: {e}"))?;
    if language == HookLanguage::JavaScript {
        notes.push("npm install in the operator directory before `wasmpilot build`".into());
    }
    Ok((operator, notes))
}

fn inputs_are_empty(phase: &Value) -> bool {
    phase["inputs"].as_array().is_none_or(Vec::is_empty)
}

/// The files besides operator.yaml: the hook copied unchanged, a worker per hook wrapping it,
/// and the project settings pointing at the SDK (`sdk`, relative).
fn worker_files(
    language: HookLanguage,
    hook: &str,
    sync: &str,
    finalize: Option<&str>,
    version: &str,
    sdk: &str,
) -> Vec<(String, String)> {
    let mut files = Vec::new();
    match language {
        HookLanguage::Python => {
            files.push(("shared/hook.py".into(), hook.to_string()));
            let worker = |export: &str, exporter: &str, adapter: &str, function: &str| {
                format!(
                    "\"\"\"The Metacontroller hook `{function}` (shared/hook.py), run unchanged.\"\"\"\n\nimport wasmpilot_guest as guest\nimport wasmpilot_guest.metacontroller as metacontroller\nfrom hook import {function}\n\n{export} = guest.{exporter}(metacontroller.{adapter}({function}, version=\"{version}\"))\n"
                )
            };
            files.push((
                "workers/sync/app.py".into(),
                worker("PhaseWorker", "export_phase", "sync_worker", sync),
            ));
            if let Some(f) = finalize {
                files.push((
                    "workers/finalize/app.py".into(),
                    worker("FinalizerWorker", "export_finalizer", "finalize_worker", f),
                ));
            }
            files.push((
                "pyproject.toml".into(),
                format!("# Native tests of the hook (pytest); `wasmpilot build .` builds the workers.\n[tool.pytest.ini_options]\npythonpath = [\"{sdk}/src\", \"shared\"]\ntestpaths = [\"tests\"]\n"),
            ));
        }
        HookLanguage::JavaScript => {
            files.push(("shared/hook.js".into(), hook.to_string()));
            let worker = |export: &str, exporter: &str, adapter: &str, function: &str| {
                format!(
                    "// The Metacontroller hook `{function}` (shared/hook.js), run unchanged.\nimport {{ {exporter} }} from '@wasmpilot/guest';\nimport {{ {adapter} }} from '@wasmpilot/guest/metacontroller';\nimport {{ {function} }} from '../../shared/hook.js';\n\nexport const {export} = {exporter}({adapter}({function}, '{version}'));\n"
                )
            };
            files.push((
                "workers/sync/worker.js".into(),
                worker("phaseWorker", "exportPhase", "syncWorker", sync),
            ));
            if let Some(f) = finalize {
                files.push((
                    "workers/finalize/worker.js".into(),
                    worker("finalizerWorker", "exportFinalizer", "finalizeWorker", f),
                ));
            }
            files.push((
                "package.json".into(),
                format!("{{\n  \"name\": \"imported-operator\",\n  \"version\": \"0.1.0\",\n  \"private\": true,\n  \"type\": \"module\",\n  \"dependencies\": {{\n    \"@wasmpilot/guest\": \"file:{sdk}\"\n  }}\n}}\n"),
            ));
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLLER: &str = r#"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: settings-copier}
spec:
  generateSelector: true
  parentResource:
    apiVersion: examples.io/v1
    resource: copiers
    labelSelector: {matchLabels: {version: v1}}
  childResources:
  - {apiVersion: v1, resource: configmaps, updateStrategy: {method: Recreate}}
  - {apiVersion: v1, resource: secrets}
  resyncPeriodSeconds: 30
  hooks:
    sync: {webhook: {url: http://copier.metacontroller/sync}}
    finalize: {webhook: {url: http://copier.metacontroller/finalize}}
    customize: {webhook: {url: http://copier.metacontroller/customize}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: copiers.examples.io}
spec:
  group: examples.io
  names: {kind: Copier, plural: copiers}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true}]
"#;

    fn documents() -> Vec<Value> {
        serde_yaml::Deserializer::from_str(CONTROLLER)
            .map(|d| serde_json::to_value(serde_yaml::Value::deserialize(d).unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn a_composite_controller_becomes_one_phase_with_its_children_and_notes() {
        let docs = documents();
        let kinds = Kinds::from_crds(&docs);
        let (op, notes) = operator_of(&docs[0], &kinds, HookLanguage::Python).unwrap();
        let spec = &op.spec;
        assert_eq!(spec.resource, KindRef::new("examples.io/v1", "Copier"));
        assert_eq!(spec.resync_interval.as_deref(), Some("30s"));
        assert!(spec.resource_selector.is_none(), "not with a finalizer");
        let phase = &spec.phases[0];
        assert_eq!(
            phase
                .inputs
                .iter()
                .map(|i| (i.name.as_str(), i.owned))
                .collect::<Vec<_>>(),
            [
                ("children/ConfigMap.v1", true),
                ("children/Secret.v1", true)
            ]
        );
        assert_eq!(
            phase
                .outputs
                .iter()
                .map(|o| o.update_strategy)
                .collect::<Vec<_>>(),
            [
                Some(UpdateStrategy::Recreate),
                Some(UpdateStrategy::OnDelete)
            ],
            "Metacontroller's default is OnDelete"
        );
        assert!(spec.finalizer.is_some());
        assert_eq!(spec.allow_sensitive_kinds, [KindRef::new("v1", "Secret")]);
        for words in [
            "customize hook is not run",
            "generateSelector",
            "Secret is a sensitive kind",
            "labelSelector is not carried over",
        ] {
            assert!(
                notes.iter().any(|n| n.contains(words)),
                "no note on {words}: {notes:?}"
            );
        }
    }

    #[test]
    fn without_a_finalizer_the_parents_selector_is_the_resource_selector() {
        let mut docs = documents();
        docs[0]["spec"]["hooks"]
            .as_object_mut()
            .map(|h| h.remove("finalize"));
        let kinds = Kinds::from_crds(&docs);
        let (op, _) = operator_of(&docs[0], &kinds, HookLanguage::JavaScript).unwrap();
        let selector = op
            .spec
            .resource_selector
            .expect("the parent's labelSelector");
        assert_eq!(selector.match_labels.unwrap_or_default()["version"], "v1");
        assert!(op.spec.finalizer.is_none());
    }

    #[test]
    fn an_unknown_plural_names_the_field_and_the_way_out() {
        let controller = serde_json::json!({"kind": "CompositeController", "metadata": {"name": "x"},
            "spec": {"parentResource": {"apiVersion": "examples.io/v1", "resource": "widgets"}}});
        let e = operator_of(&controller, &Kinds::from_crds(&[]), HookLanguage::Python).unwrap_err();
        assert!(e.to_string().contains("spec.parentResource: examples.io/v1 widgets: unknown kind — pass its CustomResourceDefinition with --crd"), "{e}");
    }

    use serde::Deserialize;
}
