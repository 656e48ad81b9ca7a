//! The typed phase APIs committed in the examples are what `wasmpilot generate` writes from
//! their operator.yaml (a stale one fails here, as the CRD drift tests do); `generate --check`
//! reports staleness, `generate` rewrites only its own file and never a user's.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use wasmpilot::authoring::generate::{format_rust, render, GENERATED_HEADER, GENERATED_PATH};
use wasmpilot::offline::load_operator;

fn wasmpilot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .output()
        .expect("run wasmpilot")
}

fn generated_for(dir: &Path) -> String {
    let (op, def) = load_operator(&dir.join("operator.yaml")).expect("operator.yaml");
    format_rust(&render(&op, &def).expect("render")).expect("rustfmt")
}

#[test]
fn every_examples_typed_api_is_current() {
    let root = common::repo_root();
    for example in ["autoroute", "canary", "myownshell"] {
        let dir = root.join("examples").join(example);
        let committed = std::fs::read_to_string(dir.join(GENERATED_PATH)).expect("phases.rs");
        assert!(
            committed == generated_for(&dir),
            "examples/{example}/{GENERATED_PATH} is stale; regenerate it with\n  wasmpilot generate examples/{example} --no-crd"
        );
    }
}

#[test]
fn check_reports_stale_code_and_generate_rewrites_only_its_own_file() {
    let root = common::repo_root();
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();
    std::fs::create_dir_all(dir.join("types/src")).expect("mkdir");
    let operator =
        std::fs::read_to_string(root.join("examples/myownshell/operator.yaml")).expect("read");
    std::fs::write(dir.join("operator.yaml"), &operator).expect("write");
    let out = dir.join(GENERATED_PATH);
    let dir_arg = dir.to_str().expect("utf-8 path");

    // Missing: --check fails, generate writes it, --check passes.
    let check = wasmpilot(&["generate", dir_arg, "--check", "--no-crd"]);
    assert!(!check.status.success(), "a missing file is stale");
    assert!(wasmpilot(&["generate", dir_arg, "--no-crd"])
        .status
        .success());
    assert!(wasmpilot(&["generate", dir_arg, "--check", "--no-crd"])
        .status
        .success());
    let before = std::fs::read_to_string(&out).expect("generated");
    assert!(before.starts_with(GENERATED_HEADER));

    // A new input in operator.yaml: stale until generated again; the accessor is typed.
    let with_input = operator.replace(
        "    next: [Ready]\n",
        "    inputs:\n    - name: shellConfig\n      apiVersion: v1\n      kind: ConfigMap\n    next: [Ready]\n",
    );
    assert_ne!(with_input, operator, "the fixture must change");
    std::fs::write(dir.join("operator.yaml"), &with_input).expect("write");
    let check = wasmpilot(&["generate", dir_arg, "--check", "--no-crd"]);
    assert!(!check.status.success());
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        stderr.contains("stale") && stderr.contains("phases.rs"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).expect("read"),
        before,
        "--check writes nothing"
    );
    assert!(wasmpilot(&["generate", dir_arg, "--no-crd"])
        .status
        .success());
    let after = std::fs::read_to_string(&out).expect("read");
    assert!(
        after.contains("pub fn shell_config(")
            && after.contains("wasmpilot_guest::k8s_openapi::api::core::v1::ConfigMap"),
        "{after}"
    );

    // A file of the user's at that path is never overwritten.
    std::fs::write(&out, "// my own code\n").expect("write");
    let refused = wasmpilot(&["generate", dir_arg, "--no-crd"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not written by `wasmpilot generate`")
    );
    assert_eq!(
        std::fs::read_to_string(&out).expect("read"),
        "// my own code\n"
    );
}

#[test]
fn names_that_cannot_be_identifiers_are_refused_naming_the_field() {
    let root = common::repo_root();
    let work = tempfile::tempdir().expect("tempdir");
    let operator = std::fs::read_to_string(root.join("examples/autoroute/operator.yaml"))
        .expect("read")
        .replace("- name: services\n", "- name: deployments-\n");
    std::fs::write(work.path().join("operator.yaml"), operator).expect("write");
    let run = wasmpilot(&["generate", work.path().to_str().expect("utf-8"), "--no-crd"]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("spec.phases[2].inputs[1].name: `deployments-` and `deployments` both become `deployments`"),
        "{stderr}"
    );
}
