//! The local cluster's scripts take what they fetch from where this machine's own package
//! manager does: no mirror or package registry host is named in the repository.

use std::path::PathBuf;
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `image.sh`'s `debian_mirror`, run with an `apt-get` that answers as apt does on a machine
/// whose sources name a local mirror (and another suite first, which is not bookworm's).
#[test]
fn image_sh_takes_the_mirror_apt_uses() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let apt = dir.path().join("apt-get");
    std::fs::write(
        &apt,
        "#!/bin/sh\n[ \"$1\" = indextargets ] || exit 1\n\
         echo 'http://mirror.example.internal/debian-security/ bookworm-security Packages'\n\
         echo 'http://mirror.example.internal/debian/ bookworm Sources'\n\
         echo 'http://mirror.example.internal/debian/ bookworm Packages'\n",
    )
    .expect("a stub apt-get");
    std::fs::set_permissions(&apt, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("executable");
    let script = repo_root().join("deploy/local/image.sh");
    let run = |mirror_env: Option<&str>| {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(
                "set -euo pipefail; die() { echo \"die: $*\"; exit 1; }; \
                 eval \"$(sed -n '/^debian_mirror() {/,/^}/p' \"$1\")\"; debian_mirror",
            )
            .arg("bash")
            .arg(&script)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    dir.path().display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env_remove("WASMPILOT_DEBIAN_MIRROR");
        if let Some(m) = mirror_env {
            command.env("WASMPILOT_DEBIAN_MIRROR", m);
        }
        let out = command.output().expect("bash runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(run(None), "http://mirror.example.internal/debian/");
    assert_eq!(run(Some("http://other/debian")), "http://other/debian");
}

/// No package registry's or Debian mirror's host is written into the repository's tracked
/// files: the machine's own configuration says where packages come from.
#[test]
fn no_package_registry_host_is_named() {
    let hosts = [
        ["deb", "debian", "org"].join("."),
        ["security", "debian", "org"].join("."),
        ["registry", "npmjs", "org"].join("."),
        ["pypi", "org"].join("."),
        ["files", "pythonhosted", "org"].join("."),
        ["index", "crates", "io"].join("."),
        ["static", "crates", "io"].join("."),
    ];
    let mut args = vec!["grep".to_string(), "-n".into(), "-I".into(), "-F".into()];
    for h in &hosts {
        args.push("-e".into());
        args.push(h.clone());
    }
    // Lock files record where each package was resolved from; they are the tools' own.
    args.extend(["--", ".", ":!*.lock", ":!*package-lock.json"].map(String::from));
    let out = Command::new("git")
        .args(&args)
        .current_dir(repo_root())
        .output()
        .expect("git runs");
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(
        found.trim().is_empty(),
        "package registry hosts named in the repository:\n{found}"
    );
}
