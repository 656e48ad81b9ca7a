//! The CLI fits the shell (issue 72, item 3): `wasmpilot version` names the build, the WIT
//! package and the wasmtime release (checked against `wit/` and `Cargo.lock`); completions for
//! bash, zsh and fish and man pages come from the command line's definition; `kubectl wasmpilot`
//! runs it once `wasmpilot kubectl-plugin <dir>` has linked it (no cluster needed: kubectl finds
//! plugins on PATH).

use std::process::Command;

fn wasmpilot(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .output()
        .expect("wasmpilot runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../").to_string() + path)
        .expect(path)
}

#[test]
fn version_names_the_build_the_wit_package_and_wasmtime() {
    let (ok, out, err) = wasmpilot(&["version"]);
    assert!(ok, "{err}");
    let wit = repo_file("wit/operator.wit");
    let package = wit
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))
        .expect("a package line")
        .trim_end_matches(';');
    let lock = repo_file("Cargo.lock");
    let wasmtime = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"wasmtime\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .expect("wasmtime in Cargo.lock")
        .trim_matches('"');
    assert!(
        out.contains(&format!("wasmpilot {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(out.contains(&format!("WIT package: {package}")), "{out}");
    assert!(out.contains(&format!("wasmtime: {wasmtime}")), "{out}");
}

#[test]
fn completions_cover_every_command_in_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let (ok, out, err) = wasmpilot(&["completions", shell]);
        assert!(ok, "{shell}: {err}");
        for command in [
            "run",
            "deploy",
            "grant",
            "simulate",
            "replay",
            "kubectl-plugin",
        ] {
            assert!(out.contains(command), "{shell} completes {command}");
        }
    }
    // bash parses the script it would source.
    let (_, script, _) = wasmpilot(&["completions", "bash"]);
    let checked = Command::new("bash")
        .args(["-n", "-c", &script])
        .status()
        .expect("bash");
    assert!(checked.success(), "the bash completion script parses");
}

#[test]
fn man_pages_are_written_for_each_command() {
    let dir = tempfile::tempdir().expect("a directory");
    let (ok, out, err) = wasmpilot(&["man", dir.path().to_str().expect("utf-8")]);
    assert!(ok, "{err}");
    assert!(out.contains("man pages"), "{out}");
    let main = std::fs::read_to_string(dir.path().join("wasmpilot.1")).expect("wasmpilot.1");
    assert!(main.contains(".TH") && main.contains("grant"), "{main}");
    let grant =
        std::fs::read_to_string(dir.path().join("wasmpilot-grant.1")).expect("wasmpilot-grant.1");
    assert!(grant.contains("output\\-namespace"), "{grant}");
}

#[test]
fn kubectl_runs_it_as_a_plugin() {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: no kubectl on this machine");
        return;
    }
    let dir = tempfile::tempdir().expect("a directory");
    let (ok, out, err) = wasmpilot(&["kubectl-plugin", dir.path().to_str().expect("utf-8")]);
    assert!(ok, "{err}");
    assert!(out.contains("kubectl-wasmpilot"), "{out}");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("PATH", &path)
            .output()
            .expect("kubectl")
    };
    let listed = run(&["plugin", "list"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("kubectl-wasmpilot"),
        "kubectl lists the plugin: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let version = run(&["wasmpilot", "version"]);
    assert!(
        version.status.success()
            && String::from_utf8_lossy(&version.stdout).contains("WIT package"),
        "kubectl wasmpilot version: {}",
        String::from_utf8_lossy(&version.stderr)
    );
    let help = run(&["wasmpilot", "--help"]);
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("Usage: kubectl wasmpilot"),
        "its help names the command as typed: {}",
        String::from_utf8_lossy(&help.stdout)
    );
}
