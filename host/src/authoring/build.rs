//! `wasmpilot build <dir>`: builds every phase component of an operator directory (Rust:
//! release, wasm32-wasip2; Python and JavaScript: componentize-py / componentize-js — the same
//! build `wasmpilot deploy` runs) and lists each one's phase, size and sha256 — the digest
//! `deploy` pins and the host verifies.

use crate::modules::digest_of;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::time::Instant;

/// Builds and returns the report to print.
pub fn build_command(dir: &Path) -> anyhow::Result<String> {
    let started = Instant::now();
    let built = crate::component_build::build(dir, true)?;
    let roles = phases_by_file(dir);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "built {} components in {:.1}s into {}",
        built.components.len(),
        started.elapsed().as_secs_f64(),
        built.out_dir.display()
    );
    out.push_str(&table(&built.components, &roles));
    Ok(out)
}

/// `phase  file  size  sha256` lines, in file order.
pub fn table(components: &BTreeMap<String, Vec<u8>>, roles: &BTreeMap<String, String>) -> String {
    let width = components.keys().map(String::len).max().unwrap_or(0);
    let role_width = roles.values().map(String::len).max().unwrap_or(1).max(5);
    let mut out = String::new();
    for (file, bytes) in components {
        let role = roles.get(file).map(String::as_str).unwrap_or("-");
        let _ = writeln!(
            out,
            "  {role:<role_width$}  {file:<width$}  {:>5} KiB  {}",
            bytes.len().div_ceil(1024),
            digest_of(bytes)
        );
    }
    out
}

/// Which phase (or `finalizer`) uses which `file` module, from `<dir>/operator.yaml` if it reads.
fn phases_by_file(dir: &Path) -> BTreeMap<String, String> {
    let Ok((op, _)) = crate::offline::load_operator(&dir.join("operator.yaml")) else {
        return BTreeMap::new();
    };
    let mut roles: BTreeMap<String, String> = op
        .spec
        .phases
        .iter()
        .flat_map(|p| {
            let module = p.module.as_ref().and_then(|m| m.file.as_ref());
            let shadow = p.shadow.as_ref().and_then(|m| m.file.as_ref());
            [
                module.map(|f| (f.path.clone(), p.name.clone())),
                shadow.map(|f| (f.path.clone(), format!("{} (shadow)", p.name))),
            ]
        })
        .flatten()
        .collect();
    if let Some(f) = op
        .spec
        .finalizer
        .as_ref()
        .and_then(|f| f.module.file.as_ref())
    {
        roles.insert(f.path.clone(), "finalizer".into());
    }
    roles
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lists_phase_size_and_digest() {
        let components = BTreeMap::from([
            ("a_init.wasm".to_string(), vec![0u8; 2048]),
            ("a_other.wasm".to_string(), vec![1u8; 10]),
        ]);
        let roles = BTreeMap::from([("a_init.wasm".to_string(), "Initializing".to_string())]);
        let t = table(&components, &roles);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("  Initializing  a_init.wasm       2 KiB  sha256:"),
            "{t}"
        );
        assert!(
            lines[1].starts_with("  -             a_other.wasm      1 KiB  sha256:"),
            "{t}"
        );
        assert!(lines[0].ends_with(&digest_of(&[0u8; 2048])));
    }

    #[test]
    fn roles_come_from_the_example_operator() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/myownshell");
        let roles = phases_by_file(&dir);
        assert_eq!(
            roles.get("myownshell_syncing.wasm").map(String::as_str),
            Some("Syncing")
        );
        assert_eq!(
            roles.get("myownshell_finalizer.wasm").map(String::as_str),
            Some("finalizer")
        );
    }
}
