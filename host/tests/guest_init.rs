//! `wasmpilot init --lang python|javascript` as a user runs it, outside any cargo workspace:
//! the scaffold's native tests pass, `wasmpilot build` makes a component per phase with the
//! pinned toolchain, and `wasmpilot simulate` runs them to a stop through the host's offline
//! path. Needs the toolchains (`deploy/local/guest-toolchains.sh install`; the test command
//! installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn toolchains() -> PathBuf {
    std::env::var_os("WASMPILOT_TOOLCHAINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("WASMPILOT_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/wasmpilot")
                });
            cache.join("toolchains")
        })
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

fn wasmpilot(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmpilot"));
    cmd.current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    cmd
}

/// init, native tests, build, simulate for one language.
fn scaffold_build_simulate(lang: &str, native_tests: impl Fn(&Path) -> Command) {
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("backup");
    run(
        "wasmpilot init",
        wasmpilot(work.path()).args([
            "init",
            "backup",
            "--lang",
            lang,
            "--kind",
            "Backup",
            "--group",
            "demo.io",
            "--phases",
            "Pending,Running,Done",
        ]),
    );
    assert!(
        !dir.join("Cargo.toml").exists(),
        "a {lang} project has no cargo workspace"
    );
    let tests = run(&format!("{lang} native tests"), &mut native_tests(&dir));
    assert!(
        tests.contains("3 passed") || tests.contains("# pass 3"),
        "{tests}"
    );

    let built = run("wasmpilot build", wasmpilot(&dir).args(["build", "."]));
    for (phase, file) in [
        ("Pending", "backup_pending.wasm"),
        ("Running", "backup_running.wasm"),
        ("Done", "backup_done.wasm"),
    ] {
        assert!(
            built
                .lines()
                .any(|l| l.contains(phase) && l.contains(file) && l.contains("sha256:")),
            "{file} for {phase} in:\n{built}"
        );
    }
    let simulated = run(
        "wasmpilot simulate",
        wasmpilot(&dir).args(["simulate", ".", "--resource", "sample.yaml"]),
    );
    assert!(simulated.contains("phase: Done"), "{simulated}");
    assert!(simulated.contains("stop: converged"), "{simulated}");

    finalizer_reads_its_inputs(lang, &dir);
}

/// A finalizer added to the scaffold, declaring an input: built into the `finalizer` world with
/// the pinned toolchain, it reads the objects the host selects for it (offline, as on deletion).
fn finalizer_reads_its_inputs(lang: &str, dir: &Path) {
    let worker = dir.join("workers/cleanup");
    std::fs::create_dir_all(&worker).expect("workers/cleanup");
    if lang == "python" {
        std::fs::write(
            worker.join("app.py"),
            r#"import wasmpilot_guest as guest


class Cleanup(guest.FinalizerWorker):
    def finalize(self, ctx, resource, inputs):
        locks = [o["metadata"]["name"] for o in inputs.list("locks")]
        ctx.info("releasing", locks=",".join(locks))
        return guest.Finalized.done().status({"releasedLocks": locks})


FinalizerWorker = guest.export_finalizer(Cleanup)
"#,
        )
        .expect("app.py");
    } else {
        std::fs::write(
            worker.join("worker.js"),
            r#"import { exportFinalizer, Finalized, FinalizerWorker } from '@wasmpilot/guest';

export class Cleanup extends FinalizerWorker {
  finalize(ctx, resource, inputs) {
    const locks = inputs.list('locks').map((o) => o.metadata.name);
    ctx.info('releasing', { locks: locks.join(',') });
    return Finalized.done().status({ releasedLocks: locks });
  }
}

export const finalizerWorker = exportFinalizer(Cleanup);
"#,
        )
        .expect("worker.js");
    }
    let manifest = dir.join("operator.yaml");
    let mut operator = std::fs::read_to_string(&manifest).expect("operator.yaml");
    operator.push_str(
        "  finalizer:\n    module:\n      file:\n        path: backup_cleanup.wasm\n    inputs:\n      - {name: locks, apiVersion: v1, kind: ConfigMap, matchLabels: {lock: backup}}\n",
    );
    std::fs::write(&manifest, operator).expect("operator.yaml with a finalizer");
    let built = run("wasmpilot build", wasmpilot(dir).args(["build", "."]));
    assert!(built.contains("backup_cleanup.wasm"), "{built}");

    let objects = dir.join("locks.yaml");
    std::fs::write(
        &objects,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, namespace: default, labels: {lock: backup}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated, namespace: default, labels: {lock: other}}\n",
    )
    .expect("locks.yaml");
    // "built N components in Xs into <dir>"
    let module_dir = built
        .lines()
        .find_map(|l| l.split_once(" into ").map(|(_, d)| PathBuf::from(d.trim())))
        .unwrap_or_else(|| panic!("no output directory in:\n{built}"));
    let out = wasmpilot(dir)
        .args(["run-phase", "--finalizer", "--operator", "operator.yaml"])
        .arg("--module-dir")
        .arg(&module_dir)
        .args(["--resource", "sample.yaml", "--objects", "locks.yaml"])
        .output()
        .expect("running wasmpilot run-phase --finalizer");
    let finalized = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "run-phase --finalizer failed:\n{finalized}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_yaml::from_str(&finalized)
        .unwrap_or_else(|e| panic!("YAML from run-phase: {e}\n{finalized}"));
    assert_eq!(v["phase"], "finalizer", "{finalized}");
    assert_eq!(v["done"], true, "{finalized}");
    assert_eq!(
        v["statusInfo"]["releasedLocks"],
        serde_json::json!(["held"]),
        "the {lang} finalizer got exactly the selected input objects: {finalized}"
    );
}

#[test]
#[ignore = "needs the Python and JavaScript toolchains: deploy/local/test.sh installs them"]
fn a_python_project_from_init_builds_and_simulates() {
    let python = toolchains().join("python/bin/python");
    assert!(
        python.is_file(),
        "no Python toolchain at {}: deploy/local/guest-toolchains.sh install",
        python.display()
    );
    scaffold_build_simulate("python", |dir| {
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "pytest", "-q"]).current_dir(dir);
        cmd
    });
}

#[test]
#[ignore = "needs the Python and JavaScript toolchains: deploy/local/test.sh installs them"]
fn a_javascript_project_from_init_builds_and_simulates() {
    scaffold_build_simulate("javascript", |dir| {
        run(
            "npm install",
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(dir),
        );
        let mut cmd = Command::new("node");
        cmd.args(["--test", "test/"]).current_dir(dir);
        cmd
    });
}
