//! Compiles in a child process of the `wasmpilot` binary (no cluster): the artifact loads in the
//! sandbox's engine, a compile past its timeout is killed, a compile past its memory limit ends.

mod common;

use std::time::{Duration, Instant};
use wasmpilot::modules::compile_process::{CompileProcess, DEFAULT_MEMORY_LIMIT_MIB};
use wasmpilot::sandbox::{LoadError, Sandbox};

fn process(memory_limit_mib: u64) -> CompileProcess {
    CompileProcess::of_program(env!("CARGO_BIN_EXE_wasmpilot").into(), memory_limit_mib)
}

/// A component whose one core module has `functions` functions of `adds` additions each: as
/// slow and as hungry to compile as wanted.
fn big_component(functions: usize, adds: usize) -> Vec<u8> {
    let body = "local.get 0 i32.const 7 i32.add local.set 0 ".repeat(adds);
    let funcs: String = (0..functions)
        .map(|i| format!("(func (export \"f{i}\") (param i32) (result i32) {body} local.get 0)\n"))
        .collect();
    wat::parse_str(format!("(component (core module {funcs}))")).expect("valid component text")
}

/// The tests of this file run one at a time: each counts this process's compile children and
/// times compiles, which another test's compile running alongside would falsify.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn message(e: LoadError) -> String {
    e.to_string()
}

/// The compile children of this process that are running now.
fn compile_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // pid (comm) state ppid …: the comm may hold spaces, so split after its ')'.
        let ppid = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .to_string();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let is_compile = String::from_utf8_lossy(&cmdline).contains("__compile-component");
        (ppid == me && is_compile).then_some(pid)
    })
    .collect()
}

#[tokio::test]
async fn a_worker_compiled_in_a_child_runs_in_the_sandbox() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bytes = common::component("wasmpilot_test_scripted.wasm");
    let artifact = process(DEFAULT_MEMORY_LIMIT_MIB)
        .precompile(bytes)
        .await
        .expect("compiled in a child");
    let sandbox = Sandbox::new(Default::default()).expect("a sandbox");
    let component = wasmpilot::modules::compile_cache::load_artifact(sandbox.engine(), &artifact)
        .expect("the sandbox's engine loads what the child compiled");
    sandbox
        .phase_module("sha256:test", &component)
        .expect("it links as a phase worker");
}

#[tokio::test]
async fn a_component_that_does_not_compile_is_reported_from_the_child() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let refused = |bytes: &'static [u8]| async move {
        let e = process(DEFAULT_MEMORY_LIMIT_MIB)
            .precompile(bytes.to_vec())
            .await
            .expect_err("not Wasm");
        message(e)
    };
    let text = refused(b"\0asm not a component").await;
    assert!(text.contains("not a valid Wasm component"), "{text}");

    // Random bytes: wasmtime prints the magic numbers as byte arrays over many lines; the
    // Condition gets them on one line.
    let text = refused(b"PK\x03\x04 a zip, say").await;
    assert!(text.contains("magic header not detected"), "{text}");
    assert!(text.contains("expected=[0x0, 0x61, 0x73, 0x6d]"), "{text}");
    assert!(
        !text.contains('\n') && !text.contains(" / ") && !text.contains("  "),
        "one line: {text}"
    );
}

#[tokio::test]
async fn a_compile_past_its_timeout_is_killed_and_the_next_one_runs() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let slow = big_component(150, 2_000);
    // The premise: this component takes longer to compile than the timeout below.
    let started = Instant::now();
    process(DEFAULT_MEMORY_LIMIT_MIB)
        .precompile(slow.clone())
        .await
        .expect("compiles without a timeout");
    let full = started.elapsed();
    eprintln!("the slow component compiles in {full:?} in a child");
    assert!(
        full > Duration::from_millis(1500),
        "the slow component compiled in {full:?}: too fast to show a timeout"
    );

    let timeout = full / 4;
    let stopping = process(DEFAULT_MEMORY_LIMIT_MIB).with_timeout(timeout);
    let compiling = tokio::spawn(async move { stopping.precompile(slow).await });
    tokio::time::sleep(timeout / 2).await;
    assert_eq!(
        compile_children().len(),
        1,
        "a compile child runs while the compile is under way"
    );
    let started = Instant::now();
    let e = compiling.await.expect("joined").expect_err("timed out");
    let text = message(e);
    assert!(
        text.contains("compiling stopped: it took longer than") && text.contains("killed"),
        "{text}"
    );
    assert!(
        started.elapsed() < full / 2,
        "the error came {:?} after the timeout's middle, not at the timeout",
        started.elapsed()
    );
    assert!(
        compile_children().is_empty(),
        "the timed-out compile child was killed and reaped"
    );

    process(DEFAULT_MEMORY_LIMIT_MIB)
        .precompile(common::component("wasmpilot_test_scripted.wasm"))
        .await
        .expect("the next compile runs");
}

#[tokio::test]
async fn a_compile_past_its_memory_limit_ends_with_the_limit_named() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let hungry = big_component(60, 2_000);
    process(DEFAULT_MEMORY_LIMIT_MIB)
        .precompile(hungry.clone())
        .await
        .expect("compiles within the default limit");
    let e = process(24)
        .precompile(hungry)
        .await
        .expect_err("does not compile in 24 MiB");
    let text = message(e);
    eprintln!("{text}");
    assert!(
        text.contains("compiling stopped") && text.contains("limited to 24 MiB"),
        "{text}"
    );
}

/// How long a small component takes to compile (it then fails to link: it is no worker) while a
/// slow module's compile, started just before it, holds the compile slot: with the compile in a
/// thread, or in a process whose timeout is `timeout`.
async fn wait_behind_a_slow_compile(in_process: bool, timeout: Duration) -> Duration {
    use wasmpilot::crd::{FileModule, ModuleRef};
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("slow.wasm"), big_component(150, 2_000)).expect("written");
    let small = wat::parse_str("(component (core module (func (export \"f\"))))").expect("valid");
    std::fs::write(dir.path().join("small.wasm"), small).expect("written");
    let file = |path: &str| ModuleRef {
        file: Some(FileModule {
            path: path.into(),
            sha256: None,
        }),
        ..Default::default()
    };
    let sandbox = Sandbox::new(Default::default()).expect("a sandbox");
    let modules = std::sync::Arc::new(
        wasmpilot::modules::ModuleCache::new(sandbox, None, Some(dir.path().to_path_buf()))
            .compiling_in(
                in_process.then(|| process(DEFAULT_MEMORY_LIMIT_MIB).with_timeout(timeout)),
            ),
    );
    let slow = {
        let modules = modules.clone();
        let r = file("slow.wasm");
        tokio::spawn(async move { modules.phase("test", &r).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let linked = modules.phase("test", &file("small.wasm")).await.map(|_| ());
    let waited = started.elapsed();
    let text = linked.expect_err("no worker").to_string();
    assert!(
        text.contains("does not fit"),
        "compiled, then refused as a worker: {text}"
    );
    let slow = slow.await.expect("joined");
    if in_process {
        let text = slow.expect_err("stopped at its timeout").to_string();
        assert!(text.contains("compiling stopped"), "{text}");
    }
    waited
}

#[tokio::test]
async fn a_module_stopped_at_its_compile_timeout_does_not_hold_up_the_next() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    // The premise: compiled in a thread, the slow module holds the slot until it is done.
    let in_thread = wait_behind_a_slow_compile(false, Duration::ZERO).await;
    let in_process = wait_behind_a_slow_compile(true, in_thread / 5).await;
    eprintln!("a small component waited {in_thread:?} behind a thread's compile, {in_process:?} behind a killed process's");
    assert!(
        in_thread > Duration::from_millis(1500),
        "the slow compile held the slot only {in_thread:?}: too short to show anything"
    );
    assert!(
        in_process < in_thread * 2 / 3,
        "behind a compile process stopped at {:?}, the next module waited {in_process:?} (behind a thread: {in_thread:?})",
        in_thread / 5
    );
}

/// One operator loading many modules that compile slowly delays another operator's module by
/// about one of its compiles, not all: each operator loads one module at a time past the cache,
/// and the compile slot goes to the operators in turn.
#[tokio::test]
async fn an_operators_many_compiles_do_not_hold_up_anothers() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    use std::sync::{Arc, Mutex};
    use wasmpilot::crd::{FileModule, ModuleRef};
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Three distinct slow modules (their digests differ) and a small one.
    for (i, functions) in [60, 61, 62].into_iter().enumerate() {
        std::fs::write(
            dir.path().join(format!("busy-{i}.wasm")),
            big_component(functions, 2_000),
        )
        .expect("written");
    }
    let small = wat::parse_str("(component (core module (func (export \"g\"))))").expect("valid");
    std::fs::write(dir.path().join("small.wasm"), small).expect("written");
    let file = |path: String| ModuleRef {
        file: Some(FileModule { path, sha256: None }),
        ..Default::default()
    };
    let sandbox = Sandbox::new(Default::default()).expect("a sandbox");
    let modules = Arc::new(wasmpilot::modules::ModuleCache::new(
        sandbox,
        None,
        Some(dir.path().to_path_buf()),
    ));
    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    let load = |operator: &'static str, path: String| {
        let (modules, done) = (modules.clone(), done.clone());
        tokio::spawn(async move {
            // Compiled, then refused as a worker (none of them is one): either way, loaded.
            let _ = modules.phase(operator, &file(path.clone())).await;
            done.lock().expect("the order").push(path);
        })
    };
    // The busy operator asks for all three at once, as an operator's phases load.
    let busy: Vec<_> = (0..3)
        .map(|i| load("busy", format!("busy-{i}.wasm")))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = load("other", "small.wasm".into());
    other.await.expect("joined");
    for b in busy {
        b.await.expect("joined");
    }
    let order = done.lock().expect("the order").clone();
    let position = order.iter().position(|p| p == "small.wasm");
    // First come, first served, it would be last, behind all three.
    assert!(
        position.is_some_and(|p| p <= 1),
        "the other operator's module waited for more than the busy operator's compile running: {order:?}"
    );
}
