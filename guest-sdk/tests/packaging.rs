//! The guest SDKs as packaged: the Rust crate's copy of the WIT (`guest-sdk/wit/`) is the
//! repository's `wit/` byte for byte, and every SDK's version is the WIT package's version.
//!
//! Needs the repository around the crate, so it is left out of the published crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The `*.wit` files of `dir`, by file name.
fn wit_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files = BTreeMap::new();
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "wit") {
            let name = path.file_name().expect("a file name").to_string_lossy();
            let bytes = std::fs::read(&path).expect("a WIT file");
            files.insert(name.into_owned(), bytes);
        }
    }
    files
}

/// How `copy` differs from `source` (file names missing, extra or with other bytes).
fn differences(
    source: &BTreeMap<String, Vec<u8>>,
    copy: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, bytes) in source {
        match copy.get(name) {
            None => out.push(format!("{name} is missing")),
            Some(copied) if copied != bytes => out.push(format!("{name} differs")),
            Some(_) => {}
        }
    }
    out.extend(
        copy.keys()
            .filter(|name| !source.contains_key(*name))
            .map(|name| format!("{name} is not in wit/")),
    );
    out
}

/// `X` of the `package <namespace>:<name>@X;` declaration in a WIT text.
fn wit_package_version(wit: &str) -> Option<&str> {
    wit.lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix("package "))
        .and_then(|decl| decl.trim_end_matches(';').split_once('@'))
        .map(|(_, version)| version.trim())
}

/// `version` of the `[project]` table of a pyproject.toml (None when it is missing or dynamic).
fn pyproject_version(text: &str) -> Option<String> {
    let mut in_project = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_project = line == "[project]";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_project && key.trim() == "version" {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// The top-level `version` of a package.json or package-lock.json, and the lock's root package's.
fn npm_versions(text: &str) -> Result<Vec<String>, String> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut versions = vec![json["version"].as_str().ok_or("no version")?.to_string()];
    if let Some(root) = json["packages"][""]["version"].as_str() {
        versions.push(root.to_string());
    }
    Ok(versions)
}

/// One line for each `(where, version)` that is not the WIT package's version.
fn version_mismatches(wit_version: &str, versions: &[(String, String)]) -> Vec<String> {
    versions
        .iter()
        .filter(|(_, version)| version != wit_version)
        .map(|(place, version)| {
            format!(
                "{place} has version {version}, the WIT package wasmpilot:operator@{wit_version}"
            )
        })
        .collect()
}

#[test]
fn the_crates_wit_is_the_repositorys() {
    let source = wit_files(&repo().join("wit"));
    assert!(!source.is_empty(), "no .wit files in wit/");
    let diff = differences(&source, &wit_files(&repo().join("guest-sdk/wit")));
    assert!(
        diff.is_empty(),
        "guest-sdk/wit/ is not a copy of wit/ ({}): run `rm -f guest-sdk/wit/*.wit && cp wit/*.wit guest-sdk/wit/`",
        diff.join(", ")
    );
}

#[test]
fn every_sdk_has_the_wit_package_version() {
    let wits: Vec<String> = wit_files(&repo().join("wit"))
        .into_values()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect();
    let declared: Vec<&str> = wits.iter().filter_map(|w| wit_package_version(w)).collect();
    let wit_version = declared.first().expect("a `package …@X;` line in wit/");
    let mut versions = vec![(
        "wasmpilot-guest (Cargo)".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    )];
    versions.extend(
        declared
            .iter()
            .map(|v| ("another wit/ file".to_string(), v.to_string())),
    );
    let pyproject = pyproject_version(&read(&repo().join("guest-sdk-python/pyproject.toml")));
    versions.push((
        "guest-sdk-python/pyproject.toml".into(),
        pyproject.unwrap_or_else(|| "none".into()),
    ));
    for file in ["package.json", "package-lock.json"] {
        let found = npm_versions(&read(&repo().join("guest-sdk-js").join(file)))
            .unwrap_or_else(|e| panic!("guest-sdk-js/{file}: {e}"));
        versions.extend(
            found
                .into_iter()
                .map(|v| (format!("guest-sdk-js/{file}"), v)),
        );
    }
    let wrong = version_mismatches(wit_version, &versions);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_differing_copy_or_version_is_found() {
    let file = |bytes: &[u8]| bytes.to_vec();
    let source = BTreeMap::from([("a.wit".to_string(), file(b"package x:y@1.0.0;"))]);
    assert!(differences(&source, &source.clone()).is_empty());
    let changed = BTreeMap::from([("a.wit".to_string(), file(b"package x:y@1.0.1;"))]);
    assert_eq!(differences(&source, &changed), ["a.wit differs"]);
    let extra = BTreeMap::from([("b.wit".to_string(), file(b""))]);
    assert_eq!(
        differences(&source, &extra),
        ["a.wit is missing", "b.wit is not in wit/"]
    );

    let versions = [
        ("Cargo".to_string(), "0.1.0".to_string()),
        ("pyproject.toml".to_string(), "0.2.0".to_string()),
    ];
    assert_eq!(
        version_mismatches("0.1.0", &versions),
        ["pyproject.toml has version 0.2.0, the WIT package wasmpilot:operator@0.1.0"]
    );
    assert_eq!(version_mismatches("0.2.0", &versions).len(), 1);
    assert!(version_mismatches("0.1.0", &versions[..1]).is_empty());
}

#[test]
fn versions_are_read_where_each_packaging_keeps_them() {
    let wit = "/// docs\npackage wasmpilot:operator@0.3.1;\n\ninterface log {}\n";
    assert_eq!(wit_package_version(wit), Some("0.3.1"));
    assert_eq!(wit_package_version("interface log {}"), None);

    let pyproject = "[build-system]\nversion = \"9\"\n[project]\nname = \"x\"\nrequires-python = \">=3.11\"\nversion = \"0.3.1\"\n[tool.x]\nversion = \"8\"\n";
    assert_eq!(pyproject_version(pyproject).as_deref(), Some("0.3.1"));
    let dynamic = "[project]\ndynamic = [\"version\"]\n[tool.setuptools]\nversion = \"1\"\n";
    assert_eq!(pyproject_version(dynamic), None);

    let lock = r#"{"version": "0.3.1", "packages": {"": {"version": "0.3.2"}}}"#;
    assert_eq!(npm_versions(lock).unwrap(), ["0.3.1", "0.3.2"]);
    assert!(npm_versions(r#"{"name": "x"}"#).is_err());
}
