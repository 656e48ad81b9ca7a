//! `wasmpilot capture <kind>/<name>`: the request a live resource would get now (its current
//! phase, inputs listed from the cluster, metric samples, the clock), decided by the phase's
//! deployed module, written as a replay case. Writes nothing to the cluster.

use super::case::{CaseSource, DecisionCase, RecordedResult};
use crate::authoring::plan::{find_live, live_inputs, live_modules, with_query_hint, PlanArgs};
use crate::kinds;
use crate::offline;
use crate::pipeline::step;
use crate::promql::Prometheus;
use crate::sandbox::SandboxLimits;
use anyhow::{bail, Context};
use kube::Client;
use std::collections::HashMap;
use std::path::PathBuf;

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
    let phase_name = step::current_phase(def, &live.resource);
    let phase = step::declared_phase(def, phase_name)?;
    if phase.is_final {
        bail!("{} is in phase {phase_name}, which is final: no worker runs, so there is no request to capture", live_args.target);
    }
    let prometheus = Prometheus::default();
    let (now, source, samples) = live_inputs(&client, &live, phase, live_args, &prometheus).await?;
    let mut namespaced = HashMap::new();
    for (i, kind) in phase.outputs.iter().enumerate() {
        let resolved = kinds::resolve(&client, kind, &format!("outputs[{i}]")).await?;
        namespaced.insert(kind.clone(), resolved.namespaced);
    }
    let modules = live_modules(&client, live_args, limits)?;
    let operator = offline::OfflineOperator {
        modules: &modules,
        definition: def,
        namespaced: &namespaced,
    };
    let call = operator
        .call(&live.resource, phase, &source, samples, &now)
        .await
        .map_err(with_query_hint)?;
    let resource = match &live.namespace {
        Some(ns) => format!("{ns}/{}", live.name),
        None => live.name.clone(),
    };
    DecisionCase::new(
        CaseSource::Captured,
        resource,
        &call.request,
        &call.module,
        RecordedResult::of(&call.decided),
        Some(call.duration),
    )
    .context("writing the case")
}
