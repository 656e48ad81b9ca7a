//! `wasmpilot plan <kind>/<name> --operator <op>`: what the operator would do to one live
//! resource right now, without writing anything.
//!
//! It reads the WasmOperator, the resource and the current phase's inputs from the cluster,
//! loads the phase's module as the host does ([`ModuleCache`]: ConfigMap, OCI, URL, verified by
//! sha256, compile cache), runs it through [`crate::offline::decide`], then asks the API server:
//! each output is server-side applied with `dryRun=All` (same field manager, labels and
//! ownerReference as the host), objects the phase would prune are deleted with `dryRun=All`,
//! and the status patch is sent to the status subresource with `dryRun=All`. The answers are
//! diffed field by field against the live objects.

use super::diff::{diff, without_bookkeeping, Change};
use crate::crd::{KindRef, WasmOperator};
use crate::definition::OperatorDefinition;
use crate::inputs;
use crate::kinds::{self, ResolvedKind};
use crate::modules::{compile_cache_dir, ModuleCache};
use crate::offline::{self, ObjectsByKind};
use crate::outputs::{self, ObjectKey, Owned};
use crate::sandbox::{Sandbox, SandboxLimits};
use crate::status::StatusUpdate;
use anyhow::{anyhow, bail, Context};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// `wasmpilot plan` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct PlanArgs {
    /// The resource as kind/name, e.g. `autoroute/example` (kind, plural or singular).
    pub target: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The WasmOperator that manages it.
    #[arg(long)]
    pub operator: String,
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

/// Runs the plan and writes it to `out`.
pub async fn plan(
    client: Client,
    args: &PlanArgs,
    limits: SandboxLimits,
    out: &mut dyn Write,
) -> anyhow::Result<PlanSummary> {
    let (kind_arg, name) = args.target.split_once('/').ok_or_else(|| {
        anyhow!(
            "{:?} is not kind/name: write e.g. autoroute/example",
            args.target
        )
    })?;
    let op = Api::<WasmOperator>::all(client.clone())
        .get_opt(&args.operator)
        .await
        .context("reading WasmOperators (is KUBECONFIG set, and the wasmpilot CRD applied?)")?
        .ok_or_else(|| {
            anyhow!(
                "WasmOperator {} not found: deploy it first (wasmpilot deploy <dir>), or list them with kubectl get wasmoperators",
                args.operator
            )
        })?;
    let def = OperatorDefinition::validate(&args.operator, &op.spec)
        .with_context(|| format!("WasmOperator {} is invalid", args.operator))?;
    let resource_kind = kinds::resolve(&client, &def.resource, "spec.resource").await?;
    let wanted = kind_arg.to_ascii_lowercase();
    if wanted != def.resource.kind.to_ascii_lowercase() && wanted != resource_kind.api.plural {
        bail!(
            "WasmOperator {} manages {} ({}), not {kind_arg:?}: plan {}/{name}",
            args.operator,
            def.resource.kind,
            resource_kind.api.plural,
            def.resource.kind.to_ascii_lowercase()
        );
    }
    let namespace = resource_kind.namespaced.then(|| {
        args.namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string())
    });
    let api = dynamic_api(&client, &resource_kind, namespace.as_deref());
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
    let described = outputs::describe(&(def.resource.clone(), namespace.clone(), name.to_string()));
    let phase_name = offline::current_phase(&def, &resource);
    let phase = offline::declared_phase(&def, &phase_name)?;
    writeln!(out, "plan for {described} (operator {})", args.operator)?;
    let generation = resource.metadata.generation;
    if phase.is_final {
        let observed = resource.data["status"]["observedGeneration"].as_i64();
        if generation.is_some() && observed != generation {
            writeln!(out, "phase {phase_name} is final, but the spec changed (generation {}): the host will restart it at {}", generation.unwrap_or(0), def.initial_phase)?;
        } else {
            writeln!(
                out,
                "phase {phase_name} is final: the host runs no worker until the spec changes"
            )?;
        }
        return Ok(PlanSummary {
            phase: phase_name,
            ..Default::default()
        });
    }

    let now = args
        .now
        .clone()
        .unwrap_or_else(crate::reconcile::now_rfc3339);
    let source = read_inputs(&client, &def, &phase_name, namespace.as_deref()).await?;
    let mut extra = Vec::new();
    if !phase.queries.is_empty() {
        let (url, timeout) = match &def.prometheus {
            Some((url, timeout)) => (Some(url.clone()), *timeout),
            None => (args.prometheus_url.clone(), crate::promql::DEFAULT_TIMEOUT),
        };
        let as_value: Value =
            serde_json::from_str(&inputs::to_worker_json(&resource, &def.resource))?;
        extra = crate::promql::Prometheus::default()
            .run(&phase.queries, &as_value, url.as_deref(), timeout, &now)
            .await
            .with_context(|| format!("metric queries of phase {phase_name} (pass --prometheus-url if the WasmOperator names no Prometheus)"))?;
    }
    let mut output_kinds: HashMap<KindRef, ResolvedKind> = HashMap::new();
    for (i, k) in phase.outputs.iter().enumerate() {
        let resolved = kinds::resolve(&client, k, &format!("outputs[{i}]")).await?;
        output_kinds.insert(k.clone(), resolved);
    }
    let namespaced: HashMap<KindRef, bool> = output_kinds
        .iter()
        .map(|(k, r)| (k.clone(), r.namespaced))
        .collect();
    let modules = ModuleCache::new(
        Sandbox::new(limits)?,
        Some(client.clone()),
        args.module_dir.clone(),
    )
    .with_compile_cache(compile_cache_dir(None, false))
    .with_progress();
    let decision = offline::decide(
        &modules,
        &def,
        &resource,
        &phase_name,
        &source,
        extra,
        &namespaced,
        &now,
    )
    .await?;
    let seen: Vec<String> = inputs::gather(phase, namespace.as_deref(), &source)
        .iter()
        .map(|i| format!("{} ({})", i.name, i.objects.len()))
        .collect();
    writeln!(
        out,
        "phase {phase_name} → {}, decided by {}{}",
        decision.next_phase,
        decision.module,
        if seen.is_empty() {
            String::new()
        } else {
            format!(" from inputs {}", seen.join(", "))
        }
    )?;

    let mut summary = PlanSummary {
        phase: phase_name.clone(),
        next_phase: Some(decision.next_phase.clone()),
        ..Default::default()
    };
    let field_manager = crate::field_manager(&def.name);
    let mut refused = Vec::new();
    let mut checked = decision.outputs.clone();
    checked.sort_by_key(|c| c.key());
    let keep: BTreeSet<ObjectKey> = checked.iter().map(|c| c.key()).collect();
    for mut o in checked {
        outputs::label(&mut o.object, &def.name, &phase_name);
        let what = o.describe();
        let api = dynamic_api(&client, &output_kinds[&o.kind], o.namespace.as_deref());
        let live = api.get_opt(&o.name).await.with_context(|| {
            format!("reading the live {what} to diff against: check that KUBECONFIG's user may get it (kubectl auth can-i get {})", output_kinds[&o.kind].api.plural)
        })?;
        let params = PatchParams::apply(&field_manager).force().dry_run();
        let planned = match api.patch(&o.name, &params, &Patch::Apply(&o.object)).await {
            Ok(p) => p,
            Err(e) => {
                writeln!(out, "\n! {what}: the API server refuses it: {e}")?;
                refused.push(what);
                continue;
            }
        };
        let live = live
            .map(|l| serde_json::to_value(l).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        let changes = diff(
            &without_bookkeeping(&live),
            &without_bookkeeping(&serde_json::to_value(planned)?),
        );
        let verb = if live.is_null() {
            summary.create += 1;
            "+ create"
        } else if changes.is_empty() {
            summary.unchanged += 1;
            "= unchanged"
        } else {
            summary.update += 1;
            "~ update"
        };
        writeln!(out, "\n{verb} {what}")?;
        write_changes(out, &changes)?;
    }

    let uid = resource.metadata.uid.clone().unwrap_or_default();
    let owned = Owned {
        operator: &def.name,
        phase,
        owner_uid: &uid,
        namespace: namespace.as_deref(),
    };
    let selector = format!(
        "{}={},{}={}",
        crate::OPERATOR_LABEL,
        def.name,
        crate::PHASE_LABEL,
        phase_name
    );
    for kind in &phase.outputs {
        let resolved = &output_kinds[kind];
        let api = dynamic_api(&client, resolved, namespace.as_deref());
        let applied = api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .with_context(|| {
                format!(
                    "listing the {} phase {phase_name} applied, to find what it would prune: check that KUBECONFIG's user may list them (kubectl auth can-i list {})",
                    kind.kind, resolved.api.plural
                )
            })?;
        for meta in applied {
            let m = &meta.metadata;
            let key = (
                kind.clone(),
                m.namespace.clone(),
                m.name.clone().unwrap_or_default(),
            );
            if !owned.created(m) || keep.contains(&key) {
                continue;
            }
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
            summary.delete += 1;
            writeln!(
                out,
                "\n- delete {} (phase {phase_name} no longer returns it)",
                outputs::describe(&key)
            )?;
        }
    }

    let update = StatusUpdate::phase_completed(
        &decision.next_phase,
        decision.status_info.clone(),
        generation,
        &decision.module,
    );
    let current = resource.data.get("status");
    let status_changed = match crate::status::status_patch(current, &update, &now) {
        None => {
            writeln!(out, "\n= status of {described} unchanged")?;
            false
        }
        Some(patch) => {
            let params = PatchParams {
                dry_run: true,
                ..Default::default()
            };
            let planned = api
                .patch_status(name, &params, &Patch::Merge(&json!({ "status": patch })))
                .await
                .with_context(|| format!("dry-run status patch of {described}"))?;
            let changes = diff(
                current.unwrap_or(&Value::Null),
                planned.data.get("status").unwrap_or(&Value::Null),
            );
            writeln!(out, "\n~ status of {described}")?;
            write_changes(out, &changes)?;
            true
        }
    };
    let then = if status_changed || summary.create + summary.update + summary.delete > 0 {
        "at once (the host watches what it writes)".to_string()
    } else {
        let wait = decision
            .requeue_after_ms
            .map(std::time::Duration::from_millis)
            .unwrap_or(def.resync);
        format!(
            "after {} ({})",
            humantime::format_duration(wait),
            if decision.requeue_after_ms.is_some() {
                "requeue-after"
            } else {
                "resync interval"
            }
        )
    };
    writeln!(
        out,
        "\n{} to create, {} to update, {} unchanged, {} to delete; next reconcile {then}.\nNothing was written (server-side dry run).",
        summary.create, summary.update, summary.unchanged, summary.delete
    )?;
    if !refused.is_empty() {
        bail!(
            "the API server refuses {} (the host would report ApplyFailed): fix the worker's outputs",
            refused.join(", ")
        );
    }
    Ok(summary)
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
    def: &OperatorDefinition,
    phase: &str,
    namespace: Option<&str>,
) -> anyhow::Result<ObjectsByKind> {
    let mut objects: HashMap<KindRef, Vec<Arc<DynamicObject>>> = HashMap::new();
    let Some(phase) = def.phase(phase) else {
        return Ok(ObjectsByKind(objects));
    };
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
