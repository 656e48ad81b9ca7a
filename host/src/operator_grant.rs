//! The admin's consent to a WasmOperator: `wasmpilot grant <name>` shows what the operator asks
//! for and applies the `WasmOperatorGrant` pinning its uid, the sensitive kinds, module sources
//! and queries it requests. `wasmpilot deploy`, run by an admin who grants its RBAC, applies it too.

use crate::controller::admin_consent::{module_sources, queries_asked};
use crate::crd::{
    KindRef, ModuleSourcesGrant, WasmOperator, WasmOperatorGrant, WasmOperatorGrantSpec,
};
use crate::definition::{declared_kinds, sensitive_uses};
use anyhow::{bail, Context};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

/// The field manager of the grants this tool applies.
const FIELD_MANAGER: &str = "wasmpilot-grant";

/// What `op` asks of the cluster, for the admin to read before granting it.
pub fn review(op: &WasmOperator) -> String {
    let mut lines = vec![format!(
        "WasmOperator {} (uid {}) manages {} {}",
        op.name_any(),
        op.metadata.uid.as_deref().unwrap_or("none"),
        op.spec.resource.api_version,
        op.spec.resource.kind
    )];
    for (kind, field) in declared_kinds(&op.spec).into_iter().skip(1) {
        lines.push(format!("  {field}: {} {}", kind.api_version, kind.kind));
    }
    let uses = sensitive_uses(&op.spec);
    if uses.is_empty() {
        lines.push("  sensitive kinds: none".into());
    }
    for (kind, field, why) in &uses {
        lines.push(format!(
            "  sensitive: {} {} at {field} {why}",
            kind.api_version, kind.kind
        ));
    }
    for (field, source) in module_sources(&op.spec) {
        lines.push(format!("  module source: {source} ({field})"));
    }
    match queries_asked(&op.spec) {
        None => lines.push("  metric queries: none".into()),
        Some(asked) => {
            lines.push(format!(
                "  metric queries against {}:",
                asked
                    .url
                    .as_deref()
                    .unwrap_or("the host's own Prometheus (every tenant's metrics)")
            ));
            for q in &asked.queries {
                lines.push(format!("    {q}"));
            }
        }
    }
    lines.join("\n")
}

/// What the admin grants beyond what the WasmOperator asks for (`None`: as the grant in the
/// cluster already says).
#[derive(Debug, Default, Clone)]
pub struct GrantExtras {
    /// Namespaces a cluster-scoped resource's outputs may go to.
    pub output_namespaces: Option<Vec<String>>,
    /// Addresses beyond public ones this operator's fetches may reach.
    pub allow_fetch_from: Option<Vec<String>>,
    /// The tenant whose turns of the host's shared slots it takes.
    pub tenant: Option<String>,
}

/// The grant consenting to `op` as it is: its uid, the sensitive kinds it uses and asks for
/// (those its author did not list in `spec.allowSensitiveKinds` are refused with the definition
/// anyway), where its modules come from and the queries it runs; with `extras`.
pub fn grant_for(op: &WasmOperator, extras: &GrantExtras) -> anyhow::Result<WasmOperatorGrant> {
    let Some(uid) = op.metadata.uid.clone() else {
        bail!(
            "WasmOperator {} has no uid: read it from the cluster",
            op.name_any()
        );
    };
    let mut kinds: Vec<KindRef> = sensitive_uses(&op.spec)
        .into_iter()
        .map(|(kind, _, _)| kind)
        .collect();
    kinds.sort();
    kinds.dedup_by(|a, b| crate::definition::same_kind(a, b));
    let mut modules = ModuleSourcesGrant::default();
    for (_, source) in module_sources(&op.spec) {
        source.add_to(&mut modules);
    }
    Ok(WasmOperatorGrant::new(
        &op.name_any(),
        WasmOperatorGrantSpec {
            operator_uid: uid,
            sensitive_kinds: kinds,
            modules,
            output_namespaces: extras.output_namespaces.clone().unwrap_or_default(),
            prometheus: queries_asked(&op.spec),
            allow_fetch_from: extras.allow_fetch_from.clone().unwrap_or_default(),
            tenant: extras.tenant.clone(),
        },
    ))
}

/// Applies the grant for `op` (server-side, as this tool's field manager); what `extras` leaves
/// unset stays as the grant in the cluster says, when that grant is for this uid.
pub async fn apply(
    client: &Client,
    op: &WasmOperator,
    extras: &GrantExtras,
) -> anyhow::Result<WasmOperatorGrant> {
    let api: Api<WasmOperatorGrant> = Api::all(client.clone());
    let mut extras = extras.clone();
    // What an existing grant holds beyond the review is kept when not given again: a grant that
    // cannot be read is not replaced by one that would silently drop it.
    let existing = api.get_opt(&op.name_any()).await.with_context(|| {
        format!(
            "reading WasmOperatorGrant {} (to keep its output namespaces, egress and tenant): is its CRD installed (deploy/crds/wasmoperatorgrant.yaml), and may you read it?",
            op.name_any()
        )
    })?;
    if let Some(existing) =
        existing.filter(|g| Some(&g.spec.operator_uid) == op.metadata.uid.as_ref())
    {
        extras
            .output_namespaces
            .get_or_insert(existing.spec.output_namespaces);
        extras
            .allow_fetch_from
            .get_or_insert(existing.spec.allow_fetch_from);
        if extras.tenant.is_none() {
            extras.tenant = existing.spec.tenant;
        }
    }
    let grant = grant_for(op, &extras)?;
    let mut body = serde_json::to_value(&grant)?;
    if let Some(m) = body["metadata"].as_object_mut() {
        m.retain(|k, _| k == "name");
    }
    api.patch(
        &op.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .with_context(|| {
        format!(
            "applying WasmOperatorGrant {}: is its CRD installed (deploy/crds/wasmoperatorgrant.yaml), and may you write it (an admin's right)?",
            op.name_any()
        )
    })
}

/// `wasmpilot grant <name>`: prints the review, then applies the grant unless `dry_run`
/// (then prints the grant instead).
pub async fn grant_command(name: &str, dry_run: bool, extras: &GrantExtras) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let ops: Api<WasmOperator> = Api::all(client.clone());
    let op = ops
        .get(name)
        .await
        .with_context(|| format!("reading WasmOperator {name}"))?;
    eprintln!("{}", review(&op));
    if dry_run {
        print!("{}", serde_yaml::to_string(&grant_for(&op, extras)?)?);
        return Ok(());
    }
    let applied = apply(&client, &op, extras).await?;
    println!(
        "WasmOperatorGrant {name} applied: consents to uid {}{}",
        applied.spec.operator_uid,
        if applied.spec.sensitive_kinds.is_empty() {
            String::new()
        } else {
            format!(
                " with sensitive kinds {}",
                applied
                    .spec
                    .sensitive_kinds
                    .iter()
                    .map(|k| format!("{} {}", k.api_version, k.kind))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if !applied.spec.output_namespaces.is_empty() {
        println!(
            "  outputs of cluster-scoped resources may go to: {}",
            applied.spec.output_namespaces.join(", ")
        );
    }
    if let Some(tenant) = &applied.spec.tenant {
        println!("  shares the host's slots with the other operators of tenant {tenant}");
    }
    if !applied.spec.allow_fetch_from.is_empty() {
        println!(
            "  its fetches may reach, beyond public addresses: {}",
            applied.spec.allow_fetch_from.join(", ")
        );
    }
    Ok(())
}
