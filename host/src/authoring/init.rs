//! `wasmpilot init`: scaffolds an operator project — a types crate (spec, status with
//! `HostStatus`, CRD generator and drift test), one worker crate per phase (a stub that moves
//! to the next phase, with a native test), `operator.yaml`, `sample.yaml` and a README. With
//! `--lang python|javascript`: per phase a worker subclassing the phase's `<Phase>Worker` of the
//! typed API `wasmpilot generate` writes (`shared/phases.py`, `shared/phases.js` + `.d.ts`,
//! written with the project), its native test, and the settings for `mypy --strict` /
//! `tsc --noEmit`.
//!
//! Where the project lives decides how cargo sees it:
//! - outside any cargo workspace (or with `--standalone`), the project root gets a
//!   `Cargo.toml` with `[workspace]`: it builds on its own, with its own `Cargo.lock`;
//! - inside a workspace, its crates are added to that workspace's `members` (as `cargo new`
//!   does) and the workspace's profiles apply.
//!
//! The crates never inherit from a workspace (`version.workspace = true` etc.), so the same
//! files work both ways. `wasmpilot-guest` is a path dependency when the project is inside a
//! wasmpilot checkout (relative path) or `--sdk-path` names one, else `--sdk-version`. A Python
//! or JavaScript project refers to its SDK (`--sdk-path`, else a checkout's) by relative path.

use super::scaffold::{self, Lang, Project};
use super::workspace::{add_workspace_members, enclosing_workspace, relative_path, Workspace};
use crate::component_build::in_checkout;
use anyhow::{anyhow, bail, Context};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `wasmpilot init` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct InitArgs {
    /// The project directory to create (must not exist, or be empty).
    pub dir: PathBuf,
    /// The custom resource's kind, UpperCamelCase, e.g. `AutoRoute`.
    #[arg(long)]
    pub kind: String,
    /// Its API group, a DNS name with a dot, e.g. `examples.io`.
    #[arg(long)]
    pub group: String,
    /// Its API version, e.g. `v1`, `v1alpha1`.
    #[arg(long, default_value = "v1")]
    pub version: String,
    /// The phases in order, comma-separated; the first is initial, e.g. `Initializing,Syncing,Ready`.
    #[arg(long, value_delimiter = ',', required = true)]
    pub phases: Vec<String>,
    /// The operator's name (WasmOperator, crate prefix); default: the kind in lowercase.
    #[arg(long)]
    pub name: Option<String>,
    /// The resource's plural; default: the kind in lowercase + "s" (or "es", "ies").
    #[arg(long)]
    pub plural: Option<String>,
    /// The guest SDK to depend on by path: for Rust the `guest-sdk` directory of a wasmpilot
    /// checkout, for Python or JavaScript its `guest-sdk-python` or `guest-sdk-js` (or the
    /// checkout itself). Default: the enclosing wasmpilot checkout's, else the one this binary
    /// was built from.
    #[arg(long, conflicts_with = "sdk_version")]
    pub sdk_path: Option<PathBuf>,
    /// Depend on wasmpilot-guest from a registry at this version instead of by path (it is not
    /// on crates.io yet: for a private registry, or a `[patch]` section of your own).
    #[arg(long)]
    pub sdk_version: Option<String>,
    /// Make the project its own cargo workspace even inside another workspace.
    #[arg(long)]
    pub standalone: bool,
    /// Do not run the CRD generator (cargo) after writing the files.
    #[arg(long)]
    pub no_crdgen: bool,
    /// The workers' language: `rust` (crates with a types crate and CRD generator), `python`
    /// (componentize-py) or `javascript` (componentize-js; `js` works too).
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
}

/// How the crates depend on wasmpilot-guest.
#[derive(Clone, Debug, PartialEq)]
pub enum Sdk {
    /// A path dependency on this directory (absolute, canonical).
    Path(PathBuf),
    /// A registry dependency at this version.
    Version(String),
}

/// What `init` wrote.
#[derive(Debug)]
pub struct Scaffold {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub workspace: Workspace,
    pub sdk: Sdk,
}

/// Whether `dir` holds the wasmpilot-guest crate.
fn is_guest_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|t| t.contains("name = \"wasmpilot-guest\""))
}

/// The wasmpilot-guest dependency: `--sdk-version`, `--sdk-path`, the enclosing wasmpilot
/// checkout, or the checkout this binary was built from.
pub fn choose_sdk(
    dir: &Path,
    sdk_path: Option<&Path>,
    sdk_version: Option<&str>,
) -> anyhow::Result<Sdk> {
    if let Some(v) = sdk_version {
        return Ok(Sdk::Version(v.to_string()));
    }
    if let Some(p) = sdk_path {
        let p = p.canonicalize().with_context(|| {
            format!("--sdk-path {}: no such directory (pass the guest-sdk directory of a wasmpilot checkout)", p.display())
        })?;
        if !is_guest_sdk(&p) {
            bail!(
                "--sdk-path {}: no wasmpilot-guest Cargo.toml there (pass <wasmpilot checkout>/guest-sdk)",
                p.display()
            );
        }
        return Ok(Sdk::Path(p));
    }
    if let Some(found) = in_checkout(dir, "guest-sdk", is_guest_sdk) {
        return Ok(Sdk::Path(found.canonicalize()?));
    }
    bail!("cannot find the wasmpilot-guest SDK: pass --sdk-path <wasmpilot checkout>/guest-sdk, or --sdk-version <version> to use a published one")
}

/// Whether `dir` is the guest SDK of `lang` (Python: `src/wasmpilot_guest/`; JavaScript: the
/// `@wasmpilot/guest` package).
fn is_language_sdk(lang: Lang, dir: &Path) -> bool {
    match lang {
        Lang::Python => crate::component_build::holds_python_sdk(&dir.join("src")),
        _ => std::fs::read_to_string(dir.join("package.json"))
            .is_ok_and(|t| t.contains("\"name\": \"@wasmpilot/guest\"")),
    }
}

/// The guest SDK directory of a Python or JavaScript project (`guest-sdk-python`,
/// `guest-sdk-js`): `--sdk-path` (that directory, or a wasmpilot checkout holding it), else an
/// enclosing wasmpilot checkout's, else the one of the checkout this binary was built from.
pub(crate) fn guest_sdk_dir(
    dir: &Path,
    lang: Lang,
    sdk_path: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    let name = match lang {
        Lang::Python => "guest-sdk-python",
        _ => "guest-sdk-js",
    };
    if let Some(p) = sdk_path {
        let found = [p.to_path_buf(), p.join(name)]
            .into_iter()
            .find(|candidate| is_language_sdk(lang, candidate))
            .ok_or_else(|| {
                anyhow!(
                    "--sdk-path {}: no {name} there (pass <wasmpilot checkout>/{name}, or the checkout)",
                    p.display()
                )
            })?;
        return Ok(found.canonicalize()?);
    }
    in_checkout(dir, name, |candidate| is_language_sdk(lang, candidate))
        .map(|found| found.canonicalize())
        .transpose()?
        .ok_or_else(|| {
            anyhow!("cannot find {name} (the guest SDK): pass --sdk-path <wasmpilot checkout>/{name}, or create the project inside a wasmpilot checkout")
        })
}

/// Writes a Python or JavaScript project (no cargo involved).
fn init_guest(args: &InitArgs, project: &Project, dir: &Path) -> anyhow::Result<Scaffold> {
    if args.sdk_version.is_some() {
        bail!("--sdk-version applies to Rust workers: the Python and JavaScript SDKs are used from a wasmpilot checkout (--sdk-path <checkout>/guest-sdk-python or guest-sdk-js)");
    }
    let sdk = guest_sdk_dir(dir, args.lang, args.sdk_path.as_deref())?;
    let sdk_for_files = match args.lang {
        Lang::Python => sdk.join("src"),
        _ => sdk.clone(),
    };
    let files = project.guest_files(
        args.lang,
        &relative_path(dir, &sdk_for_files).display().to_string(),
    )?;
    let written = write_files(dir, &files)?;
    let (test, lang, typecheck) = match args.lang {
        Lang::Python => (
            scaffold::PYTHON_TEST_COMMAND,
            "Python",
            scaffold::PYTHON_TYPECHECK_COMMAND,
        ),
        _ => (
            "npm install && npm test",
            "JavaScript",
            scaffold::JS_TYPECHECK_COMMAND,
        ),
    };
    eprintln!(
        "created {} ({} files): {} {} with phases {}, workers in {lang} (SDK {})",
        dir.display(),
        written.len(),
        project.api_version(),
        project.kind,
        project.phase_list(),
        sdk.display()
    );
    eprintln!(
        "\nnext:\n  cd {}\n  {test}   # the stubs' native tests\n  {typecheck}   # the workers against the generated API (the pinned toolchain's)\n  wasmpilot build .   # the components\n  wasmpilot simulate . --resource sample.yaml\n  wasmpilot generate .   # after changing operator.yaml: the typed API in shared/ again\n  see README.md for the whole loop",
        dir.display()
    );
    Ok(Scaffold {
        dir: dir.to_path_buf(),
        files: written,
        workspace: Workspace::Standalone,
        sdk: Sdk::Path(sdk),
    })
}

/// Writes `files` (paths relative to `dir`), creating directories.
fn write_files(dir: &Path, files: &[(String, String)]) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| {
                format!(
                    "creating {}: check that {} is writable, or choose another directory",
                    parent.display(),
                    dir.display()
                )
            })?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes the project; runs the CRD generator unless `no_crdgen`. Prints what it did and what
/// to do next.
pub fn init(args: &InitArgs) -> anyhow::Result<Scaffold> {
    let project = Project::new(
        &args.kind,
        &args.group,
        &args.version,
        &args.phases,
        args.name.as_deref(),
        args.plural.as_deref(),
    )?;
    if args.dir.exists() {
        let empty = std::fs::read_dir(&args.dir)
            .with_context(|| format!("{} exists and is not a directory", args.dir.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "{} already exists and is not empty: choose a new directory (init never overwrites files)",
                args.dir.display()
            );
        }
    }
    let created = !args.dir.exists();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let scaffold = scaffold_into(args, &project);
    // A directory made for a scaffold that failed before writing a file goes again (only if
    // still empty: files written before a later failure stay, as the error's advice expects).
    if scaffold.is_err() && created {
        let _ = std::fs::remove_dir(&args.dir);
    }
    scaffold
}

/// Writes the project into `args.dir` (existing and empty).
fn scaffold_into(args: &InitArgs, project: &Project) -> anyhow::Result<Scaffold> {
    let dir = args.dir.canonicalize().with_context(|| {
        format!(
            "resolving {}: check that it is a directory you can read, or choose another",
            args.dir.display()
        )
    })?;
    if args.lang != Lang::Rust {
        return init_guest(args, project, &dir);
    }
    let sdk = choose_sdk(&dir, args.sdk_path.as_deref(), args.sdk_version.as_deref())?;
    let workspace = match enclosing_workspace(&dir) {
        Some(root) if !args.standalone => Workspace::Member(root),
        _ => Workspace::Standalone,
    };
    // Inside the checkout that holds the SDK: a relative path, so the checkout can move.
    let sdk_dep = |crate_dir: &str| match &sdk {
        Sdk::Path(p) if p.parent().is_some_and(|checkout| dir.starts_with(checkout)) => format!(
            "wasmpilot-guest = {{ path = \"{}\" }}",
            relative_path(&dir.join(crate_dir), p).display()
        ),
        Sdk::Path(p) => format!("wasmpilot-guest = {{ path = \"{}\" }}", p.display()),
        Sdk::Version(v) => format!("wasmpilot-guest = \"{v}\""),
    };
    let files = project.files(&workspace, &sdk_dep)?;
    let mut written = write_files(&dir, &files)?;
    std::fs::create_dir_all(dir.join("crds")).with_context(|| {
        format!(
            "creating {}: check that {} is writable",
            dir.join("crds").display(),
            dir.display()
        )
    })?;
    format_rust(&written);
    if let (Workspace::Standalone, Sdk::Path(sdk)) = (&workspace, &sdk) {
        seed_lockfile(sdk, &dir);
    }
    eprintln!(
        "created {} ({} files): {} {} with phases {}",
        dir.display(),
        written.len(),
        project.api_version(),
        project.kind,
        project.phase_list()
    );
    match &sdk {
        Sdk::Path(p) => eprintln!("wasmpilot-guest: path dependency on {}", p.display()),
        Sdk::Version(v) => eprintln!("wasmpilot-guest: version {v} from the registry"),
    }
    if let Workspace::Member(root) = &workspace {
        let ws_dir = root.parent().unwrap_or(Path::new("/"));
        let members: Vec<String> = project
            .crate_dirs()
            .iter()
            .map(|d| relative_path(ws_dir, &dir.join(d)).display().to_string())
            .collect();
        let text = std::fs::read_to_string(root).with_context(|| {
            format!(
                "reading the enclosing workspace's {}: make it readable, or run init again with --standalone",
                root.display()
            )
        })?;
        match add_workspace_members(&text, &members) {
            Some(new) => {
                if new != text {
                    std::fs::write(root, new)
                        .with_context(|| format!("adding the crates to {}", root.display()))?;
                }
                eprintln!(
                    "added {} crates to the workspace members in {} (use --standalone for a workspace of its own)",
                    members.len(),
                    root.display()
                );
            }
            None => bail!(
                "{} is inside the cargo workspace {}, whose members list this cannot edit: add {} to its [workspace] members, or run init again with --standalone into an empty directory",
                dir.display(),
                root.display(),
                members.join(", ")
            ),
        }
    }
    let crd_path = dir.join("crds").join(project.crd_file());
    let crdgen_cmd = format!(
        "cargo run -q -p {} --bin {}-crdgen > crds/{}",
        project.types_crate(),
        project.name,
        project.crd_file()
    );
    if args.no_crdgen {
        eprintln!(
            "skipped the CRD; generate it with: cd {} && {crdgen_cmd}",
            dir.display()
        );
    } else {
        eprintln!(
            "generating {} (cargo builds the types crate) …",
            crd_path.display()
        );
        generate_crd(&dir, &crd_path).with_context(|| {
            format!(
                "the project is written; generate the CRD yourself with: cd {} && {crdgen_cmd}",
                dir.display()
            )
        })?;
        written.push(crd_path);
    }
    eprintln!(
        "\nnext:\n  cd {}\n  {}   # the stubs' native tests and the CRD drift test\n  wasmpilot build .   # components for wasm32-wasip2\n  wasmpilot simulate . --resource sample.yaml\n  see README.md for the whole loop",
        dir.display(),
        project.test_command(&workspace)
    );
    Ok(Scaffold {
        dir,
        files: written,
        workspace,
        sdk,
    })
}

/// rustfmt on the generated Rust files (line breaks depend on the names filled in); skipped
/// quietly when rustfmt is not installed.
fn format_rust(files: &[PathBuf]) {
    let rust: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .collect();
    let _ = Command::new("rustfmt")
        .args(["--edition", "2021"])
        .args(&rust)
        .stderr(std::process::Stdio::null())
        .status();
}

/// A standalone project starts from the Cargo.lock of the wasmpilot checkout its SDK comes
/// from: it resolves to the dependency versions wasmpilot is tested with (cargo drops the
/// entries it does not need and adds the project's crates).
fn seed_lockfile(sdk: &Path, dir: &Path) {
    if let Some(lock) = sdk.parent().map(|checkout| checkout.join("Cargo.lock")) {
        if lock.is_file() && !dir.join("Cargo.lock").exists() {
            let _ = std::fs::copy(lock, dir.join("Cargo.lock"));
        }
    }
}

/// Runs the project's CRD generator (as `wasmpilot generate` does) and writes its output.
fn generate_crd(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let crd = super::generate::run_crdgen(dir)?;
    std::fs::write(out, crd).with_context(|| format!("writing {}", out.display()))
}
