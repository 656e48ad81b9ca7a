//! `wasmpilot deploy <dir>`: builds an operator's phase components for wasm32-wasip2, stores them
//! as ConfigMaps pinned by sha256, applies its CRDs and its WasmOperator (Autopilot's `ap deploy`).

use crate::crd::{ConfigMapModule, ModuleRef, WasmOperator};
use crate::modules::{digest_of, DEFAULT_MODULE_NAMESPACE};
use crate::offline::{load_operator, read_documents};
use anyhow::{anyhow, bail, Context};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, CustomResourceExt, Resource, ResourceExt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

const FIELD_MANAGER: &str = "wasmpilot-deploy";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The annotation naming the digest of the component a module ConfigMap holds.
const DIGEST_ANNOTATION: &str = "wasmpilot.io/sha256";
/// The annotation naming the file the component a module ConfigMap holds was built as.
const SOURCE_ANNOTATION: &str = "wasmpilot.io/source";
/// The binaryData key modules are stored under (gzip: a ConfigMap holds at most 1 MiB).
pub const MODULE_KEY: &str = "component.wasm.gz";
/// The most of a compressed component one ConfigMap holds (under the 1 MiB limit, with room
/// for the metadata).
const CONFIGMAP_PIECE: usize = 900 << 10;

pub struct DeployOptions {
    pub dir: PathBuf,
    /// Skip `cargo build` and use what is in the target directory.
    pub no_build: bool,
    pub module_namespace: String,
    /// The operator's account and its grants, applied before the WasmOperator (as
    /// `wasmpilot rbac` prints them); `None`: left to an admin.
    pub grants: Option<crate::rbac::GrantTarget>,
    /// Where the host may fetch for the operator (its `--allow-fetch-from`): the definition's
    /// URLs are checked against it.
    pub egress: crate::egress::EgressPolicy,
}

/// An operator ready to deploy, checked without the cluster: its definition valid as the host
/// will find it, its components built and every `file` module among them.
pub struct Prepared {
    op: WasmOperator,
    op_name: String,
    /// The built components by file name.
    components: BTreeMap<String, Vec<u8>>,
}

/// Reads and validates `operator.yaml` as the host will, builds the components (unless
/// `no_build`) and checks each `file` module is one of them: a malformed definition or a missing
/// component is refused here, before the cluster is contacted or anything stored or applied.
pub fn prepare(opts: &DeployOptions) -> anyhow::Result<Prepared> {
    let manifest = opts.dir.join("operator.yaml");
    let (mut op, _) = load_operator(&manifest)?;
    let op_name = op
        .metadata
        .name
        .clone()
        .ok_or_else(|| anyhow!("{}: metadata.name is required", manifest.display()))?;
    crate::definition::OperatorDefinition::validate_for_host(&op_name, &op.spec, &opts.egress)
        .with_context(|| {
            format!(
                "{}: WasmOperator {op_name}: the host would refuse it",
                manifest.display()
            )
        })?;
    let components = crate::component_build::build(&opts.dir, !opts.no_build)?.components;
    for (role, module) in module_roles(&mut op) {
        if let Some(file) = &module.file {
            built(&components, &role, &file.path)?;
        }
    }
    Ok(Prepared {
        op,
        op_name,
        components,
    })
}

/// Each module of `op` with the role it is stored and reported under: a phase's name, the
/// phase's name + `-shadow`, `finalizer`.
fn module_roles(op: &mut WasmOperator) -> Vec<(String, &mut ModuleRef)> {
    let mut roles = Vec::new();
    for p in op.spec.phases.iter_mut() {
        if let Some(m) = p.module.as_mut() {
            roles.push((p.name.clone(), m));
        }
        if let Some(m) = p.shadow.as_mut() {
            roles.push((format!("{}-shadow", p.name), m));
        }
    }
    if let Some(f) = op.spec.finalizer.as_mut() {
        roles.push((crate::definition::FINALIZER_ROLE.to_string(), &mut f.module));
    }
    roles
}

/// The built component a module of `role` names by file `path`.
fn built<'a>(
    components: &'a BTreeMap<String, Vec<u8>>,
    role: &str,
    path: &str,
) -> anyhow::Result<&'a Vec<u8>> {
    components.get(path).ok_or_else(|| {
        anyhow!(
            "phase {role}: module file {path} is not one of the built components ({})",
            components.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}

/// Applies a [`prepare`]d operator: the WasmOperator CRD and the operator's CRDs, its
/// components as ConfigMaps pinned by sha256 (owned by the WasmOperator), the WasmOperator,
/// then deletes the module ConfigMaps it no longer references.
pub async fn deploy(
    client: Client,
    opts: &DeployOptions,
    prepared: Prepared,
) -> anyhow::Result<WasmOperator> {
    let Prepared {
        mut op,
        op_name,
        components,
    } = prepared;
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

    let roles = module_roles(&mut op);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &opts.module_namespace);
    let ops: Api<WasmOperator> = Api::all(client.clone());
    // The WasmOperator owns its module ConfigMaps. When it exists, they name it as owner as they
    // are stored; otherwise they are stored ownerless (dropping a reference to a deleted one, which
    // the garbage collector would act on) and adopted once it is applied.
    let owner = ops
        .get_opt(&op_name)
        .await
        .with_context(|| format!("reading WasmOperator {op_name}"))?
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .and_then(|o| o.owner_ref(&()));
    let mut stored: BTreeMap<String, Value> = BTreeMap::new();
    for (role, module) in roles {
        let Some(file) = module.file.clone() else {
            continue;
        };
        let bytes = built(&components, &role, &file.path)?;
        let digest = digest_of(bytes);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes)?;
        let gz = gz.finish()?;
        let cm_name = format!(
            "{op_name}-{}",
            role.to_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        );
        // A ConfigMap holds at most 1 MiB: larger components (Python, JavaScript) are split
        // across ConfigMaps `<name>-0`, `<name>-1`, … joined again by the host.
        let pieces: Vec<&[u8]> = gz.chunks(CONFIGMAP_PIECE).collect();
        let parts = (pieces.len() > 1).then_some(pieces.len() as u32);
        eprintln!(
            "storing {} ({} KiB gz) in {} …",
            file.path,
            gz.len().div_ceil(1024),
            match parts {
                Some(n) => format!(
                    "{n} ConfigMaps {}/{cm_name}-0…{}",
                    opts.module_namespace,
                    n - 1
                ),
                None => format!("ConfigMap {}/{cm_name}", opts.module_namespace),
            }
        );
        for (i, piece) in pieces.iter().enumerate() {
            let name = match parts {
                Some(_) => format!("{cm_name}-{i}"),
                None => cm_name.clone(),
            };
            let cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": opts.module_namespace,
                    "labels": module_labels(&op_name),
                    "annotations": {DIGEST_ANNOTATION: digest, SOURCE_ANNOTATION: file.path},
                },
                "binaryData": {MODULE_KEY: ByteString(piece.to_vec())},
            });
            store_config_map(&maps, &cm, owner.as_ref()).await?;
            stored.insert(name, cm);
        }
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
                parts,
            }),
            ..Default::default()
        };
    }
    if let Some(target) = &opts.grants {
        apply_grants(&client, &op_name, &op.spec, target).await?;
    }
    eprintln!("applying WasmOperator {op_name} …");
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
                opts.dir.join("operator.yaml").display()
            )
        })?;
    println!(
        "WasmOperator {op_name} applied (generation {})",
        applied.metadata.generation.unwrap_or(0)
    );
    let Some(applied_owner) = applied.owner_ref(&()) else {
        bail!("the API server returned WasmOperator {op_name} without a uid");
    };
    if opts.grants.is_some() {
        // The admin who grants the operator its RBAC consents to it as deployed (a host with
        // --require-operator-grants runs it only then); a cluster without the grant CRD needs none.
        match crate::operator_grant::apply(&client, &applied, &Default::default()).await {
            Ok(grant) => eprintln!(
                "granted WasmOperator {op_name} (uid {}) as deployed: WasmOperatorGrant {op_name}",
                grant.spec.operator_uid
            ),
            Err(e) if grant_crd_missing(&e) => eprintln!(
                "no WasmOperatorGrant CRD on this cluster: {op_name} is not granted (a host with --require-operator-grants needs it: deploy/crds/wasmoperatorgrant.yaml, then `wasmpilot grant {op_name}`)"
            ),
            Err(e) => return Err(e),
        }
    }
    if owner.as_ref().map(|o| &o.uid) != Some(&applied_owner.uid) {
        // Stored before the WasmOperator existed (or while it was being replaced): adopt them, in
        // the same apply as their content, so no other manager holds a reference to an old owner.
        for cm in stored.values() {
            store_config_map(&maps, cm, Some(&applied_owner)).await?;
        }
    }
    prune_modules(&client, &opts.module_namespace, &op_name, &stored).await?;
    Ok(applied)
}

/// Whether `e` is the API server not serving WasmOperatorGrants (their CRD not installed).
fn grant_crd_missing(e: &anyhow::Error) -> bool {
    e.chain().any(
        |c| matches!(c.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404),
    )
}

/// Applies the operator's own ServiceAccount and its grants (`wasmpilot rbac`'s documents, with
/// the plurals and scopes the API server serves): the host acts as that account. Without the
/// right to grant them (RBAC refuses granting what one does not hold), says what an admin must
/// apply and goes on: the host then reports the operator `NotGranted`.
pub async fn apply_grants(
    client: &Client,
    op_name: &str,
    spec: &crate::crd::WasmOperatorSpec,
    target: &crate::rbac::GrantTarget,
) -> anyhow::Result<()> {
    let (known, notes) = crate::rbac::served_kinds(client, spec).await;
    for note in notes {
        eprintln!("NOTE: {note}");
    }
    crate::rbac::check_target(spec, &known, target)
        .with_context(|| format!("granting operator {op_name}"))?;
    ensure_namespace(client, &target.identity_namespace).await?;
    eprintln!(
        "granting operator {op_name} its own account {} …",
        crate::rbac::account_user(&target.identity_namespace, op_name)
    );
    for doc in crate::rbac::grant_manifests(op_name, spec, &known, target) {
        let what = format!(
            "{} {}",
            doc["kind"].as_str().unwrap_or_default(),
            doc["metadata"]["name"].as_str().unwrap_or_default()
        );
        if let Err(e) = apply_document(client, doc, None).await {
            let forbidden = e
                .chain()
                .any(|c| matches!(c.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403));
            if !forbidden {
                return Err(e.context(format!("granting operator {op_name}: {what}")));
            }
            eprintln!(
                "warning: not allowed to apply {what} ({e:#}); an admin grants the operator with: wasmpilot rbac <operator.yaml> | kubectl apply -f -"
            );
        }
    }
    Ok(())
}

/// Server-side applies a module ConfigMap, owned by its WasmOperator when `owner` is given
/// (deleting the WasmOperator then deletes it).
async fn store_config_map(
    maps: &Api<ConfigMap>,
    cm: &Value,
    owner: Option<&OwnerReference>,
) -> anyhow::Result<()> {
    let name = cm["metadata"]["name"].as_str().unwrap_or_default();
    let mut cm = cm.clone();
    if let Some(owner) = owner {
        cm["metadata"]["ownerReferences"] = json!([owner]);
    }
    maps.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .with_context(|| {
        format!(
            "storing module {} in ConfigMap {}/{name}",
            cm["metadata"]["annotations"][SOURCE_ANNOTATION]
                .as_str()
                .unwrap_or_default(),
            cm["metadata"]["namespace"].as_str().unwrap_or_default()
        )
    })?;
    Ok(())
}

/// Deletes the module ConfigMaps an earlier deploy of WasmOperator `op_name` stored that this one
/// no longer references: a phase removed, a module now from OCI, a component now split into
/// fewer parts, or all of them after `--module-namespace` changed (in every namespace when the
/// deployer may list ConfigMaps cluster-wide, else in this deploy's namespace).
async fn prune_modules(
    client: &Client,
    module_namespace: &str,
    op_name: &str,
    stored: &BTreeMap<String, Value>,
) -> anyhow::Result<()> {
    let selector = ListParams::default().labels(&module_labels_selector(op_name));
    let listing = |what: String| {
        move || format!("listing the module ConfigMaps of WasmOperator {op_name} ({what})")
    };
    let earlier = match Api::<ConfigMap>::all(client.clone()).list(&selector).await {
        Ok(all) => all,
        Err(kube::Error::Api(e)) if e.code == 403 => {
            Api::<ConfigMap>::namespaced(client.clone(), module_namespace)
                .list(&selector)
                .await
                .with_context(listing(format!("namespace {module_namespace}")))?
        }
        Err(e) => return Err(e).with_context(listing("all namespaces".into())),
    };
    for cm in earlier {
        let name = cm.name_any();
        let namespace = cm.namespace().unwrap_or_default();
        let ours = cm.annotations().contains_key(DIGEST_ANNOTATION)
            && cm
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .any(|f| f.manager.as_deref() == Some(FIELD_MANAGER));
        let referenced = namespace == module_namespace && stored.contains_key(&name);
        if referenced || !ours {
            continue;
        }
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        match maps.delete(&name, &DeleteParams::default()).await {
            Ok(_) => eprintln!(
                "deleted ConfigMap {namespace}/{name}: WasmOperator {op_name} no longer references it"
            ),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "deleting ConfigMap {namespace}/{name}, which WasmOperator {op_name} no longer references"
                    )
                })
            }
        }
    }
    Ok(())
}

/// The labels `deploy` puts on an operator's module ConfigMaps.
fn module_labels(op_name: &str) -> Value {
    json!({MANAGED_BY_LABEL: "wasmpilot", crate::OPERATOR_LABEL: op_name})
}

fn module_labels_selector(op_name: &str) -> String {
    format!(
        "{MANAGED_BY_LABEL}=wasmpilot,{}={op_name}",
        crate::OPERATOR_LABEL
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};
    use wasmpilot_runtime::mock_api_server::{failure, scripted, Exchange};

    /// A module ConfigMap as listed: in `namespace`, written by deploy (`ours`) or by someone else.
    fn module_map(namespace: &str, name: &str, ours: bool) -> Value {
        let manager = if ours { FIELD_MANAGER } else { "kubectl" };
        json!({
            "metadata": {
                "name": name, "namespace": namespace,
                "labels": module_labels("web"),
                "annotations": {DIGEST_ANNOTATION: format!("sha256:{}", "0".repeat(64))},
                "managedFields": [{"manager": manager, "operation": "Apply"}],
            }
        })
    }

    fn list(items: Vec<Value>) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": items})
    }

    /// The DELETE of ConfigMap `namespace/name`, answered with success.
    fn deletes(namespace: &str, name: &str) -> Exchange {
        Exchange::new(
            Method::DELETE,
            &format!("/api/v1/namespaces/{namespace}/configmaps/{name}"),
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
    }

    /// What this deploy stored: `web-ready` in wasmpilot-system.
    fn stored() -> BTreeMap<String, Value> {
        BTreeMap::from([("web-ready".to_string(), json!({}))])
    }

    #[tokio::test]
    async fn pruning_deletes_what_no_longer_is_referenced_in_every_namespace() {
        let selector = "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dwasmpilot%2Cwasmpilot.io%2Foperator%3Dweb";
        let (client, server) = scripted(vec![
            Exchange::new(
                Method::GET,
                "/api/v1/configmaps",
                StatusCode::OK,
                list(vec![
                    module_map("wasmpilot-system", "web-ready", true),
                    module_map("old-modules", "web-ready", true),
                    module_map("wasmpilot-system", "web-handmade", false),
                    module_map("wasmpilot-system", "web-removed-phase", true),
                ]),
            )
            .checking(move |parts, _| {
                let query = parts.uri.query().unwrap_or_default();
                assert!(
                    query.contains(selector),
                    "only this operator's modules: {query}"
                );
            }),
            // The referenced one and the one another manager wrote stay.
            deletes("old-modules", "web-ready"),
            deletes("wasmpilot-system", "web-removed-phase"),
        ]);
        prune_modules(&client, "wasmpilot-system", "web", &stored())
            .await
            .expect("pruned");
        drop(client);
        server.await.expect("the API server's script");
    }

    #[tokio::test]
    async fn pruning_falls_back_to_the_module_namespace_without_cluster_wide_list() {
        let (client, server) = scripted(vec![
            Exchange::new(
                Method::GET,
                "/api/v1/configmaps",
                StatusCode::FORBIDDEN,
                failure(
                    403,
                    "Forbidden",
                    "configmaps is forbidden: cannot list at the cluster scope",
                ),
            ),
            Exchange::new(
                Method::GET,
                "/api/v1/namespaces/wasmpilot-system/configmaps",
                StatusCode::OK,
                list(vec![
                    module_map("wasmpilot-system", "web-ready", true),
                    module_map("wasmpilot-system", "web-removed-phase", true),
                ]),
            ),
            deletes("wasmpilot-system", "web-removed-phase"),
        ]);
        prune_modules(&client, "wasmpilot-system", "web", &stored())
            .await
            .expect("pruned");
        drop(client);
        server.await.expect("the API server's script");
    }

    #[tokio::test]
    async fn pruning_stops_on_other_errors_naming_what_it_listed() {
        let (client, server) = scripted(vec![Exchange::new(
            Method::GET,
            "/api/v1/configmaps",
            StatusCode::INTERNAL_SERVER_ERROR,
            failure(500, "InternalError", "etcd is down"),
        )]);
        let error = prune_modules(&client, "wasmpilot-system", "web", &stored())
            .await
            .expect_err("a server error is not a reason to prune less");
        assert!(
            format!("{error:#}")
                .contains("listing the module ConfigMaps of WasmOperator web (all namespaces)"),
            "{error:#}"
        );
        drop(client);
        server.await.expect("the API server's script");
    }
}
