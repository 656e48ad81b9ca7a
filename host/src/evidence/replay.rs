//! `wasmpilot replay <cases…> --operator operator.yaml`: runs recorded requests through a
//! candidate operator — the same decision step and checks as the controller — and reports per
//! case same / different / error with the changed fields. The CI gate for an operator upgrade.

use super::case::{compare, summarize, DecisionCase, RecordedResult, Verdict};
use super::record::read_cases;
use crate::crd::{FileModule, KindRef, ModuleRef};
use crate::definition::OperatorDefinition;
use crate::modules::ModuleCache;
use crate::offline;
use crate::pipeline::decision::{self, DecisionInput};
use crate::pipeline::step;
use crate::sandbox::{PhaseModule, Randomness, Sandbox, SandboxLimits};
use anyhow::{anyhow, bail, Context};
use kube::api::DynamicObject;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

/// `wasmpilot replay` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ReplayArgs {
    /// Cases: segment files or directories written by `wasmpilot run --record-dir`, files from
    /// `wasmpilot capture`, or the host's `/shadow-cases` output saved to a file.
    #[arg(required = true)]
    pub cases: Vec<PathBuf>,
    /// The candidate WasmOperator manifest (or the directory holding operator.yaml).
    #[arg(long)]
    pub operator: PathBuf,
    /// Where the manifest's `file` modules resolve (default: the manifest's directory).
    #[arg(long)]
    pub module_dir: Option<PathBuf>,
    /// A candidate component for one phase, overriding the manifest: `PHASE=PATH` (repeatable).
    #[arg(long = "module", value_name = "PHASE=PATH")]
    pub modules: Vec<String>,
    /// Differences only at these fields are expected (not a failure); `*` matches any text,
    /// e.g. `outputs[*].metadata.labels.team` (repeatable).
    #[arg(long = "expect", value_name = "FIELD")]
    pub expect: Vec<String>,
    /// Only cases of this phase.
    #[arg(long)]
    pub phase: Option<String>,
    /// Directories of CustomResourceDefinitions saying which output kinds are cluster-scoped
    /// (default: crds/ beside the manifest).
    #[arg(long)]
    pub crds: Vec<PathBuf>,
    /// Changed fields printed per differing case.
    #[arg(long, default_value_t = 10)]
    pub max_changes: usize,
}

/// How a replay went; the command fails unless `unexpected == 0 && errors == 0`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    pub cases: usize,
    pub same: usize,
    /// Differing cases whose every changed field is declared with `--expect`.
    pub expected: usize,
    pub unexpected: usize,
    pub errors: usize,
    /// Cases whose recorded input hash is not the sha256 of their request (edited files).
    pub hash_mismatches: usize,
    /// The names of the cases that differed (expected or not), in order.
    pub differing: Vec<String>,
}

impl ReplaySummary {
    pub fn passed(&self) -> bool {
        self.unexpected == 0 && self.errors == 0
    }
}

/// Replays every case and writes the report to `out`.
pub async fn replay(
    args: &ReplayArgs,
    limits: SandboxLimits,
    out: &mut dyn Write,
) -> anyhow::Result<ReplaySummary> {
    let manifest = if args.operator.is_dir() {
        args.operator.join("operator.yaml")
    } else {
        args.operator.clone()
    };
    let (_, def) = offline::load_operator(&manifest)?;
    let overrides = module_overrides(&def, &args.modules)?;
    let module_dir = args
        .module_dir
        .clone()
        .or_else(|| manifest.parent().map(PathBuf::from))
        .unwrap_or_default();
    let crd_dirs = if args.crds.is_empty() {
        vec![offline::crds_beside(&manifest)]
    } else {
        args.crds.clone()
    };
    let namespaced = offline::output_scopes(&def, &crd_dirs)?;
    let cases = read_cases(&args.cases)?;
    if cases.is_empty() {
        bail!(
            "no cases in {}: record with `wasmpilot run --record-dir DIR`, or capture one with `wasmpilot capture <kind>/<name>`",
            args.cases
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let modules = ModuleCache::new(Sandbox::new(limits)?, None, Some(module_dir))
        .with_compile_cache(crate::modules::compile_cache_dir(None, false))
        .with_progress();
    let mut loaded: HashMap<String, PhaseModule> = HashMap::new();
    let mut summary = ReplaySummary::default();
    let mut other_operators = 0;
    for (name, case) in cases {
        if case.request.operator != def.name {
            other_operators += 1;
            continue;
        }
        if args
            .phase
            .as_ref()
            .is_some_and(|p| *p != case.request.phase)
        {
            continue;
        }
        summary.cases += 1;
        if !case.input_hash_reproduces() {
            summary.hash_mismatches += 1;
            writeln!(out, "note: {name}: the request is not the one recorded as {} (edited?); replaying it as it is", case.input_hash)?;
        }
        let candidate = match candidate_module(&modules, &def, &overrides, &mut loaded, &case).await
        {
            Ok(module) => decide(&modules, &def, &module, &namespaced, &case).await,
            Err(e) => RecordedResult::Error {
                reason: "ModuleLoadFailed".into(),
                message: crate::error_report::one_line(e.as_ref()),
            },
        };
        let verdict = compare(&case.result, &candidate);
        let label = match &verdict {
            Verdict::Same => {
                summary.same += 1;
                "same"
            }
            Verdict::Different(changes) if all_expected(changes, &args.expect) => {
                summary.expected += 1;
                summary.differing.push(name.clone());
                "expected"
            }
            Verdict::Different(_) => {
                summary.unexpected += 1;
                summary.differing.push(name.clone());
                "different"
            }
            Verdict::Error(_) => {
                summary.errors += 1;
                "error"
            }
        };
        writeln!(
            out,
            "{label:<9} {} {} (recorded {} by {}) [{name}]",
            case.resource,
            case.request.phase,
            case.recorded_at,
            short(&case.module)
        )?;
        match &verdict {
            Verdict::Different(changes) => {
                for line in summarize(changes, args.max_changes).lines() {
                    writeln!(out, "    {line}")?;
                }
            }
            Verdict::Error(why) => writeln!(out, "    {why}")?,
            Verdict::Same => {}
        }
        if label != "same" && phase_randomness(&def, &case) == Some(Randomness::Host) {
            writeln!(
                out,
                "    note: phase {} takes the host's randomness, so its decisions need not repeat",
                case.request.phase
            )?;
        }
    }
    if other_operators > 0 {
        writeln!(
            out,
            "({other_operators} cases of other operators than {} skipped)",
            def.name
        )?;
    }
    if summary.cases == 0 {
        bail!(
            "none of the cases is of operator {} (phase filter: {})",
            def.name,
            args.phase.as_deref().unwrap_or("none")
        );
    }
    writeln!(
        out,
        "{} cases: {} same, {} different ({} expected), {} errors",
        summary.cases,
        summary.same,
        summary.expected + summary.unexpected,
        summary.expected,
        summary.errors
    )?;
    Ok(summary)
}

/// `PHASE=PATH` arguments as file modules, checked against the declared phases.
fn module_overrides(
    def: &OperatorDefinition,
    args: &[String],
) -> anyhow::Result<HashMap<String, ModuleRef>> {
    let mut overrides = HashMap::new();
    for arg in args {
        let (phase, path) = arg
            .split_once('=')
            .ok_or_else(|| anyhow!("--module {arg:?} is not PHASE=PATH"))?;
        if def.phase(phase).is_none_or(|p| p.is_final) {
            bail!(
                "--module {arg:?}: {phase:?} is not a phase with a worker (phases: {})",
                def.phase_names()
            );
        }
        let path = std::fs::canonicalize(path).with_context(|| format!("--module {arg:?}"))?;
        overrides.insert(
            phase.to_string(),
            ModuleRef {
                file: Some(FileModule {
                    path: path.display().to_string(),
                    sha256: None,
                }),
                ..Default::default()
            },
        );
    }
    Ok(overrides)
}

/// The candidate component for a case's phase (loaded once per phase).
async fn candidate_module(
    modules: &ModuleCache,
    def: &OperatorDefinition,
    overrides: &HashMap<String, ModuleRef>,
    loaded: &mut HashMap<String, PhaseModule>,
    case: &DecisionCase,
) -> anyhow::Result<PhaseModule> {
    let phase_name = &case.request.phase;
    if let Some(module) = loaded.get(phase_name) {
        return Ok(module.clone());
    }
    let phase = step::declared_phase(def, phase_name)?;
    let module_ref = overrides
        .get(phase_name)
        .or(phase.module.as_ref())
        .ok_or_else(|| {
            anyhow!("phase {phase_name} is final in the candidate: it runs no worker")
        })?;
    let module = offline::phase_module(modules, phase, module_ref)
        .await
        .context("pass the candidate's components with --module-dir or --module PHASE=PATH")?;
    loaded.insert(phase_name.clone(), module.clone());
    Ok(module)
}

/// The candidate's decision on the case's request, through the controller's decision step.
async fn decide(
    modules: &ModuleCache,
    def: &OperatorDefinition,
    module: &PhaseModule,
    namespaced: &HashMap<KindRef, bool>,
    case: &DecisionCase,
) -> RecordedResult {
    let request = case.request.to_request();
    let resource: DynamicObject = match serde_json::from_str(&request.resource) {
        Ok(r) => r,
        Err(e) => {
            return RecordedResult::Error {
                reason: "BadCase".into(),
                message: format!("the recorded resource is not a Kubernetes object: {e}"),
            }
        }
    };
    let phase = match step::declared_phase(def, &request.phase) {
        Ok(p) => p,
        Err(e) => return RecordedResult::of(&Err(e)),
    };
    let input = DecisionInput {
        definition: def,
        phase,
        module,
        resource: &resource,
        request,
        namespaced,
        slot: None,
    };
    RecordedResult::of(&decision::decide(modules.sandbox(), input).await)
}

fn phase_randomness(def: &OperatorDefinition, case: &DecisionCase) -> Option<Randomness> {
    def.phase(&case.request.phase).map(|p| p.randomness)
}

/// Whether every changed field matches one of the `--expect` patterns.
fn all_expected(changes: &[crate::diff::Change], patterns: &[String]) -> bool {
    !patterns.is_empty()
        && changes
            .iter()
            .all(|c| patterns.iter().any(|p| glob_matches(p, c.path())))
}

/// `*` matches any run of characters (including none); everything else matches itself.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return text.is_empty(),
    };
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part) {
            Some(i) => remaining = &remaining[i + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_field_paths() {
        let path = r#"outputs["Service/web.r1"].metadata.labels.team"#;
        assert!(glob_matches("outputs[*].metadata.labels.team", path));
        assert!(glob_matches("outputs[*].metadata.labels.*", path));
        assert!(glob_matches("*", path));
        assert!(glob_matches(path, path));
        assert!(!glob_matches("outputs[*].spec.*", path));
        assert!(!glob_matches("outputs[*].metadata.labels", path));
        assert!(!glob_matches("nextPhase", path));
        assert!(glob_matches("a*b*c", "abc"));
        assert!(!glob_matches("a*b*c", "acb"));
    }
}
