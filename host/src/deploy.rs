//! `wasmpilot deploy <dir>`: builds an operator's phase components for wasm32-wasip2, stores them
//! as ConfigMaps pinned by sha256, applies its CRDs and its WasmOperator (Autopilot's `ap deploy`).

use crate::crd::{ConfigMapModule, ModuleRef, WasmOperator};
use crate::modules::{digest_of, DEFAULT_MODULE_NAMESPACE};
use crate::offline::{read_documents, read_operator};
use anyhow::{anyhow, bail, Context};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FIELD_MANAGER: &str = "wasmpilot-deploy";
/// The binaryData key modules are stored under (gzip: a ConfigMap holds at most 1 MiB).
pub const MODULE_KEY: &str = "component.wasm.gz";

pub struct DeployOptions {
    pub dir: PathBuf,
    /// Skip `cargo build` and use what is in the target directory.
    pub no_build: bool,
    pub module_namespace: String,
}

/// The phase-component crates of an operator directory, as cargo sees them.
pub struct ComponentCrates {
    /// Package names of the cdylib crates whose manifests are under the directory.
    pub packages: Vec<String>,
    /// Where `cargo build --release --target wasm32-wasip2` puts them:
    /// `<target dir>/wasm32-wasip2/release`.
    pub out_dir: PathBuf,
}

impl ComponentCrates {
    /// The artifact file name of a package: `my-worker` → `my_worker.wasm`.
    pub fn artifact(package: &str) -> String {
        format!("{}.wasm", package.replace('-', "_"))
    }
}

/// Finds the cdylib crates under `dir` and the target directory (`cargo metadata`).
pub fn component_crates(dir: &Path) -> anyhow::Result<ComponentCrates> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("operator directory {}", dir.display()))?;
    let meta = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&dir)
        .output()
        .context("running cargo metadata (is cargo installed?)")?;
    if !meta.status.success() {
        bail!(
            "cargo metadata failed in {}: {}\nfix the Cargo.toml it names (check with `cargo metadata --no-deps` there), or pass the operator directory that holds Cargo.toml and operator.yaml",
            dir.display(),
            String::from_utf8_lossy(&meta.stderr).trim_end()
        );
    }
    let meta: Value = serde_json::from_slice(&meta.stdout).with_context(|| {
        format!(
            "cargo metadata in {} printed no JSON: update cargo (rustup update)",
            dir.display()
        )
    })?;
    let target_dir = PathBuf::from(meta["target_directory"].as_str().ok_or_else(|| {
        anyhow!(
            "cargo metadata in {} names no target_directory: update cargo (rustup update), or set CARGO_TARGET_DIR",
            dir.display()
        )
    })?);
    let mut packages = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        let manifest = Path::new(p["manifest_path"].as_str().unwrap_or_default());
        let is_component = p["targets"].as_array().into_iter().flatten().any(|t| {
            t["crate_types"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c == "cdylib")
        });
        if is_component && manifest.starts_with(&dir) {
            packages.push(p["name"].as_str().unwrap_or_default().to_string());
        }
    }
    if packages.is_empty() {
        bail!("no cdylib crates under {}: each phase worker is a crate with crate-type = [\"cdylib\"]", dir.display());
    }
    Ok(ComponentCrates {
        packages,
        out_dir: target_dir.join("wasm32-wasip2").join("release"),
    })
}

/// The operator directory's components, built: artifact file name → bytes.
pub fn build_components(dir: &Path, build: bool) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let crates = component_crates(dir)?;
    if build {
        cargo_build(dir, &crates.packages)?;
    }
    read_components(&crates)
}

/// `cargo build --release --target wasm32-wasip2 -p …` in `dir`; cargo's own progress shows.
pub fn cargo_build(dir: &Path, packages: &[String]) -> anyhow::Result<()> {
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--release", "--target", "wasm32-wasip2"])
        .current_dir(dir);
    for p in packages {
        cmd.args(["-p", p]);
    }
    eprintln!("building {} for wasm32-wasip2 …", packages.join(", "));
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build failed (if the target is missing: rustup target add wasm32-wasip2)");
    }
    Ok(())
}

/// The built components: artifact file name → bytes.
pub fn read_components(crates: &ComponentCrates) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let mut built = BTreeMap::new();
    for p in &crates.packages {
        let file = ComponentCrates::artifact(p);
        let path = crates.out_dir.join(&file);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "reading built component {} (build it: wasmpilot build <dir>)",
                path.display()
            )
        })?;
        built.insert(file, bytes);
    }
    Ok(built)
}

pub async fn deploy(client: Client, opts: &DeployOptions) -> anyhow::Result<WasmOperator> {
    let manifest = opts.dir.join("operator.yaml");
    let mut op = read_operator(&manifest)?;
    let op_name = op
        .metadata
        .name
        .clone()
        .ok_or_else(|| anyhow!("{}: metadata.name is required", manifest.display()))?;
    let components = build_components(&opts.dir, !opts.no_build)?;

    let crd_dir = opts.dir.join("crds");
    eprintln!(
        "applying the WasmOperator CRD{} (each waits until Established) …",
        if crd_dir.is_dir() {
            format!(" and the CRDs in {}", crd_dir.display())
        } else {
            String::new()
        }
    );
    apply_crd(&client, serde_json::to_value(WasmOperator::crd())?).await?;
    if crd_dir.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(&crd_dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort();
        for f in files
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        {
            for doc in read_documents(&f)? {
                apply_document(&client, doc, None)
                    .await
                    .with_context(|| format!("applying {}", f.display()))?;
            }
        }
    }
    ensure_namespace(&client, &opts.module_namespace).await?;

    let mut roles: Vec<(String, &mut ModuleRef)> = Vec::new();
    for p in op.spec.phases.iter_mut() {
        if let Some(m) = p.module.as_mut() {
            roles.push((p.name.clone(), m));
        }
        if let Some(m) = p.shadow.as_mut() {
            roles.push((format!("{}-shadow", p.name), m));
        }
    }
    if let Some(f) = op.spec.finalizer.as_mut() {
        roles.push(("finalizer".into(), &mut f.module));
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &opts.module_namespace);
    for (role, module) in roles {
        let Some(file) = module.file.clone() else {
            continue;
        };
        let bytes = components.get(&file.path).ok_or_else(|| {
            anyhow!(
                "phase {role}: module file {} is not one of the built components ({})",
                file.path,
                components.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        let digest = digest_of(bytes);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes)?;
        let gz = gz.finish()?;
        let cm_name = format!(
            "{op_name}-{}",
            role.to_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        );
        eprintln!(
            "storing {} ({} KiB gz) in ConfigMap {}/{cm_name} …",
            file.path,
            gz.len().div_ceil(1024),
            opts.module_namespace
        );
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": cm_name,
                "namespace": opts.module_namespace,
                "labels": {"app.kubernetes.io/managed-by": "wasmpilot", crate::OPERATOR_LABEL: op_name},
                "annotations": {"wasmpilot.io/sha256": digest, "wasmpilot.io/source": file.path},
            },
            "binaryData": {MODULE_KEY: ByteString(gz.clone())},
        });
        maps.patch(
            &cm_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await
        .with_context(|| {
            format!(
                "storing module {} in ConfigMap {}/{cm_name}",
                file.path, opts.module_namespace
            )
        })?;
        println!(
            "{role:<14} {:<32} {:>8} KiB ({:>6} KiB gz)  {digest}",
            file.path,
            bytes.len() / 1024,
            gz.len() / 1024
        );
        *module = ModuleRef {
            config_map: Some(ConfigMapModule {
                name: cm_name,
                namespace: Some(opts.module_namespace.clone()),
                key: MODULE_KEY.into(),
                sha256: digest,
            }),
            ..Default::default()
        };
    }
    eprintln!("applying WasmOperator {op_name} …");
    let ops: Api<WasmOperator> = Api::all(client.clone());
    let mut body = serde_json::to_value(&op)?;
    if let Some(m) = body["metadata"].as_object_mut() {
        m.retain(|k, _| k == "name" || k == "labels" || k == "annotations");
    }
    if let Some(b) = body.as_object_mut() {
        b.remove("status");
    }
    let applied = ops
        .patch(
            &op_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .with_context(|| {
            format!(
                "applying WasmOperator {op_name}: fix the field of {} the API server names below, or check access (kubectl auth can-i patch wasmoperators.wasmpilot.io)",
                manifest.display()
            )
        })?;
    println!(
        "WasmOperator {op_name} applied (generation {})",
        applied.metadata.generation.unwrap_or(0)
    );
    Ok(applied)
}

async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Applies a CRD and waits until it is Established (its kind can be used right after).
pub async fn apply_crd(client: &Client, crd: Value) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("CRD without a name"))?
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("applying CRD {name}"))?;
    for _ in 0..100 {
        let current = api.get(&name).await?;
        let established = current
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "CRD {name} was not Established within 10s: see why with `kubectl describe crd {name}` (NamesAccepted=False names a conflicting CRD), fix it and rerun"
    )
}

/// Server-side applies any object; CRDs are waited for. `namespace` defaults namespaced objects.
pub async fn apply_document(
    client: &Client,
    doc: Value,
    namespace: Option<&str>,
) -> anyhow::Result<DynamicObject> {
    let api_version = doc["apiVersion"]
        .as_str()
        .ok_or_else(|| anyhow!("document without apiVersion"))?
        .to_string();
    let kind = doc["kind"]
        .as_str()
        .ok_or_else(|| anyhow!("document without kind"))?
        .to_string();
    if kind == "CustomResourceDefinition" {
        apply_crd(client, doc.clone()).await?;
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let (ar, caps) =
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, &kind))
            .await
            .with_context(|| {
                format!(
                    "{api_version} {kind} is not served by the API server: {}",
                    crate::kinds::HINT_NOT_SERVED
                )
            })?;
    let name = doc["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("{kind} without metadata.name"))?
        .to_string();
    let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
        let ns = doc["metadata"]["namespace"]
            .as_str()
            .or(namespace)
            .unwrap_or("default")
            .to_string();
        Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let obj = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&doc),
        )
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    tracing::debug!(kind, name = %obj.name_any(), "applied");
    Ok(obj)
}

/// The namespace module ConfigMaps go to by default.
pub fn default_module_namespace() -> String {
    DEFAULT_MODULE_NAMESPACE.to_string()
}
