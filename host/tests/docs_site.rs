//! The documentation site's pages that follow the code: the CRD references are what this build
//! serves, and every alert of deploy/monitoring/rules.yaml has a runbook section (and no section
//! names an alert that is gone). The site itself is built, link-checked and opened in a browser
//! by deploy/local/docs-site.sh (a step of the README's test command).
//!
//! `WASMPILOT_UPDATE_DOCS=1 cargo test -p wasmpilot --test docs_site` rewrites the references.

mod common;

use std::collections::BTreeSet;

fn cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .args(args)
        .output()
        .expect("running wasmpilot");
    assert!(
        out.status.success(),
        "wasmpilot {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn the_reference_pages_are_the_crds_this_build_serves() {
    let docs = common::repo_root().join("docs/reference");
    for (file, args) in [
        ("wasmoperator.md", vec!["crd", "--markdown"]),
        ("wasmoperatorgrant.md", vec!["crd", "--grant", "--markdown"]),
    ] {
        let generated = cli(&args);
        let path = docs.join(file);
        if std::env::var_os("WASMPILOT_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &generated).expect("writing the reference");
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/reference/{file} differs from `wasmpilot {}`: run WASMPILOT_UPDATE_DOCS=1 cargo test -p wasmpilot --test docs_site",
            args.join(" ")
        );
        // The premise: the page lists the fields an author writes most.
        for field in ["`spec.phases`", "`spec.resource`"] {
            if file == "wasmoperator.md" {
                assert!(generated.contains(field), "{field} in {file}");
            }
        }
    }
}

#[test]
fn every_alert_has_a_runbook_section_and_every_section_an_alert() {
    let root = common::repo_root();
    let rules = std::fs::read_to_string(root.join("deploy/monitoring/rules.yaml")).expect("rules");
    let alerts: BTreeSet<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|a| a.trim().to_string())
        .collect();
    let page = std::fs::read_to_string(root.join("docs/operating/alerts.md")).expect("runbook");
    let sections: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|s| s.trim().to_string())
        .collect();
    assert!(
        alerts.len() >= 10,
        "the alerts read from rules.yaml: {alerts:?}"
    );
    let missing: Vec<_> = alerts.difference(&sections).collect();
    let stale: Vec<_> = sections.difference(&alerts).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/operating/alerts.md: alerts without a runbook section {missing:?}, sections without an alert {stale:?}"
    );
}
