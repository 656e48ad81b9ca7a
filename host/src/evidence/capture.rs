//! `wasmpilot capture <kind>/<name>`: the request a live resource would get now (its current
//! phase, inputs listed from the cluster, metric samples, the clock), decided by the phase's
//! deployed module, written as a replay case. Writes nothing to the cluster.

use super::case::{CaseSource, DecisionCase, RecordedResult};
use crate::authoring::plan::{find_live, live_inputs, live_modules, PlanArgs};
use crate::decision::{self, DecisionInput};
use crate::inputs;
use crate::kinds;
use crate::offline;
use crate::sandbox::SandboxLimits;
use anyhow::{bail, Context};
use kube::Client;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// `wasmpilot capture` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct CaptureArgs {
    /// The live resource, found as `wasmpilot plan` finds it.
    #[command(flatten)]
    pub live: PlanArgs,
    /// Write the case here (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Captures the case and returns it (the caller writes it).
pub async fn capture(
    client: Client,
    args: &CaptureArgs,
    limits: SandboxLimits,
) -> anyhow::Result<DecisionCase> {
    let live_args = &args.live;
    let live = find_live(&client, live_args).await?;
    let def = &live.def;
    let phase_name = offline::current_phase(def, &live.resource);
    let phase = offline::declared_phase(def, &phase_name)?;
    let Some(module_ref) = &phase.module else {
        bail!("{} is in phase {phase_name}, which is final: no worker runs, so there is no request to capture", live_args.target);
    };
    let (now, source, extra) = live_inputs(&client, &live, &phase_name, live_args).await?;
    let mut namespaced = HashMap::new();
    for (i, kind) in phase.outputs.iter().enumerate() {
        let resolved = kinds::resolve(&client, kind, &format!("outputs[{i}]")).await?;
        namespaced.insert(kind.clone(), resolved.namespaced);
    }
    let modules = live_modules(&client, live_args, limits)?;
    let module = offline::phase_module(&modules, phase, module_ref).await?;
    let mut phase_inputs = inputs::gather(phase, inputs::Reader::of(&live.resource), &source)
        .map_err(crate::reconcile::ReconcileError::invalid_selector(
            &phase_name,
        ))?;
    phase_inputs.extend(extra);
    let request = decision::sync_request(
        def,
        phase,
        inputs::to_worker_json(&live.resource, &def.resource),
        phase_inputs,
        now,
    );
    let kept = request.clone();
    let input = DecisionInput {
        definition: def,
        phase,
        module: &module,
        resource: &live.resource,
        request,
        namespaced: &namespaced,
    };
    let started = Instant::now();
    let decided = decision::decide(modules.sandbox(), input, |_, _| {}).await;
    let duration = started.elapsed();
    let resource = match &live.namespace {
        Some(ns) => format!("{ns}/{}", live.name),
        None => live.name.clone(),
    };
    DecisionCase::new(
        CaseSource::Captured,
        resource,
        &kept,
        &module.digest,
        RecordedResult::of(&decided),
        Some(duration),
    )
    .context("writing the case")
}
