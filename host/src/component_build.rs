//! How an operator directory's components are built, whatever the workers' language: Rust
//! crates with cargo, Python workers (`workers/<name>/app.py`) with componentize-py, JavaScript
//! workers (`workers/<name>/worker.js`) with componentize-js; each gives file name → bytes.

use anyhow::{anyhow, bail, Context};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

// ---- Rust: cargo ----

/// The phase-component crates of an operator directory, as cargo sees them.
pub struct ComponentCrates {
    /// Package names of the cdylib crates whose manifests are under the directory.
    pub packages: Vec<String>,
    /// Where `cargo build --release --target wasm32-wasip2` puts them:
    /// `<target dir>/wasm32-wasip2/release`.
    pub out_dir: PathBuf,
}

impl ComponentCrates {
    /// The artifact file name of a package: `my-worker` → `my_worker.wasm`.
    pub fn artifact(package: &str) -> String {
        format!("{}.wasm", package.replace('-', "_"))
    }
}

/// Finds the cdylib crates under `dir` and the target directory (`cargo metadata`).
pub fn component_crates(dir: &Path) -> anyhow::Result<ComponentCrates> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("operator directory {}", dir.display()))?;
    let meta = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&dir)
        .output()
        .context("running cargo metadata (is cargo installed?)")?;
    if !meta.status.success() {
        bail!(
            "cargo metadata failed in {}: {}\nfix the Cargo.toml it names (check with `cargo metadata --no-deps` there), or pass the operator directory that holds Cargo.toml and operator.yaml",
            dir.display(),
            String::from_utf8_lossy(&meta.stderr).trim_end()
        );
    }
    let meta: Value = serde_json::from_slice(&meta.stdout).with_context(|| {
        format!(
            "cargo metadata in {} printed no JSON: update cargo (rustup update)",
            dir.display()
        )
    })?;
    let target_dir = PathBuf::from(meta["target_directory"].as_str().ok_or_else(|| {
        anyhow!(
            "cargo metadata in {} names no target_directory: update cargo (rustup update), or set CARGO_TARGET_DIR",
            dir.display()
        )
    })?);
    let mut packages = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        let manifest = Path::new(p["manifest_path"].as_str().unwrap_or_default());
        let is_component = p["targets"].as_array().into_iter().flatten().any(|t| {
            t["crate_types"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c == "cdylib")
        });
        if is_component && manifest.starts_with(&dir) {
            packages.push(p["name"].as_str().unwrap_or_default().to_string());
        }
    }
    if packages.is_empty() {
        bail!("no cdylib crates under {}: each phase worker is a crate with crate-type = [\"cdylib\"]", dir.display());
    }
    Ok(ComponentCrates {
        packages,
        out_dir: target_dir.join("wasm32-wasip2").join("release"),
    })
}

/// `cargo build --release --target wasm32-wasip2 -p …` in `dir`; cargo's own progress shows.
pub fn cargo_build(dir: &Path, packages: &[String]) -> anyhow::Result<()> {
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--release", "--target", "wasm32-wasip2"])
        .current_dir(dir);
    for p in packages {
        cmd.args(["-p", p]);
    }
    eprintln!("building {} for wasm32-wasip2 …", packages.join(", "));
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build failed (if the target is missing: rustup target add wasm32-wasip2)");
    }
    Ok(())
}

/// The built components: artifact file name → bytes.
pub fn read_components(crates: &ComponentCrates) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let mut built = BTreeMap::new();
    for p in &crates.packages {
        let file = ComponentCrates::artifact(p);
        let path = crates.out_dir.join(&file);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "reading built component {} (build it: wasmpilot build <dir>)",
                path.display()
            )
        })?;
        built.insert(file, bytes);
    }
    Ok(built)
}

/// The WIT every worker is built against, shipped inside this binary.
const OPERATOR_WIT: &str = include_str!("../../wit/operator.wit");

/// The language of an operator directory's workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    JavaScript,
}

impl Language {
    /// The worker source file a `workers/<name>/` directory holds in this language.
    fn worker_file(self) -> &'static str {
        match self {
            Language::Rust => "Cargo.toml",
            Language::Python => "app.py",
            Language::JavaScript => "worker.js",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::JavaScript => "JavaScript",
        }
    }
}

/// The language of `dir`'s workers: Rust when it is (in) a cargo project with worker crates,
/// else Python or JavaScript by the files under `workers/`.
pub fn language(dir: &Path) -> anyhow::Result<Language> {
    let has = |language: Language| worker_dirs(dir, language).is_ok_and(|w| !w.is_empty());
    if dir.join("Cargo.toml").is_file() || has(Language::Rust) {
        return Ok(Language::Rust);
    }
    for language in [Language::Python, Language::JavaScript] {
        if has(language) {
            return Ok(language);
        }
    }
    bail!(
        "no workers in {}: expected Rust crates (Cargo.toml with workers/<phase>/ crates), Python workers (workers/<phase>/app.py) or JavaScript workers (workers/<phase>/worker.js); `wasmpilot init <dir> --lang rust|python|javascript` scaffolds one",
        dir.display()
    )
}

/// `workers/<name>/` directories holding the language's worker file, by name.
fn worker_dirs(dir: &Path, language: Language) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let workers = dir.join("workers");
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(&workers) else {
        return Ok(found);
    };
    for entry in entries {
        let path = entry?.path();
        if path.join(language.worker_file()).is_file() {
            if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                found.insert(name.to_string(), path.clone());
            }
        }
    }
    Ok(found)
}

/// Built components: where they are and their bytes by file name.
pub struct Built {
    pub language: Language,
    pub out_dir: PathBuf,
    pub components: BTreeMap<String, Vec<u8>>,
}

/// Where `build` puts (and `run-phase`/`simulate` find) a directory's components.
pub fn out_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    match language(dir)? {
        Language::Rust => Ok(component_crates(dir)?.out_dir),
        _ => {
            let dir = dir
                .canonicalize()
                .with_context(|| format!("operator directory {}", dir.display()))?;
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.join("target"));
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "operator".into());
            Ok(target.join("guest-components").join(name))
        }
    }
}

/// Builds `dir`'s components (unless `build` is false: then reads what was built before).
pub fn build(dir: &Path, build: bool) -> anyhow::Result<Built> {
    let language = language(dir)?;
    if language == Language::Rust {
        let crates = component_crates(dir)?;
        if build {
            cargo_build(dir, &crates.packages)?;
        }
        return Ok(Built {
            language,
            components: read_components(&crates)?,
            out_dir: crates.out_dir,
        });
    }
    let out = out_dir(dir)?;
    let jobs = jobs(dir, language)?;
    if build {
        std::fs::create_dir_all(out.join("wit"))
            .with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(out.join("wit/operator.wit"), OPERATOR_WIT)?;
        let toolchain = Toolchain::find(language)?;
        let identity = toolchain.identity()?;
        for job in &jobs {
            toolchain.build(dir, job, &out, &identity)?;
        }
    }
    let mut components = BTreeMap::new();
    for job in jobs {
        let path = out.join(&job.file);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "reading built component {} (build it: wasmpilot build {})",
                path.display(),
                dir.display()
            )
        })?;
        components.insert(job.file, bytes);
    }
    Ok(Built {
        language,
        out_dir: out,
        components,
    })
}

/// One component to build: a `file` module of operator.yaml and the worker it comes from.
struct Job {
    file: String,
    worker: PathBuf,
    /// `phase` or `finalizer`.
    world: &'static str,
}

/// The `file` modules operator.yaml names, each matched with `workers/<name>/`: the file's stem
/// is `<name>` or ends with `_<name>` (`autoroute_syncing.wasm` ← `workers/syncing/`).
fn jobs(dir: &Path, language: Language) -> anyhow::Result<Vec<Job>> {
    let manifest = dir.join("operator.yaml");
    let op = crate::offline::read_operator(&manifest)?;
    let workers = worker_dirs(dir, language)?;
    let mut files: Vec<(String, &'static str)> = Vec::new();
    for p in &op.spec.phases {
        for m in [&p.module, &p.shadow].into_iter().flatten() {
            if let Some(f) = &m.file {
                files.push((f.path.clone(), "phase"));
            }
        }
    }
    if let Some(f) = op
        .spec
        .finalizer
        .as_ref()
        .and_then(|f| f.module.file.as_ref())
    {
        files.push((f.path.clone(), "finalizer"));
    }
    files.sort();
    files.dedup();
    let mut jobs = Vec::new();
    for (file, world) in files {
        let stem = Path::new(&file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let worker = workers
            .iter()
            .filter(|(name, _)| {
                let name = name.replace('-', "_");
                stem.replace('-', "_") == name || stem.ends_with(&format!("_{name}"))
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, path)| path.clone())
            .ok_or_else(|| {
                anyhow!(
                    "{}: module file {file} matches no worker directory (workers: {}): name it <anything>_<worker>.wasm after workers/<worker>/{}",
                    manifest.display(),
                    workers.keys().cloned().collect::<Vec<_>>().join(", "),
                    language.worker_file()
                )
            })?;
        jobs.push(Job {
            file,
            worker,
            world,
        });
    }
    if jobs.is_empty() {
        bail!("{} names no `file` modules to build", manifest.display());
    }
    Ok(jobs)
}

/// The componentize tool of a language, pinned and installed by
/// `deploy/local/guest-toolchains.sh install` under [`toolchains_dir`], else (Python) found
/// on PATH.
struct Toolchain {
    language: Language,
    program: PathBuf,
    /// For JavaScript: the bundler script run before componentize-js (`program` is then the
    /// script that runs componentize-js with faster call glue, `componentize-js.mjs`).
    bundler: Option<PathBuf>,
    /// For JavaScript: `wasmpilot-js-snapshot` beside this binary, which takes the engine's
    /// snapshot reproducibly in place of componentize-js's wizer; without it, components of the
    /// same bundle differ from build to build.
    snapshot: Option<PathBuf>,
}

/// `wasmpilot-js-snapshot` beside the running binary, else in the JavaScript toolchain's `bin/`
/// (`deploy/local/guest-toolchains.sh install` builds it from `tools/js-snapshot` there).
fn js_snapshot_program(js_toolchain: &std::path::Path) -> Option<PathBuf> {
    let name = format!("wasmpilot-js-snapshot{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(&name));
    beside
        .into_iter()
        .chain([js_toolchain.join("bin").join(&name)])
        .find(|program| program.is_file())
}

const INSTALL_HINT: &str = "install the pinned toolchains with deploy/local/guest-toolchains.sh install (from a wasmpilot checkout)";

/// `$WASMPILOT_TOOLCHAINS`, else `toolchains/` of the cache root the install script uses
/// (`$WASMPILOT_CACHE`, default `~/.cache/wasmpilot`).
fn toolchains_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WASMPILOT_TOOLCHAINS") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("WASMPILOT_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/wasmpilot")))
        .unwrap_or_else(|| PathBuf::from(".cache/wasmpilot"));
    cache.join("toolchains")
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

impl Toolchain {
    fn find(language: Language) -> anyhow::Result<Self> {
        let root = toolchains_dir();
        match language {
            Language::Rust => bail!("Rust components are built with cargo"),
            Language::Python => {
                let pinned = root.join("python/bin/componentize-py");
                let program = Some(pinned.clone())
                    .filter(|p| p.is_file())
                    .or_else(|| on_path("componentize-py"))
                    .ok_or_else(|| {
                        anyhow!(
                            "componentize-py not found ({} nor on PATH): {INSTALL_HINT}, or pip install componentize-py==0.25.1",
                            pinned.display()
                        )
                    })?;
                Ok(Toolchain {
                    language,
                    program,
                    bundler: None,
                    snapshot: None,
                })
            }
            Language::JavaScript => {
                let js = root.join("js");
                // componentize-js through our wrapper (its glue made faster, see the script).
                let program = js.join("componentize-js.mjs");
                let bundler = js.join("bundle-js.mjs");
                let installed = js.join("node_modules/.bin/componentize-js");
                if !program.is_file() || !bundler.is_file() || !installed.is_file() {
                    bail!(
                        "componentize-js, its bundler or its wrapper not found in {}: {INSTALL_HINT}",
                        js.display()
                    );
                }
                let snapshot = js_snapshot_program(&js);
                if snapshot.is_none() {
                    eprintln!(
                        "note: wasmpilot-js-snapshot is neither beside this wasmpilot binary nor in {}: components are snapshotted by componentize-js's wizer, and differ from build to build ({INSTALL_HINT})",
                        js.join("bin").display()
                    );
                }
                Ok(Toolchain {
                    language,
                    program,
                    bundler: Some(bundler),
                    snapshot,
                })
            }
        }
    }

    /// Builds one component into `out` (the WIT is at `out/wit/operator.wit`), unless the file
    /// there was built from the same inputs (see [`BuildInputs`]; `identity`: this toolchain's,
    /// [`Toolchain::identity`]): then it is kept.
    fn build(&self, dir: &Path, job: &Job, out: &Path, identity: &str) -> anyhow::Result<()> {
        let target = out.join(&job.file);
        let mut inputs = BuildInputs::new(self.language, job.world);
        inputs.add("toolchain", identity.as_bytes());
        let mut cmd = match self.language {
            Language::Python => {
                let mut cmd = Command::new(&self.program);
                cmd.args([
                    "-d",
                    "wit/operator.wit",
                    "-w",
                    job.world,
                    "componentize",
                    "app",
                ]);
                for path in python_paths(dir, &job.worker)? {
                    inputs.add_tree(&path)?;
                    cmd.arg("-p").arg(path);
                }
                // componentize-py bundles an active virtualenv's packages: build from the
                // paths above only.
                cmd.env_remove("VIRTUAL_ENV");
                cmd
            }
            _ => {
                ensure_node_modules(dir)?;
                let bundle = out.join(format!("{}.bundle.js", job.file.trim_end_matches(".wasm")));
                let bundler = self.bundler.as_ref().ok_or_else(|| anyhow!("no bundler"))?;
                run(Command::new("node")
                    .arg(bundler)
                    .arg(job.worker.join("worker.js").canonicalize()?)
                    .arg(&bundle)
                    .arg(job.world))
                .context("bundling the worker with its imports")?;
                // The bundle holds every module the worker imports.
                let bundled = std::fs::read(&bundle)
                    .with_context(|| format!("reading the bundle {}", bundle.display()))?;
                inputs.add("bundle", &bundled);
                let mut cmd = Command::new("node");
                cmd.arg(&self.program)
                    .arg(&bundle)
                    .args(["--wit", "wit/operator.wit", "--world-name", job.world])
                    // The host links no wasi:http: without these the component imports it.
                    .args(["--disable", "http", "--disable", "fetch-event"]);
                if let Some(snapshot) = &self.snapshot {
                    cmd.arg("--snapshot").arg(snapshot);
                }
                cmd
            }
        };
        cmd.arg("-o").arg(&target).current_dir(out);
        let inputs = inputs.finish();
        if inputs.built(&target) {
            eprintln!(
                "{} unchanged: built before from the same inputs ({}), kept",
                job.file,
                inputs.short()
            );
            return Ok(());
        }
        eprintln!(
            "building {} from {} ({}) …",
            job.file,
            job.worker.display(),
            self.language.name()
        );
        inputs.forget(&target)?;
        run(&mut cmd).with_context(|| format!("building {}", job.file))?;
        inputs.record(&target)
    }

    /// The digest of what names this toolchain's version, read once per build: componentize-py's
    /// `--version`; for JavaScript the wrapper and bundler scripts, the toolchain's npm lock file
    /// (componentize-js pinned) and the snapshot program.
    fn identity(&self) -> anyhow::Result<String> {
        let Some(bundler) = &self.bundler else {
            let version = Command::new(&self.program)
                .arg("--version")
                .output()
                .with_context(|| format!("running {} --version", self.program.display()))?;
            return Ok(crate::modules::digest_of(&version.stdout));
        };
        let mut identity = Vec::new();
        let lock = self.program.with_file_name("package-lock.json");
        for file in [&self.program, bundler, &lock]
            .into_iter()
            .chain(self.snapshot.as_ref())
        {
            identity.extend(
                std::fs::read(file).with_context(|| format!("reading {}", file.display()))?,
            );
        }
        Ok(crate::modules::digest_of(&identity))
    }
}

// ---- Rebuilding only what changed ----

/// The inputs one Python or JavaScript component is built from, hashed: the toolchain's
/// version, the WIT world, and the worker's sources (JavaScript: its bundle, which holds every
/// module it imports; Python: every file of the directories componentize-py reads). Python
/// snapshots are not byte-reproducible (CPython's heap differs from build to build), so without
/// this each build of unchanged workers gave new digests, and `wasmpilot deploy` a module swap
/// that runs every resource of the operator again; JavaScript ones are (wasmpilot-js-snapshot),
/// and are kept as well rather than built again. `<file>.inputs`, beside the
/// built file, holds this hash and the file's own digest; a file that no longer has that
/// digest (edited, or a build cut short) is built again.
struct BuildInputs {
    hasher: Sha256,
}

/// The hash of a finished [`BuildInputs`].
struct InputsDigest(String);

impl BuildInputs {
    fn new(language: Language, world: &str) -> Self {
        let mut inputs = Self {
            hasher: Sha256::new(),
        };
        inputs.add("language", language.name().as_bytes());
        inputs.add("world", world.as_bytes());
        inputs.add("wit", OPERATOR_WIT.as_bytes());
        inputs
    }

    /// Adds one named input (length-prefixed, so no two sequences hash alike).
    fn add(&mut self, name: &str, bytes: &[u8]) {
        for part in [name.as_bytes(), bytes] {
            self.hasher.update((part.len() as u64).to_le_bytes());
            self.hasher.update(part);
        }
    }

    /// Adds every file under `root` by its relative path, in path order (`__pycache__`,
    /// `node_modules` and hidden entries left out: none of them is a source).
    fn add_tree(&mut self, root: &Path) -> anyhow::Result<()> {
        let mut pending = vec![root.to_path_buf()];
        let mut files = Vec::new();
        while let Some(dir) = pending.pop() {
            let entries =
                std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
            for entry in entries {
                let path = entry?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if name.starts_with('.') || name == "__pycache__" || name == "node_modules" {
                    continue;
                }
                if path.is_dir() {
                    pending.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        files.sort();
        self.add("tree", root.to_string_lossy().as_bytes());
        for file in files {
            let relative = file.strip_prefix(root).unwrap_or(&file);
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            self.add(&relative.to_string_lossy(), &bytes);
        }
        Ok(())
    }

    fn finish(self) -> InputsDigest {
        InputsDigest(format!("sha256:{}", hex::encode(self.hasher.finalize())))
    }
}

impl InputsDigest {
    fn short(&self) -> &str {
        &self.0[..self.0.len().min(19)]
    }

    fn stamp(target: &Path) -> PathBuf {
        let mut name = target.as_os_str().to_owned();
        name.push(".inputs");
        PathBuf::from(name)
    }

    /// Whether `target` was built from these inputs and is still what that build wrote.
    fn built(&self, target: &Path) -> bool {
        let Ok(stamp) = std::fs::read_to_string(Self::stamp(target)) else {
            return false;
        };
        let Ok(bytes) = std::fs::read(target) else {
            return false;
        };
        stamp == self.stamp_text(&bytes)
    }

    /// Removes the stamp before a build, so a build that fails leaves none.
    fn forget(&self, target: &Path) -> anyhow::Result<()> {
        match std::fs::remove_file(Self::stamp(target)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", Self::stamp(target).display()))
            }
            _ => Ok(()),
        }
    }

    fn record(&self, target: &Path) -> anyhow::Result<()> {
        let bytes =
            std::fs::read(target).with_context(|| format!("reading {}", target.display()))?;
        let stamp = Self::stamp(target);
        std::fs::write(&stamp, self.stamp_text(&bytes))
            .with_context(|| format!("writing {}", stamp.display()))
    }

    fn stamp_text(&self, built: &[u8]) -> String {
        format!(
            "inputs {}\nbuilt {}\n",
            self.0,
            crate::modules::digest_of(built)
        )
    }
}

/// Runs a command, its output shown; an error names the command when it fails.
fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// `rel` under the nearest ancestor of `dir` where `is_it` holds, else under the wasmpilot
/// checkout this binary was built from: where an SDK is found for a project that names none.
pub fn in_checkout(dir: &Path, rel: &str, is_it: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let built = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    dir.ancestors()
        .chain(std::iter::once(built))
        .map(|a| a.join(rel))
        .find(|candidate| is_it(candidate))
}

/// Whether `src` holds the Python guest SDK's package (`guest-sdk-python/src`).
pub fn holds_python_sdk(src: &Path) -> bool {
    src.join("wasmpilot_guest").is_dir()
}

/// What a Python worker imports from: its own directory, the project's `shared/`, and the
/// wasmpilot_guest SDK (`$WASMPILOT_PYTHON_SDK`, else the entry of the project's pytest
/// `pythonpath` that holds it, as `wasmpilot init` writes it, else `guest-sdk-python/src` of an
/// enclosing wasmpilot checkout, else of the checkout this binary was built from).
fn python_paths(dir: &Path, worker: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = vec![worker.canonicalize()?];
    let shared = dir.join("shared");
    if shared.is_dir() {
        paths.push(shared.canonicalize()?);
    }
    let sdk = std::env::var_os("WASMPILOT_PYTHON_SDK")
        .map(PathBuf::from)
        .or_else(|| {
            pyproject_pythonpath(dir)
                .into_iter()
                .map(|entry| dir.join(entry))
                .find(|candidate| holds_python_sdk(candidate))
        })
        .or_else(|| {
            let dir = dir.canonicalize().ok()?;
            in_checkout(&dir, "guest-sdk-python/src", holds_python_sdk)
        })
        .ok_or_else(|| {
            anyhow!("the Python guest SDK (wasmpilot_guest) was not found: name it in pyproject.toml's pythonpath (as `wasmpilot init --sdk-path` does) or set WASMPILOT_PYTHON_SDK to the directory holding it (guest-sdk-python/src of a wasmpilot checkout)")
        })?;
    paths.push(sdk.canonicalize().unwrap_or(sdk));
    Ok(paths)
}

/// The entries of `pythonpath = ["…", …]` in a project's pyproject.toml (pytest's setting, one
/// line, as `wasmpilot init` writes it); none without the file or the line.
fn pyproject_pythonpath(dir: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(dir.join("pyproject.toml")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("pythonpath"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .filter_map(|rest| {
            let list = rest.trim().strip_prefix('[')?;
            Some(list[..list.find(']')?].to_string())
        })
        .flat_map(|list| {
            list.split(',')
                .map(|entry| {
                    entry
                        .trim()
                        .trim_matches(|c| c == '"' || c == '\'')
                        .to_string()
                })
                .filter(|entry| !entry.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `npm install` in a JavaScript project whose dependencies are not installed yet.
fn ensure_node_modules(dir: &Path) -> anyhow::Result<()> {
    if dir.join("package.json").is_file() && !dir.join("node_modules").is_dir() {
        eprintln!("installing {}'s npm dependencies …", dir.display());
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir))
        .context("npm install (is node 20 or newer installed?)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(name)
    }

    #[test]
    fn a_python_project_names_its_sdk_in_pyproject() {
        if std::env::var_os("WASMPILOT_PYTHON_SDK").is_some() {
            eprintln!("SKIPPED: WASMPILOT_PYTHON_SDK is set and wins over pyproject.toml");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let project = work.path().join("project");
        let sdk = work.path().join("elsewhere/guest-sdk-python/src");
        std::fs::create_dir_all(sdk.join("wasmpilot_guest")).unwrap();
        std::fs::create_dir_all(project.join("workers/sync")).unwrap();
        std::fs::write(
            project.join("pyproject.toml"),
            "[tool.pytest.ini_options]\npythonpath = [\"shared\", '../elsewhere/guest-sdk-python/src']\n",
        )
        .unwrap();
        assert_eq!(
            pyproject_pythonpath(&project),
            ["shared", "../elsewhere/guest-sdk-python/src"]
        );
        let paths = python_paths(&project, &project.join("workers/sync")).unwrap();
        assert_eq!(
            paths.last(),
            Some(&sdk.canonicalize().unwrap()),
            "{paths:?}"
        );
        // Without the line, the checkout this binary was built from.
        std::fs::write(
            project.join("pyproject.toml"),
            "[tool.mypy]\nstrict = true\n",
        )
        .unwrap();
        assert!(pyproject_pythonpath(&project).is_empty());
        let paths = python_paths(&project, &project.join("workers/sync")).unwrap();
        assert!(
            paths
                .last()
                .is_some_and(|p| p.ends_with("guest-sdk-python/src"))
                && paths.last() != Some(&sdk.canonicalize().unwrap()),
            "{paths:?}"
        );
    }

    #[test]
    fn the_examples_languages_are_recognised() {
        assert_eq!(language(&example("autoroute")).unwrap(), Language::Rust);
        assert_eq!(
            language(&example("autoroute-python")).unwrap(),
            Language::Python
        );
        assert_eq!(
            language(&example("autoroute-js")).unwrap(),
            Language::JavaScript
        );
        let empty = tempfile::tempdir().unwrap();
        let e = language(empty.path()).unwrap_err().to_string();
        assert!(e.contains("--lang rust|python|javascript"), "{e}");
    }

    #[test]
    fn module_files_are_matched_with_worker_directories() {
        let jobs = jobs(&example("autoroute-python"), Language::Python).unwrap();
        let pairs: Vec<(String, String)> = jobs
            .iter()
            .map(|j| {
                (
                    j.file.clone(),
                    j.worker.file_name().unwrap().to_string_lossy().into_owned(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("autoroute_initializing.wasm".into(), "initializing".into()),
                ("autoroute_ready.wasm".into(), "ready".into()),
                ("autoroute_syncing.wasm".into(), "syncing".into()),
            ]
        );
    }
}
