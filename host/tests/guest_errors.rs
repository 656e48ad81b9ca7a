//! What a JavaScript worker is told when its engine cannot serialize its decision, or when it
//! reaches for the network, and what its bug (an uncaught throw) reports: a project from
//! `wasmpilot init --lang javascript`, built with the pinned toolchain and run through the
//! host's sandbox offline (`wasmpilot run-phase`). Needs the toolchains
//! (`deploy/local/guest-toolchains.sh install`; the test command installs them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    let text = text(&out);
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn wasmpilot(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmpilot"));
    cmd.current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    cmd
}

const HOARD: &str = r#"import { exportPhase, Outcome, PhaseWorker } from '@wasmpilot/guest';

/** Returns `spec.statusBytes` bytes of status info, or an output holding `spec.outputBytes`. */
export class Hoard extends PhaseWorker {
  sync(ctx, resource) {
    const { statusBytes, outputBytes } = resource.spec;
    if (outputBytes) {
      return Outcome.next('Done').output({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'hoard', namespace: 'default' },
        data: { blob: 'o'.repeat(outputBytes) },
      });
    }
    return Outcome.next('Done').status({ blob: 's'.repeat(statusBytes) });
  }
}

export const phaseWorker = exportPhase(Hoard);
"#;

const REACH: &str = r#"import { exportPhase, Outcome, PhaseWorker } from '@wasmpilot/guest';

/** Calls fetch(): caught when `spec.catch`, else the error leaves the worker. */
export class Reach extends PhaseWorker {
  sync(ctx, resource) {
    if (!resource.spec.catch) fetch('http://169.254.169.254/latest/meta-data/');
    try {
      fetch('http://169.254.169.254/latest/meta-data/');
      return Outcome.next('Done').status({ reached: true });
    } catch (err) {
      return Outcome.next('Done').status({ caught: `${err.name}: ${err.message}`, type: typeof fetch });
    }
  }
}

export const phaseWorker = exportPhase(Reach);
"#;

const BUG: &str = r#"import { exportPhase, Outcome, PhaseWorker } from '@wasmpilot/guest';

/** Recurses without end, directly or through Array.prototype.map's callbacks. */
function dive(n, viaMap) {
  return viaMap ? [n].map((m) => dive(m + 1, viaMap)) : dive(n + 1, viaMap) + 1;
}

/** A bug: reads a property of null, throws `spec.text` (no Error), or recurses without end. */
export class Bug extends PhaseWorker {
  sync(ctx, resource) {
    if (resource.spec.text) throw resource.spec.text;
    if (resource.spec.recurse) dive(0, resource.spec.recurse === 'map');
    return Outcome.next(null.nextPhase);
  }
}

export const phaseWorker = exportPhase(Bug);
"#;

struct Project {
    _work: tempfile::TempDir,
    dir: PathBuf,
    modules: PathBuf,
}

/// `wasmpilot init` with phases Hoard, Reach, Done and Bug; Hoard, Reach and Bug replaced by the
/// workers above, Hoard allowed `memory_mib`; built.
fn project(memory_mib: u32) -> Project {
    let work = tempfile::tempdir().expect("temp dir");
    run(
        "wasmpilot init",
        wasmpilot(work.path()).args([
            "init",
            "greedy",
            "--lang",
            "javascript",
            "--kind",
            "Greedy",
            "--group",
            "demo.io",
            "--phases",
            "Hoard,Reach,Done,Bug",
        ]),
    );
    let dir = work.path().join("greedy");
    std::fs::write(dir.join("workers/hoard/worker.js"), HOARD).expect("hoard");
    std::fs::write(dir.join("workers/reach/worker.js"), REACH).expect("reach");
    std::fs::write(dir.join("workers/bug/worker.js"), BUG).expect("bug");
    let manifest = dir.join("operator.yaml");
    let operator = std::fs::read_to_string(&manifest).expect("operator.yaml");
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(&operator).expect("operator.yaml");
    for phase in yaml["spec"]["phases"]
        .as_sequence_mut()
        .expect("spec.phases")
    {
        if phase["name"] == "Hoard" {
            phase["limits"] =
                serde_yaml::from_str(&format!("{{memoryMib: {memory_mib}}}")).expect("limits");
            phase["outputs"] =
                serde_yaml::from_str("[{apiVersion: v1, kind: ConfigMap}]").expect("outputs");
        }
    }
    std::fs::write(&manifest, serde_yaml::to_string(&yaml).expect("yaml")).expect("write");
    run(
        "npm install",
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir),
    );
    let built = run("wasmpilot build", wasmpilot(&dir).args(["build", "."]));
    let modules = built
        .lines()
        .find_map(|l| l.split_once(" into ").map(|(_, d)| PathBuf::from(d.trim())))
        .unwrap_or_else(|| panic!("no output directory in:\n{built}"));
    Project {
        _work: work,
        dir,
        modules,
    }
}

impl Project {
    /// `wasmpilot run-phase` of `phase` on a Greedy with `spec`: success and what it printed.
    fn run_phase(&self, phase: &str, spec: &str) -> (bool, String) {
        let resource = self.dir.join("resource.yaml");
        std::fs::write(
            &resource,
            format!(
                "apiVersion: demo.io/v1\nkind: Greedy\nmetadata: {{name: g, namespace: default}}\nspec: {spec}\n"
            ),
        )
        .expect("resource.yaml");
        let out = wasmpilot(&self.dir)
            .args(["run-phase", "--operator", "operator.yaml", "--module-dir"])
            .arg(&self.modules)
            .args(["--resource", "resource.yaml", "--phase", phase])
            .output()
            .expect("running wasmpilot run-phase");
        let printed = text(&out);
        eprintln!(
            "run-phase {phase} {spec}: {}",
            printed.lines().last().unwrap_or_default()
        );
        (out.status.success(), printed)
    }
}

#[test]
#[ignore = "needs the Python and JavaScript toolchains: deploy/local/test.sh installs them"]
fn a_javascript_decision_too_large_to_serialize_names_the_hosts_limit_and_the_engines_cause() {
    for memory_mib in [64, 512] {
        let project = project(memory_mib);
        // Within the worker's memory: the host measures the JSON, as for Rust and Python.
        let (ok, out) = project.run_phase("Hoard", "{statusBytes: 1048576}");
        assert!(!ok, "{out}");
        assert!(
            out.contains("the worker returned 1048587 bytes of status info, more than the limit of 262144 (raise it with the phase's limits.maxStatusKib, or keep less in the status)"),
            "memoryMib {memory_mib}, 1 MiB of status: {out}"
        );
        // 50 MB: the engine cannot build the text. Premise: it failed inside the worker (the
        // engine's words are there), and the host still names its own limit and the real size.
        let (ok, out) = project.run_phase("Hoard", "{statusBytes: 52428800}");
        assert!(!ok, "{out}");
        // The size is exact, or a lower bound when the engine could not even read the string it
        // holds (a rope, from `repeat`); for this ASCII status both are its size.
        let limit = "52428811 bytes of status info, more than the limit of 262144 (raise it with the phase's limits.maxStatusKib, or keep less in the status); the worker could not serialize it: ";
        assert!(
            out.contains(&format!("the worker returned {limit}"))
                || out.contains(&format!("the worker returned at least {limit}")),
            "memoryMib {memory_mib}, 50 MB of status: {out}"
        );
        assert!(!out.contains("undefined"), "the cause is named: {out}");
        let (ok, out) = project.run_phase("Hoard", "{outputBytes: 52428800}");
        assert!(!ok, "{out}");
        assert!(
            out.contains("bytes of outputs, more than the limit of 8388608; the worker could not serialize it: "),
            "memoryMib {memory_mib}, a 50 MB output: {out}"
        );
        assert!(!out.contains("undefined"), "the cause is named: {out}");
        if memory_mib == 64 {
            fetch_is_an_error_not_a_trap(&project);
            a_bug_traps_naming_its_class_message_and_line(&project);
        }
    }
}

fn fetch_is_an_error_not_a_trap(project: &Project) {
    let (ok, out) = project.run_phase("Reach", "{catch: true}");
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "TypeError: fetch() is not available in a wasmpilot worker: workers have no network"
        ),
        "the worker caught an error naming fetch and the network: {out}"
    );
    assert!(out.contains("type: function"), "{out}");
    let (ok, out) = project.run_phase("Reach", "{catch: false}");
    assert!(!ok, "{out}");
    assert!(
        out.contains("fetch() is not available in a wasmpilot worker"),
        "uncaught, the host's report names the error (a worker's bug traps, as a Rust panic does): {out}"
    );
}

/// The engine's report of an error thrown in the worker's global, after the SDK's line naming
/// its class; never the bindings' "invalid variant tag value `undefined`" (they took an error
/// from another global for a `worker-error` to send).
fn a_bug_traps_naming_its_class_message_and_line(project: &Project) {
    let out = trapped(project, "{}");
    assert!(
        out.contains("the worker threw TypeError:\ncan't access property \"nextPhase\" of null\nStack:\n  sync@"),
        "class, message and the worker's frame: {out}"
    );
    let out = trapped(project, "{text: no route}");
    assert!(
        out.contains("the worker threw no route\nStack:"),
        "the value thrown is named: {out}"
    );
    // A runaway recursion prints thousands of frames: the error's class and message stay, with
    // the first and last frames and how many went between.
    for how in ["direct", "map"] {
        let out = trapped(project, &format!("{{recurse: {how}}}"));
        assert!(
            // (`dive@` directly; through map's callback its arrow function first, `dive/<@`)
            out.contains("the worker threw InternalError:\ntoo much recursion\nStack:\n  dive"),
            "{how}: the error's class and message are kept: {out}"
        );
        assert!(
            out.contains(" frames dropped) …"),
            "{how}: the frames are bounded: {out}"
        );
    }
}

/// What `run-phase` of Bug printed on a Greedy with `spec`: a trap, without the bindings' own
/// failure.
fn trapped(project: &Project, spec: &str) -> String {
    let (ok, out) = project.run_phase("Bug", spec);
    assert!(!ok, "{out}");
    assert!(out.contains("the worker trapped"), "a bug traps: {out}");
    assert!(!out.contains("invalid variant tag"), "{out}");
    out
}
