//! One table, three languages: every AutoRoute case in
//! `examples/autoroute/workers/testdata/cases/` runs through the host's offline path
//! (`offline::run_phase`: the definition, input gathering, sandbox and output checks the
//! controller uses) with the Rust, Python and JavaScript components; the decisions (module
//! digest aside) or the errors must be identical.
//!
//! Needs the Python and JavaScript components: `deploy/local/build-guest-examples.sh` (the test
//! command runs it) builds them into `<target>/guest-components/`.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use wasmpilot::offline::{run_phase, OfflineRun};
use wasmpilot::sandbox::SandboxLimits;

const NOW: &str = "2025-01-01T00:00:00Z";

struct Language {
    name: &'static str,
    operator: PathBuf,
    modules: PathBuf,
}

fn languages() -> Vec<Language> {
    let root = common::repo_root();
    let wasm_dir = common::wasm_dir();
    let target = wasm_dir
        .parent()
        .and_then(Path::parent)
        .expect("<target>/wasm32-wasip2/release")
        .to_path_buf();
    let guest = |example: &str| target.join("guest-components").join(example);
    let langs = vec![
        Language {
            name: "Rust",
            operator: root.join("examples/autoroute/operator.yaml"),
            modules: wasm_dir,
        },
        Language {
            name: "Python",
            operator: root.join("examples/autoroute-python/operator.yaml"),
            modules: guest("autoroute-python"),
        },
        Language {
            name: "JavaScript",
            operator: root.join("examples/autoroute-js/operator.yaml"),
            modules: guest("autoroute-js"),
        },
    ];
    for l in &langs {
        let built = l.modules.join("autoroute_syncing.wasm");
        assert!(
            built.is_file(),
            "{}: no {} component at {}. Build them first: deploy/local/build-guest-examples.sh (the test command does)",
            l.name,
            l.name,
            built.display()
        );
    }
    langs
}

/// The cases: each AutoRoute file and the objects its `# objects:` line names, concatenated.
fn cases(work: &Path) -> Vec<(String, PathBuf, Option<PathBuf>)> {
    let testdata = common::repo_root().join("examples/autoroute/workers/testdata");
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata.join("cases"))
        .expect("testdata/cases")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".yaml") && !name.ends_with(".objects.yaml")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|case| {
            let name = case
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&case).expect("case");
            let objects = text
                .lines()
                .find_map(|l| l.strip_prefix("# objects:"))
                .map(|list| {
                    let joined: Vec<String> = list
                        .split_whitespace()
                        .map(|f| std::fs::read_to_string(testdata.join(f)).expect("objects file"))
                        .collect();
                    let path = work.join(format!("{name}.objects.yaml"));
                    std::fs::write(&path, joined.join("\n---\n")).expect("objects");
                    path
                });
            (name, case, objects)
        })
        .collect()
}

/// A decision without its module digest, or the error with digests blanked.
async fn decide(lang: &Language, case: &Path, objects: Option<&PathBuf>) -> Value {
    let run = OfflineRun {
        operator: lang.operator.clone(),
        module_dir: lang.modules.clone(),
        resource: case.to_path_buf(),
        objects: objects.cloned(),
        phase: None,
        now: Some(NOW.into()),
        crds: Vec::new(),
    };
    match run_phase(&run, SandboxLimits::default()).await {
        Ok(outcome) => {
            let mut v = serde_json::to_value(&outcome).expect("outcome as JSON");
            v.as_object_mut().map(|o| o.remove("module"));
            v
        }
        Err(e) => {
            serde_json::json!({ "error": without_digests(&format!("{e:#}")) })
        }
    }
}

/// `sha256:<64 hex>` → `sha256:…` (each language's component is another module).
fn without_digests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("sha256:") {
        out.push_str(&rest[..i + 7]);
        let after = &rest[i + 7..];
        let hex = after.chars().take_while(char::is_ascii_hexdigit).count();
        out.push('…');
        rest = &after[hex..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
#[ignore = "needs the Python and JavaScript toolchains: deploy/local/test.sh installs them"]
async fn rust_python_and_javascript_decide_the_same() {
    let langs = languages();
    let work = tempfile::tempdir().expect("work dir");
    let cases = cases(work.path());
    assert!(cases.len() >= 14, "{} cases", cases.len());
    let (mut with_outputs, mut errors, mut failures) = (0, 0, Vec::new());
    for (name, case, objects) in &cases {
        let rust = decide(&langs[0], case, objects.as_ref()).await;
        if rust.get("error").is_some() {
            errors += 1;
        } else if rust["outputs"].as_array().is_some_and(|o| !o.is_empty()) {
            with_outputs += 1;
        }
        for lang in &langs[1..] {
            let other = decide(lang, case, objects.as_ref()).await;
            if other != rust {
                failures.push(format!(
                    "{name}: {} decided\n{}\nRust decided\n{}",
                    lang.name,
                    serde_json::to_string_pretty(&other).unwrap_or_default(),
                    serde_json::to_string_pretty(&rust).unwrap_or_default()
                ));
            }
        }
    }
    // Premise: the table has decisions with outputs and errors, not only trivial cases.
    assert!(
        with_outputs >= 3 && errors >= 2,
        "{with_outputs} cases with outputs, {errors} errors"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
