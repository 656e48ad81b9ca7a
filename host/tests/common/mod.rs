//! Shared helpers for the host's integration tests: where the built guest components are.
#![allow(dead_code)]

use std::path::PathBuf;

/// `<target>/wasm32-wasip2/release` (`<target>` found from this test binary's location,
/// `<target>/debug/deps/<test>`), with every Rust guest component of the repository built there
/// (those missing are built on the first call); or `WASMPILOT_WASM_DIR`, as it is.
pub fn wasm_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("WASMPILOT_WASM_DIR") {
        return PathBuf::from(dir);
    }
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test binary path");
            let target = exe
                .ancestors()
                .nth(3)
                .expect("test binary lives in <target>/<profile>/deps");
            wasmpilot_runtime::mock_api_server::repository_guests_built(&repo_root(), target)
                .unwrap_or_else(|e| panic!("the guest components: {e:#}"))
        })
        .clone()
}

/// The bytes of a built component, e.g. `wasmpilot_test_scripted.wasm`.
pub fn component(file: &str) -> Vec<u8> {
    let path = wasm_dir().join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Where `deploy/local/guest-toolchains.sh install` put the pinned Python and JavaScript
/// toolchains: `WASMPILOT_TOOLCHAINS`, else `toolchains/` under `WASMPILOT_CACHE` (default
/// `~/.cache/wasmpilot`).
pub fn guest_toolchains() -> PathBuf {
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

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}
/// `wasmpilot replay <cases> --operator examples/autoroute/operator.yaml --module-dir <wasm dir>
/// <extra…>`: whether it passed, and what it printed (stdout, then stderr).
pub fn replay_autoroute(cases: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .arg("replay")
        .arg(cases)
        .arg("--operator")
        .arg(repo_root().join("examples/autoroute/operator.yaml"))
        .arg("--module-dir")
        .arg(wasm_dir())
        .args(extra)
        .output()
        .expect("running wasmpilot replay");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

pub mod autoroute;
pub mod captured_log;
pub mod cluster;
pub mod sharding;

/// The scripted test worker (`host/tests/guests/scripted`) compiled in `sandbox`: it does what
/// its request's `spec.phases.<phase>` says.
pub fn scripted_module(sandbox: &wasmpilot::sandbox::Sandbox) -> wasmpilot::sandbox::PhaseModule {
    let bytes = component("wasmpilot_test_scripted.wasm");
    let component = sandbox
        .compile(&bytes)
        .expect("scripted component compiles");
    sandbox
        .phase_module("sha256:test", &component)
        .expect("scripted component is a phase worker")
}

/// A request to the scripted worker of operator `scripted`, phase `Start` doing `step`.
pub fn scripted_request(step: serde_json::Value) -> wasmpilot::sandbox::SyncRequest {
    let resource = serde_json::json!({
        "apiVersion": "test.wasmpilot.io/v1", "kind": "Scripted",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {"phases": {"Start": step}}
    });
    wasmpilot::sandbox::SyncRequest {
        operator: "scripted".into(),
        phase: "Start".into(),
        resource: resource.to_string(),
        inputs: vec![],
        now: "2026-01-01T00:00:00Z".into(),
    }
}
