//! Fitting the shell: `wasmpilot version` (the build, the WIT package, the wasmtime it runs on),
//! shell completions and man pages generated from the command line's definition, and the
//! `kubectl-wasmpilot` name that makes it a kubectl plugin (`kubectl wasmpilot …`).

use anyhow::Context;
use std::path::Path;

/// The wasmtime release the host runs components on (the workspace pins it exactly; a test
/// checks it against `Cargo.lock`).
pub const WASMTIME_VERSION: &str = "48.0.11";

/// The name kubectl finds a plugin by on `PATH`.
pub const KUBECTL_PLUGIN: &str = "kubectl-wasmpilot";

/// The WIT package workers are built against (`wit/operator.wit`).
pub fn wit_package() -> &'static str {
    include_str!("../../wit/operator.wit")
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))
        .map(|p| p.trim_end_matches(';').trim())
        .unwrap_or("unknown")
}

/// What `wasmpilot version` prints.
pub fn version_text() -> String {
    format!(
        "wasmpilot {}\nbuild: {}\nWIT package: {}\nwasmtime: {}",
        env!("CARGO_PKG_VERSION"),
        option_env!("WASMPILOT_BUILD_COMMIT")
            .unwrap_or("a local build (WASMPILOT_BUILD_COMMIT unset)"),
        wit_package(),
        WASMTIME_VERSION
    )
}

/// Whether this process was started as the kubectl plugin (`kubectl wasmpilot …` runs
/// `kubectl-wasmpilot`).
pub fn invoked_as_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .as_deref()
        .and_then(|a| Path::new(a).file_stem().map(|s| s == KUBECTL_PLUGIN))
        .unwrap_or(false)
}

/// Writes one man page per command (`wasmpilot.1`, `wasmpilot-run.1`, …) into `dir`.
pub fn write_man_pages(command: clap::Command, dir: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    let mut pages = vec![(command.get_name().to_string(), command.clone())];
    for sub in command.get_subcommands() {
        pages.push((
            format!("{}-{}", command.get_name(), sub.get_name()),
            sub.clone(),
        ));
    }
    for (name, cmd) in pages {
        let file = format!("{name}.1");
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd)
            .title(name.clone())
            .render(&mut out)
            .with_context(|| format!("rendering {file}"))?;
        std::fs::write(dir.join(&file), out).with_context(|| format!("writing {file}"))?;
        written.push(file);
    }
    Ok(written)
}

/// Links `dir/kubectl-wasmpilot` to this executable, so `kubectl wasmpilot …` runs it when
/// `dir` is on `PATH` (replacing a link of that name already there).
pub fn install_kubectl_plugin(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let link = dir.join(KUBECTL_PLUGIN);
    if std::fs::symlink_metadata(&link).is_ok() {
        std::fs::remove_file(&link).with_context(|| format!("replacing {}", link.display()))?;
    }
    std::os::unix::fs::symlink(&exe, &link)
        .with_context(|| format!("linking {} to {}", link.display(), exe.display()))?;
    Ok(link)
}
