//! The typed Python and TypeScript APIs `wasmpilot generate` writes: the AutoRoute examples'
//! are current, their workers pass `mypy --strict` / `tsc --noEmit`, and an output kind or a
//! move operator.yaml does not declare fails those checkers, naming the problem.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NEEDS_TOOLCHAINS: &str = "deploy/local/guest-toolchains.sh install";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn wasmpilot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .output()
        .expect("run wasmpilot")
}

fn generate(dir: &Path, check: bool) -> Output {
    let dir = dir.to_str().expect("utf-8 path");
    wasmpilot(&if check {
        vec!["generate", dir, "--check"]
    } else {
        vec!["generate", dir]
    })
}

/// A copy of `examples/<example>` laid out as in the repository (the SDKs beside it as links),
/// so its relative paths to the SDKs still resolve.
fn copy_example(example: &str) -> (tempfile::TempDir, PathBuf) {
    let root = common::repo_root();
    let work = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(work.path().join("examples")).expect("mkdir");
    for sdk in ["guest-sdk-python", "guest-sdk-js"] {
        std::os::unix::fs::symlink(root.join(sdk), work.path().join(sdk)).expect("link the SDK");
    }
    let status = Command::new("cp")
        .arg("-a")
        .arg(root.join("examples").join(example))
        .arg(work.path().join("examples"))
        .status()
        .expect("cp");
    assert!(status.success(), "copying examples/{example}");
    let dir = work.path().join("examples").join(example);
    (work, dir)
}

/// Replaces `from` (which must be there) with `to` in `dir/file`.
fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let before = std::fs::read_to_string(&path).expect("read");
    assert!(before.contains(from), "{file} has no `{from}`");
    std::fs::write(&path, before.replacen(from, to, 1)).expect("write");
}

/// Syncing may move only to Ready (and stay): `next: [Ready]` in the copy's operator.yaml,
/// its API generated again.
fn declare_syncing_next_ready(dir: &Path) {
    edit(
        dir,
        "operator.yaml",
        "        path: autoroute_syncing.wasm\n",
        "        path: autoroute_syncing.wasm\n    next: [Ready]\n",
    );
    let out = generate(dir, false);
    assert!(out.status.success(), "generate: {}", text(&out));
}

#[test]
fn the_examples_typed_apis_are_current() {
    let root = common::repo_root();
    for example in ["autoroute-python", "autoroute-js"] {
        let out = generate(&root.join("examples").join(example), true);
        assert!(
            out.status.success(),
            "examples/{example}: {}\nregenerate with `wasmpilot generate examples/{example}`",
            text(&out)
        );
    }
}

#[test]
fn generate_check_reports_a_stale_python_api() {
    let (_work, dir) = copy_example("autoroute-python");
    declare_syncing_next_ready(&dir);
    assert!(generate(&dir, true).status.success());
    edit(&dir, "operator.yaml", "    next: [Ready]\n", "");
    let out = generate(&dir, true);
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains("stale") && said.contains("shared/phases.py"),
        "{said}"
    );
    // Not its own file: generate refuses to overwrite it.
    std::fs::write(dir.join("shared/phases.py"), "# mine\n").expect("write");
    let out = generate(&dir, false);
    assert!(!out.status.success());
    assert!(text(&out).contains("was not written by `wasmpilot generate`"));
}

/// `mypy --strict` (the example's settings in its pyproject.toml) on one worker.
fn mypy(dir: &Path, worker: &str, cache: &Path) -> Output {
    let python = common::guest_toolchains().join("python/bin/python");
    assert!(
        python.is_file(),
        "no Python toolchain at {}: {NEEDS_TOOLCHAINS}",
        python.display()
    );
    Command::new(python)
        .args(["-m", "mypy", "--strict", "--cache-dir"])
        .arg(cache)
        .arg(format!("workers/{worker}/app.py"))
        .current_dir(dir)
        .output()
        .expect("run mypy")
}

#[test]
#[ignore = "needs the Python and JavaScript toolchains: deploy/local/test.sh installs them"]
fn python_workers_pass_mypy_strict_and_undeclared_outputs_and_moves_fail_it() {
    let cache = tempfile::tempdir().expect("temp dir");
    let example = common::repo_root().join("examples/autoroute-python");
    for worker in ["initializing", "syncing", "ready"] {
        let out = mypy(&example, worker, cache.path());
        assert!(out.status.success(), "mypy {worker}:\n{}", text(&out));
    }

    // An output kind Syncing does not declare.
    let (_work, dir) = copy_example("autoroute-python");
    edit(
        &dir,
        "workers/syncing/app.py",
        "outcome.service(service)",
        "outcome.config_map({\"metadata\": {\"name\": \"settings\"}}).service(service)",
    );
    let out = mypy(&dir, "syncing", cache.path());
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("\"SyncingOutcome\" has no attribute \"config_map\""),
        "{said}"
    );

    // A move Syncing does not declare, once operator.yaml declares `next: [Ready]`: the copy
    // passes before the worker moves elsewhere.
    let (_work, dir) = copy_example("autoroute-python");
    declare_syncing_next_ready(&dir);
    let out = mypy(&dir, "syncing", cache.path());
    assert!(out.status.success(), "{}", text(&out));
    edit(
        &dir,
        "workers/syncing/app.py",
        "SyncingOutcome.ready()",
        "SyncingOutcome.initializing()",
    );
    let out = mypy(&dir, "syncing", cache.path());
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("\"type[SyncingOutcome]\" has no attribute \"initializing\""),
        "{said}"
    );
    edit(
        &dir,
        "workers/syncing/app.py",
        "SyncingOutcome.initializing()",
        "SyncingOutcome.next(\"Initializing\")",
    );
    let out = mypy(&dir, "syncing", cache.path());
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("Argument 1 to \"next\" of \"SyncingOutcome\" has incompatible type \"Literal['Initializing']\"; expected \"Literal['Syncing', 'Ready']\""),
        "{said}"
    );
}

/// `tsc --noEmit` with the example's tsconfig.json (checkJs).
fn tsc(dir: &Path) -> Output {
    let tsc = common::guest_toolchains().join("js/node_modules/.bin/tsc");
    assert!(
        tsc.is_file(),
        "no TypeScript at {}: {NEEDS_TOOLCHAINS}",
        tsc.display()
    );
    if !dir.join("node_modules/@wasmpilot/guest").exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir)
            .status()
            .expect("npm install");
        assert!(status.success(), "npm install in {}", dir.display());
    }
    Command::new(tsc)
        .args(["--noEmit", "-p", "tsconfig.json"])
        .current_dir(dir)
        .output()
        .expect("run tsc")
}

#[test]
#[ignore = "needs the Python and JavaScript toolchains: deploy/local/test.sh installs them"]
fn javascript_workers_pass_tsc_and_undeclared_outputs_and_moves_fail_it() {
    let example = common::repo_root().join("examples/autoroute-js");
    let out = tsc(&example);
    assert!(out.status.success(), "tsc:\n{}", text(&out));

    // An output kind Syncing does not declare.
    let (_work, dir) = copy_example("autoroute-js");
    edit(
        &dir,
        "workers/syncing/worker.js",
        "outcome.service(service)",
        "outcome.configMap({ metadata: { name: 'settings' } }).service(service)",
    );
    let out = tsc(&dir);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("error TS2339: Property 'configMap' does not exist on type 'SyncingOutcome'"),
        "{said}"
    );

    // A move Syncing does not declare, once operator.yaml declares `next: [Ready]`.
    let (_work, dir) = copy_example("autoroute-js");
    declare_syncing_next_ready(&dir);
    let out = tsc(&dir);
    assert!(out.status.success(), "{}", text(&out));
    edit(
        &dir,
        "workers/syncing/worker.js",
        "SyncingOutcome.ready()",
        "SyncingOutcome.initializing()",
    );
    let out = tsc(&dir);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("Property 'initializing' does not exist on type 'typeof SyncingOutcome'"),
        "{said}"
    );
    edit(
        &dir,
        "workers/syncing/worker.js",
        "SyncingOutcome.initializing()",
        "SyncingOutcome.next('Initializing')",
    );
    let out = tsc(&dir);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("Argument of type '\"Initializing\"' is not assignable to parameter of type 'SyncingNext'"),
        "{said}"
    );

    // Another phase's outcome: each phase's builder is its own type.
    let (_work, dir) = copy_example("autoroute-js");
    edit(
        &dir,
        "workers/ready/worker.js",
        "return ReadyOutcome.stay();",
        "return SyncingOutcome.stay();",
    );
    edit(
        &dir,
        "workers/ready/worker.js",
        "import { ReadyOutcome, ReadyWorker }",
        "import { ReadyOutcome, ReadyWorker, SyncingOutcome }",
    );
    let out = tsc(&dir);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("Type 'SyncingOutcome' is not assignable to type 'ReadyOutcome'"),
        "{said}"
    );
}
