//! The documentation site's pages that follow the code: the CRD references are what this build
//! serves, and every alert of deploy/monitoring/rules.yaml has a runbook section (and no section
//! names an alert that is gone). The site itself is built, link-checked and opened in a browser
//! by deploy/local/docs-site.sh (a step of the README's test command).
//!
//! `WASMPILOT_UPDATE_DOCS=1 cargo test -p wasmpilot --test docs_site` rewrites the references.

mod common;

use std::collections::BTreeSet;

/// The CLI's standard output (the runner the cluster tests share).
fn cli(args: &[&str]) -> String {
    common::cluster::wasmpilot_cli(args)
        .expect("running wasmpilot")
        .0
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

/// The CamelCase reasons returned by the runtime's `reason` functions (a condition's or an
/// Event's reason, and the `reason` label of the load-failure metric).
fn reasons_the_host_reports() -> BTreeSet<String> {
    let mut reasons = BTreeSet::new();
    let mut files = vec![common::repo_root().join("runtime/src")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .expect("runtime/src")
                    .flatten()
                    .map(|e| e.path()),
            );
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !(line.contains("fn reason(&self) -> &'static str")
                || line.contains("fn module_reason("))
            {
                continue;
            }
            let mut depth = 0i32;
            for body in &lines[i..] {
                depth += body.matches('{').count() as i32 - body.matches('}').count() as i32;
                for quoted in body.split('"').skip(1).step_by(2) {
                    let camel = quoted.len() > 2
                        && quoted.starts_with(|c: char| c.is_ascii_uppercase())
                        && quoted.chars().all(|c| c.is_ascii_alphabetic())
                        && quoted.chars().skip(1).any(|c| c.is_ascii_uppercase());
                    if camel {
                        reasons.insert(quoted.to_string());
                    }
                }
                if depth <= 0 && body.contains('}') {
                    break;
                }
            }
        }
    }
    reasons
}

#[test]
fn every_reason_the_host_reports_says_what_to_do() {
    let page = std::fs::read_to_string(common::repo_root().join("docs/operating/conditions.md"))
        .expect("docs/operating/conditions.md");
    let reasons = reasons_the_host_reports();
    // The premise: the reasons were found (worker, reconcile, load, module and consent ones).
    for known in [
        "WorkerTrapped",
        "ApplyFailed",
        "OutputCycle",
        "ModuleDigestMismatch",
        "GrantMissing",
    ] {
        assert!(reasons.contains(known), "{known} among {reasons:?}");
    }
    let missing: Vec<&String> = reasons
        .iter()
        .filter(|r| !page.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "reasons the host reports that docs/operating/conditions.md does not explain: {missing:?}"
    );
}
