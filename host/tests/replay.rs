//! `wasmpilot replay` offline: a case recorded from the AutoRoute example's Syncing decision is
//! replayed against the same component (same), against a candidate that labels its Services
//! (different, naming the field; non-zero exit), and with that field declared `--expect`ed.

mod common;

use kube::api::DynamicObject;
use std::path::Path;
use wasmpilot::evidence::case::{CaseSource, DecisionCase, RecordedResult};
use wasmpilot::modules::ModuleCache;
use wasmpilot::offline::{self, ObjectsByKind};
use wasmpilot::pipeline::step::Samples;
use wasmpilot::sandbox::{Sandbox, SandboxLimits};

/// A case as the host records it: the Syncing request for the sample AutoRoute, decided by the
/// example's Syncing component.
async fn recorded_case(dir: &Path) -> std::path::PathBuf {
    let root = common::repo_root();
    let manifest = root.join("examples/autoroute/operator.yaml");
    let (_, def) = offline::load_operator(&manifest).unwrap();
    let docs = offline::read_documents(&root.join("examples/autoroute/sample.yaml")).unwrap();
    let resource: DynamicObject = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "AutoRoute")
            .cloned()
            .unwrap(),
    )
    .unwrap();
    let objects = ObjectsByKind::from_values(docs).unwrap();
    let phase = def.phase("Syncing").unwrap();
    let modules = ModuleCache::new(
        Sandbox::new(SandboxLimits::default()).unwrap(),
        None,
        Some(common::wasm_dir()),
    );
    let namespaced = offline::output_scopes(&def, &[offline::crds_beside(&manifest)]).unwrap();
    let operator = offline::OfflineOperator {
        modules: &modules,
        definition: &def,
        namespaced: &namespaced,
    };
    let call = operator
        .call(
            &resource,
            phase,
            &objects,
            Samples::Given(Vec::new()),
            "2026-11-24T06:00:00Z",
        )
        .await
        .unwrap();
    let (request, decided) = (call.request, call.decided);
    let result = RecordedResult::of(&decided);
    let RecordedResult::Decided(decision) = &result else {
        panic!("the sample's Syncing decides: {result:?}");
    };
    assert!(
        decision.outputs.iter().any(|o| o["kind"] == "Service"),
        "premise: the decision routes a Service"
    );
    let case = DecisionCase::new(
        CaseSource::Recorded,
        "default/example".into(),
        &request,
        &call.module,
        result,
        None,
    )
    .unwrap();
    assert!(case.input_hash_reproduces());
    let path = dir.join("decisions.jsonl");
    std::fs::write(&path, serde_json::to_string(&case).unwrap() + "\n").unwrap();
    path
}

use common::replay_autoroute as replay;

#[tokio::test]
async fn replay_reports_same_different_and_expected() {
    let dir = tempfile::tempdir().unwrap();
    let cases = recorded_case(dir.path()).await;

    let (ok, text) = replay(&cases, &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("1 cases: 1 same, 0 different (0 expected), 0 errors"),
        "{text}"
    );

    let candidate = common::wasm_dir().join("wasmpilot_test_relabeled.wasm");
    let module = format!("Syncing={}", candidate.display());
    let (ok, text) = replay(&cases, &["--module", &module]);
    assert!(!ok, "a difference must fail the replay: {text}");
    assert!(text.contains("different default/example Syncing"), "{text}");
    assert!(
        text.contains(r#"+ outputs["Service/backend"].metadata.labels.candidate: "relabeled""#),
        "{text}"
    );
    assert!(text.contains("1 of 1 cases decided differently"), "{text}");

    let (ok, text) = replay(
        &cases,
        &[
            "--module",
            &module,
            "--expect",
            "outputs[*].metadata.labels.candidate",
        ],
    );
    assert!(ok, "{text}");
    assert!(text.contains("1 different (1 expected)"), "{text}");

    // A case edited after recording is replayed as it is, and said to be edited.
    let edited = dir.path().join("edited.jsonl");
    let text = std::fs::read_to_string(&cases).unwrap();
    std::fs::write(&edited, text.replacen("frontend", "frontdoor", 1)).unwrap();
    let (_, text) = replay(&edited, &[]);
    assert!(
        text.contains("is not the one recorded as sha256:"),
        "{text}"
    );

    // Other operators' cases are skipped; unknown files are refused with the line.
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "{\"format\": \"something else\"}\n").unwrap();
    let (ok, text) = replay(&garbage, &[]);
    assert!(!ok);
    assert!(text.contains("garbage.jsonl, line 1"), "{text}");
}
