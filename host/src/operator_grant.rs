//! The admin's consent to a WasmOperator: `wasmpilot grant <name>` shows what the operator asks
//! for and applies the `WasmOperatorGrant` pinning its uid and the sensitive kinds it requests.
//! `wasmpilot deploy`, run by an admin who grants the operator's RBAC, applies it too.

use crate::crd::{KindRef, WasmOperator, WasmOperatorGrant, WasmOperatorGrantSpec};
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
    lines.join("\n")
}

/// The grant consenting to `op` as it is: its uid, and the sensitive kinds it uses and asks for
/// (those its author did not list in `spec.allowSensitiveKinds` are refused with the definition
/// anyway).
pub fn grant_for(op: &WasmOperator) -> anyhow::Result<WasmOperatorGrant> {
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
    Ok(WasmOperatorGrant::new(
        &op.name_any(),
        WasmOperatorGrantSpec {
            operator_uid: uid,
            sensitive_kinds: kinds,
        },
    ))
}

/// Applies the grant for `op` (server-side, as this tool's field manager).
pub async fn apply(client: &Client, op: &WasmOperator) -> anyhow::Result<WasmOperatorGrant> {
    let grant = grant_for(op)?;
    let api: Api<WasmOperatorGrant> = Api::all(client.clone());
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
pub async fn grant_command(name: &str, dry_run: bool) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let ops: Api<WasmOperator> = Api::all(client.clone());
    let op = ops
        .get(name)
        .await
        .with_context(|| format!("reading WasmOperator {name}"))?;
    eprintln!("{}", review(&op));
    if dry_run {
        print!("{}", serde_yaml::to_string(&grant_for(&op)?)?);
        return Ok(());
    }
    let applied = apply(&client, &op).await?;
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
    Ok(())
}
