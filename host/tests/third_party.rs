//! The crates under `third_party/` are the registry's published crates with only the change
//! third_party/README.md names: checked against the registry's own copy, fetched by cargo.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const VENDORED: &str = "third_party/wasmtime-internal-component-macro-48.0.11";
/// The newest release of the crate the registry can resolve with its dependencies: its source
/// is 48.0.11's but for version numbers.
const PUBLISHED: &str = "48.0.10";

fn files(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).expect("a readable crate directory") {
        let path = entry.expect("an entry").path();
        let name = path
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            // The published crate's expected macro expansions (3.9 MB) are not kept.
            if name != "tests/expanded" {
                files(root, &path, out);
            }
        } else if ![".cargo-checksum.json", ".cargo_vcs_info.json", "Cargo.lock"]
            .contains(&name.as_str())
        {
            out.insert(name, std::fs::read(&path).expect("a readable file"));
        }
    }
}

/// A file's text with the release's version numbers made one, and the lines of our change out.
fn normalized(text: &[u8]) -> String {
    String::from_utf8_lossy(text)
        .lines()
        .filter(|l| {
            !l.starts_with("# wasmpilot patch") && !l.starts_with("# (third_party/README.md)")
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("48.0.10", "48.0.x")
        .replace("48.0.11", "48.0.x")
}

/// The registry's published crate, fetched with `cargo vendor` into `work` (`requirement` is
/// its line in a manifest's `[dependencies]`): its directory.
fn published(work: &Path, requirement: &str, dir: &str) -> PathBuf {
    std::fs::create_dir_all(work.join("src")).expect("src");
    std::fs::write(work.join("src/lib.rs"), "").expect("lib.rs");
    std::fs::write(
        work.join("Cargo.toml"),
        format!(
            "[package]\nname = \"published\"\nversion = \"0.0.0\"\nedition = \"2021\"\n[workspace]\n\
             [dependencies]\n{requirement}\n"
        ),
    )
    .expect("Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["vendor", "--versioned-dirs", "--quiet", "vendor"])
        .current_dir(work)
        .output()
        .expect("cargo vendor runs");
    assert!(
        out.status.success(),
        "cargo vendor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    work.join("vendor").join(dir)
}

#[test]
#[ignore = "needs the crates.io registry (cargo vendor of the published crate)"]
fn vendored_wasmtime_is_the_published_crate_with_our_patch_applied() {
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = tempfile::tempdir().expect("a temporary directory");
    // Without default features: they would take the bindgen macro at a release the registry
    // lacks (see the component macro below); the crate's files are the same.
    let published_root = published(
        work.path(),
        "wasmtime = { version = \"=48.0.11\", default-features = false }",
        "wasmtime-48.0.11",
    );
    let patch = checkout.join("third_party/wasmtime-48.0.11-funcref.patch");
    let out = Command::new("git")
        .arg("apply")
        .arg("-p1")
        .arg(&patch)
        .current_dir(&published_root)
        .output()
        .expect("git apply runs");
    assert!(
        out.status.success(),
        "the patch does not apply to the published crate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut patched = BTreeMap::new();
    files(&published_root, &published_root, &mut patched);
    let vendored_root = checkout.join("third_party/wasmtime-48.0.11");
    let mut vendored = BTreeMap::new();
    files(&vendored_root, &vendored_root, &mut vendored);
    assert_eq!(
        patched.keys().collect::<Vec<_>>(),
        vendored.keys().collect::<Vec<_>>(),
        "the vendored crate holds other files than the published one"
    );
    for (name, text) in &patched {
        assert!(
            *text == vendored[name],
            "{name} differs from the published crate with the patch applied"
        );
    }
    // The patch's lines are marked as ours.
    let patch = std::fs::read_to_string(&patch).expect("the patch");
    assert!(patch.matches("wasmpilot patch").count() >= 5, "marked");
}

#[test]
#[ignore = "needs the crates.io registry (cargo vendor of the published crate)"]
fn vendored_component_macro_is_the_published_crate_but_for_its_one_marked_line() {
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = tempfile::tempdir().expect("a temporary directory");
    let published_root = published(
        work.path(),
        &format!("wasmtime-internal-component-macro = \"={PUBLISHED}\""),
        &format!("wasmtime-internal-component-macro-{PUBLISHED}"),
    );
    let mut published = BTreeMap::new();
    files(&published_root, &published_root, &mut published);
    let vendored_root = checkout.join(VENDORED);
    let mut vendored = BTreeMap::new();
    files(&vendored_root, &vendored_root, &mut vendored);

    assert_eq!(
        published.keys().collect::<Vec<_>>(),
        vendored.keys().collect::<Vec<_>>(),
        "the vendored crate holds other files than the published one"
    );
    for (name, text) in &published {
        assert_eq!(
            normalized(text),
            normalized(&vendored[name]),
            "{name} differs from the published crate"
        );
    }
    // The change itself: the one requirement that names a release the registry has.
    let manifest = String::from_utf8_lossy(&vendored["Cargo.toml"]).into_owned();
    assert_eq!(
        manifest.matches("\"=48.0.10\"").count(),
        1,
        "one requirement changed:\n{manifest}"
    );
    assert!(
        manifest.contains("# wasmpilot patch"),
        "the change is marked"
    );
}
