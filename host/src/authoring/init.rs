//! `wasmpilot init`: scaffolds an operator project — a types crate (spec, status with
//! `HostStatus`, CRD generator and drift test), one worker crate per phase (a stub that moves
//! to the next phase, with a native test), `operator.yaml`, `sample.yaml` and a README.
//!
//! Where the project lives decides how cargo sees it:
//! - outside any cargo workspace (or with `--standalone`), the project root gets a
//!   `Cargo.toml` with `[workspace]`: it builds on its own, with its own `Cargo.lock`;
//! - inside a workspace, its crates are added to that workspace's `members` (as `cargo new`
//!   does) and the workspace's profiles apply.
//!
//! The crates never inherit from a workspace (`version.workspace = true` etc.), so the same
//! files work both ways. `wasmpilot-guest` is a path dependency when the project is inside a
//! wasmpilot checkout (relative path) or `--sdk-path` names one, else `--sdk-version`.

use anyhow::{anyhow, bail, Context};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Versions the generated crates depend on: the ones wasmpilot-guest is built against (a test
/// checks them against this workspace's `Cargo.toml`).
const KUBE_VERSION: &str = "5";
const K8S_OPENAPI_VERSION: &str = "0.29";
const K8S_FEATURE: &str = "v1_33";
const SCHEMARS_VERSION: &str = "1";

/// The guest SDK this `wasmpilot` was built from, used when nothing else names one.
const BUILT_SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk");

mod templates {
    pub const WORKSPACE: &str = include_str!("templates/workspace.Cargo.toml");
    pub const GITIGNORE: &str = include_str!("templates/gitignore");
    pub const TYPES_CARGO: &str = include_str!("templates/types.Cargo.toml");
    pub const TYPES_LIB: &str = include_str!("templates/types.lib.rs");
    pub const TYPES_CRDGEN: &str = include_str!("templates/types.crdgen.rs");
    pub const WORKER_CARGO: &str = include_str!("templates/worker.Cargo.toml");
    pub const WORKER_LIB: &str = include_str!("templates/worker.lib.rs");
    pub const OPERATOR: &str = include_str!("templates/operator.yaml");
    pub const OPERATOR_PHASE: &str = include_str!("templates/operator.phase.yaml");
    pub const SAMPLE: &str = include_str!("templates/sample.yaml");
    pub const README: &str = include_str!("templates/README.md");
}

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
    /// A wasmpilot-guest checkout to depend on by path (default: the enclosing wasmpilot
    /// checkout, else the one this binary was built from).
    #[arg(long, conflicts_with = "sdk_version")]
    pub sdk_path: Option<PathBuf>,
    /// Depend on wasmpilot-guest from the registry at this version instead of by path.
    #[arg(long)]
    pub sdk_version: Option<String>,
    /// Make the project its own cargo workspace even inside another workspace.
    #[arg(long)]
    pub standalone: bool,
    /// Do not run the CRD generator (cargo) after writing the files.
    #[arg(long)]
    pub no_crdgen: bool,
}

/// One phase, with the names derived from it.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseNames {
    /// As declared, e.g. `WaitingForPods`.
    pub name: String,
    /// Directory and crate suffix, e.g. `waiting-for-pods`.
    pub kebab: String,
    /// The worker type, e.g. `WaitingForPods`.
    pub ident: String,
    /// The constant in `phases`, e.g. `WAITING_FOR_PODS`.
    pub constant: String,
}

/// Everything the templates are filled from.
#[derive(Clone, Debug)]
pub struct Project {
    pub name: String,
    pub kind: String,
    pub group: String,
    pub version: String,
    pub plural: String,
    pub phases: Vec<PhaseNames>,
}

/// How the crates depend on wasmpilot-guest.
#[derive(Clone, Debug, PartialEq)]
pub enum Sdk {
    /// A path dependency on this directory (absolute, canonical).
    Path(PathBuf),
    /// A registry dependency at this version.
    Version(String),
}

/// How cargo sees the project.
#[derive(Clone, Debug, PartialEq)]
pub enum Workspace {
    /// The project root has `[workspace]`.
    Standalone,
    /// The crates are members of the workspace whose `Cargo.toml` is at this path.
    Member(PathBuf),
}

/// What `init` wrote.
#[derive(Debug)]
pub struct Scaffold {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub workspace: Workspace,
    pub sdk: Sdk,
}

impl Project {
    pub fn new(
        kind: &str,
        group: &str,
        version: &str,
        phases: &[String],
        name: Option<&str>,
        plural: Option<&str>,
    ) -> anyhow::Result<Project> {
        if !kind.starts_with(|c: char| c.is_ascii_uppercase())
            || !kind.chars().all(|c| c.is_ascii_alphanumeric())
        {
            bail!("--kind {kind:?} must be UpperCamelCase letters and digits, e.g. AutoRoute");
        }
        if !group.contains('.') || !is_dns_subdomain(group) {
            bail!("--group {group:?} must be a lowercase DNS name with at least one dot, e.g. examples.io");
        }
        if !is_kube_version(version) {
            bail!("--version {version:?} must look like v1, v2beta1 or v1alpha1");
        }
        let name = match name {
            Some(n) => n.to_string(),
            None => kind.to_ascii_lowercase(),
        };
        if !is_dns_label(&name) {
            bail!("--name {name:?} must be lowercase letters, digits and '-' (it names the WasmOperator and the crates)");
        }
        let plural = match plural {
            Some(p) => p.to_string(),
            None => plural_of(&kind.to_ascii_lowercase()),
        };
        if !is_dns_label(&plural) {
            bail!("--plural {plural:?} must be lowercase letters, digits and '-'");
        }
        if phases.is_empty() || phases.iter().any(|p| p.trim().is_empty()) {
            bail!(
                "--phases needs at least one phase name, e.g. --phases Initializing,Syncing,Ready"
            );
        }
        let mut names: Vec<PhaseNames> = Vec::new();
        for p in phases {
            let p = p.trim();
            let valid = p.len() <= 63
                && p.starts_with(|c: char| c.is_ascii_alphanumeric())
                && p.ends_with(|c: char| c.is_ascii_alphanumeric())
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !valid {
                bail!("phase {p:?}: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit");
            }
            let phase = PhaseNames::new(p);
            if let Some(other) = names
                .iter()
                .find(|o| o.kebab == phase.kebab || o.name == phase.name)
            {
                bail!(
                    "phases {:?} and {p:?} would get the same crate name {}-{}: rename one",
                    other.name,
                    name,
                    phase.kebab
                );
            }
            names.push(phase);
        }
        Ok(Project {
            name,
            kind: kind.to_string(),
            group: group.to_string(),
            version: version.to_string(),
            plural,
            phases: names,
        })
    }

    fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    fn types_crate(&self) -> String {
        format!("{}-types", self.name)
    }

    fn crd_file(&self) -> String {
        format!("{}.yaml", self.kind.to_ascii_lowercase())
    }

    fn worker_crate(&self, p: &PhaseNames) -> String {
        format!("{}-{}", self.name, p.kebab)
    }

    /// The phase a stub moves to: the next one in the list; the last one stays.
    fn next_of(&self, i: usize) -> &PhaseNames {
        self.phases.get(i + 1).unwrap_or(&self.phases[i])
    }

    /// Crate directories relative to the project root, types first.
    pub fn crate_dirs(&self) -> Vec<String> {
        std::iter::once("types".to_string())
            .chain(self.phases.iter().map(|p| format!("workers/{}", p.kebab)))
            .collect()
    }

    fn phase_list(&self) -> String {
        self.phases
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    }

    fn common_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("name", self.name.clone()),
            ("kind", self.kind.clone()),
            ("kind_lower", self.kind.to_ascii_lowercase()),
            ("group", self.group.clone()),
            ("version", self.version.clone()),
            ("api_version", self.api_version()),
            ("plural", self.plural.clone()),
            ("types_crate", self.types_crate()),
            ("types_ident", self.types_crate().replace('-', "_")),
            ("crdgen", format!("{}-crdgen", self.name)),
            ("crd_file", self.crd_file()),
            ("phase_list", self.phase_list()),
            ("kube_version", KUBE_VERSION.into()),
            ("k8s_openapi_version", K8S_OPENAPI_VERSION.into()),
            ("k8s_feature", K8S_FEATURE.into()),
            ("schemars_version", SCHEMARS_VERSION.into()),
        ]
    }

    /// Every file of the project: path relative to the root → contents. `sdk_dep` renders the
    /// wasmpilot-guest dependency line for a crate directory (relative to the root).
    pub fn files(
        &self,
        workspace: &Workspace,
        sdk_dep: &dyn Fn(&str) -> String,
    ) -> anyhow::Result<Vec<(String, String)>> {
        let common = self.common_vars();
        let with = |extra: Vec<(&'static str, String)>| {
            let mut v = common.clone();
            v.extend(extra);
            v
        };
        let mut files = Vec::new();
        if *workspace == Workspace::Standalone {
            let members: String = self
                .crate_dirs()
                .iter()
                .map(|d| format!("    \"{d}\",\n"))
                .collect();
            files.push((
                "Cargo.toml".into(),
                render(templates::WORKSPACE, &with(vec![("members", members)]))?,
            ));
            files.push((".gitignore".into(), templates::GITIGNORE.to_string()));
        }
        let consts: String = self
            .phases
            .iter()
            .map(|p| format!("    pub const {}: &str = {:?};\n", p.constant, p.name))
            .collect();
        let types_vars = with(vec![
            ("sdk_dep", sdk_dep("types")),
            ("phase_consts", consts),
        ]);
        files.push((
            "types/Cargo.toml".into(),
            render(templates::TYPES_CARGO, &types_vars)?,
        ));
        files.push((
            "types/src/lib.rs".into(),
            render(templates::TYPES_LIB, &types_vars)?,
        ));
        files.push((
            "types/src/crdgen.rs".into(),
            render(templates::TYPES_CRDGEN, &types_vars)?,
        ));
        let mut entries = Vec::new();
        for (i, p) in self.phases.iter().enumerate() {
            let next = self.next_of(i);
            let stays = next.name == p.name;
            let summary = if stays {
                format!(
                    "stays in {} (edit: what keeps it here, what sends it back).",
                    p.name
                )
            } else {
                format!(
                    "moves on to {} (edit: what this phase does first).",
                    next.name
                )
            };
            let dir = format!("workers/{}", p.kebab);
            let vars = with(vec![
                ("sdk_dep", sdk_dep(&dir)),
                ("crate", self.worker_crate(p)),
                ("phase", p.name.clone()),
                ("phase_ident", p.ident.clone()),
                ("phase_const", p.constant.clone()),
                ("next_const", next.constant.clone()),
                ("summary", summary.clone()),
                ("summary_lower", lower_first(&summary)),
                (
                    "log_message",
                    if stays {
                        format!("{}: scaffolded worker, staying", p.name)
                    } else {
                        format!("{}: scaffolded worker, moving on to {}", p.name, next.name)
                    },
                ),
                (
                    "test_name",
                    if stays {
                        format!("stays_{}", p.constant.to_ascii_lowercase())
                    } else {
                        format!("moves_to_{}", next.constant.to_ascii_lowercase())
                    },
                ),
            ]);
            files.push((
                format!("{dir}/Cargo.toml"),
                render(templates::WORKER_CARGO, &vars)?,
            ));
            files.push((
                format!("{dir}/src/lib.rs"),
                render(templates::WORKER_LIB, &vars)?,
            ));
            entries.push(render(
                templates::OPERATOR_PHASE,
                &with(vec![
                    ("phase", p.name.clone()),
                    (
                        "summary_yaml",
                        serde_json::to_string(&summary).unwrap_or_default(),
                    ),
                    (
                        "initial",
                        if i == 0 {
                            "\n    initial: true".into()
                        } else {
                            String::new()
                        },
                    ),
                    (
                        "artifact",
                        crate::deploy::ComponentCrates::artifact(&self.worker_crate(p)),
                    ),
                    ("next", next.name.clone()),
                ]),
            )?);
        }
        files.push((
            "operator.yaml".into(),
            render(
                templates::OPERATOR,
                &with(vec![(
                    "phase_entries",
                    entries.concat().trim_end().to_string(),
                )]),
            )?,
        ));
        files.push(("sample.yaml".into(), render(templates::SAMPLE, &common)?));
        let mut table = String::from("| phase | worker crate | moves to |\n|---|---|---|\n");
        for (i, p) in self.phases.iter().enumerate() {
            table.push_str(&format!(
                "| `{}`{} | `workers/{}` ({}) | `{}` |\n",
                p.name,
                if i == 0 { " (initial)" } else { "" },
                p.kebab,
                self.worker_crate(p),
                self.next_of(i).name
            ));
        }
        let workspace_note = match workspace {
            Workspace::Standalone => "The project is a cargo workspace of its own (`Cargo.toml` at the root lists the\ncrates, with the release profile for components).".to_string(),
            Workspace::Member(_) => "The crates are members of the enclosing cargo workspace (`wasmpilot init` added\nthem to its `members`); its release profile applies to the components.".to_string(),
        };
        let pad = " ".repeat(23usize.saturating_sub(5 + self.crd_file().len()).max(1));
        files.push((
            "README.md".into(),
            render(
                templates::README,
                &with(vec![
                    ("phase_table", table.trim_end().to_string()),
                    ("workspace_note", workspace_note),
                    ("crd_pad", pad),
                ]),
            )?,
        ));
        Ok(files)
    }
}

impl PhaseNames {
    pub fn new(name: &str) -> PhaseNames {
        let words = words(name);
        let kebab = words.join("-");
        let mut ident: String = words.iter().map(|w| capitalize(w)).collect();
        if ident.starts_with(|c: char| c.is_ascii_digit()) {
            ident.insert_str(0, "Phase");
        }
        let mut constant = words.join("_").to_ascii_uppercase();
        if constant.starts_with(|c: char| c.is_ascii_digit()) {
            constant.insert_str(0, "PHASE_");
        }
        PhaseNames {
            name: name.to_string(),
            kebab,
            ident,
            constant,
        }
    }
}

/// Splits `WaitingForPods`, `waiting-for_pods`, `HTTPReady` into lowercase words.
fn words(s: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1);
        let boundary = c.is_ascii_uppercase()
            && prev.is_some_and(|p| {
                p.is_ascii_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
            });
        if boundary && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        current.push(c.to_ascii_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_ascii_lowercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// The English plural Kubernetes users expect for simple kinds.
fn plural_of(s: &str) -> String {
    if s.ends_with('s') || s.ends_with('x') || s.ends_with("ch") || s.ends_with("sh") {
        format!("{s}es")
    } else if s.ends_with('y') && !s.ends_with("ay") && !s.ends_with("ey") && !s.ends_with("oy") {
        format!("{}ies", &s[..s.len() - 1])
    } else {
        format!("{s}s")
    }
}

/// `v1`, `v2beta1`, `v1alpha1`: what Kubernetes accepts as a CRD version name and sorts.
fn is_kube_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let major = rest.chars().take_while(char::is_ascii_digit).count();
    if major == 0 {
        return false;
    }
    let rest = &rest[major..];
    if rest.is_empty() {
        return true;
    }
    ["alpha", "beta"].iter().any(|tag| {
        rest.strip_prefix(tag)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label_or_digits)
}

fn is_dns_label_or_digits(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Fills `{{key}}` placeholders; a placeholder without a value is a bug in the templates.
pub fn render(template: &str, vars: &[(&str, String)]) -> anyhow::Result<String> {
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    if let Some(start) = out.find("{{") {
        let rest = &out[start + 2..];
        if let Some(end) = rest.find("}}") {
            let key = &rest[..end];
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!("template placeholder {{{{{key}}}}} has no value (a wasmpilot bug)");
            }
        }
    }
    Ok(out)
}

/// A path from directory `from` to `to` (both absolute), e.g. `../../guest-sdk`.
pub fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c.as_os_str());
    }
    if rel.as_os_str().is_empty() {
        rel.push(".");
    }
    rel
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
    for ancestor in dir.ancestors() {
        let candidate = ancestor.join("guest-sdk");
        if is_guest_sdk(&candidate) {
            return Ok(Sdk::Path(candidate.canonicalize()?));
        }
    }
    let built = Path::new(BUILT_SDK_DIR);
    if is_guest_sdk(built) {
        return Ok(Sdk::Path(built.canonicalize()?));
    }
    bail!("cannot find the wasmpilot-guest SDK: pass --sdk-path <wasmpilot checkout>/guest-sdk, or --sdk-version <version> to use a published one")
}

/// The nearest ancestor `Cargo.toml` (above `dir`) that declares `[workspace]`.
pub fn enclosing_workspace(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().skip(1).find_map(|a| {
        let manifest = a.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).ok()?;
        text.lines()
            .any(|l| l.trim() == "[workspace]")
            .then_some(manifest)
    })
}

/// Adds `members` to the `[workspace]` `members = [...]` array of a Cargo.toml text, like
/// `cargo new` does. `None` when the file has no such array this can edit safely.
pub fn add_workspace_members(toml: &str, members: &[String]) -> Option<String> {
    let lines: Vec<&str> = toml.lines().collect();
    let ws = lines.iter().position(|l| l.trim() == "[workspace]")?;
    let section_end = lines[ws + 1..]
        .iter()
        .position(|l| l.trim_start().starts_with('['))
        .map_or(lines.len(), |i| ws + 1 + i);
    let start = (ws + 1..section_end).find(|&i| {
        let l = lines[i].trim_start();
        l.starts_with("members") && l["members".len()..].trim_start().starts_with('=')
    })?;
    let missing: Vec<&String> = members
        .iter()
        .filter(|m| {
            let quoted = format!("\"{m}\"");
            !lines[start..section_end]
                .iter()
                .any(|l| l.contains(&quoted))
        })
        .collect();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    if missing.is_empty() {
        return Some(toml.to_string());
    }
    let end = (start..section_end).find(|&i| lines[i].contains(']'))?;
    if end == start {
        // One line: members = ["a", "b"]
        let line = lines[start];
        let close = line.rfind(']')?;
        let inner = line[line.find('[')? + 1..close]
            .trim()
            .trim_end_matches(',');
        let mut items: Vec<String> = if inner.is_empty() {
            Vec::new()
        } else {
            vec![inner.to_string()]
        };
        items.extend(missing.iter().map(|m| format!("\"{m}\"")));
        out[start] = format!(
            "{}[{}]{}",
            &line[..line.find('[')?],
            items.join(", "),
            &line[close + 1..]
        );
    } else {
        let indent = lines[start + 1..end]
            .iter()
            .find(|l| !l.trim().is_empty())
            .map(|l| l[..l.len() - l.trim_start().len()].to_string())
            .unwrap_or_else(|| "    ".into());
        let closing = lines[end];
        let bracket = closing.find(']')?;
        let before = &closing[..bracket];
        let mut new_lines = Vec::new();
        if !before.trim().is_empty() {
            // The last element shares the line with `]`.
            let b = before.trim_end();
            new_lines.push(if b.ends_with(',') {
                b.to_string()
            } else {
                format!("{b},")
            });
        } else if let Some(last) = (start..end).rev().find(|&i| !out[i].trim().is_empty()) {
            let l = out[last].trim_end().to_string();
            if last > start && !l.ends_with(',') && !l.ends_with('[') {
                out[last] = format!("{l},");
            }
        }
        new_lines.extend(missing.iter().map(|m| format!("{indent}\"{m}\",")));
        new_lines.push(closing[bracket..].to_string());
        out.splice(end..=end, new_lines);
    }
    let mut text = out.join("\n");
    if toml.ends_with('\n') {
        text.push('\n');
    }
    Some(text)
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
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = args.dir.canonicalize()?;
    let sdk = choose_sdk(&dir, args.sdk_path.as_deref(), args.sdk_version.as_deref())?;
    let workspace = match enclosing_workspace(&dir) {
        Some(root) if !args.standalone => Workspace::Member(root),
        _ => Workspace::Standalone,
    };
    let sdk_dep = |crate_dir: &str| match &sdk {
        Sdk::Path(p) => format!(
            "wasmpilot-guest = {{ path = \"{}\" }}",
            relative_path(&dir.join(crate_dir), p).display()
        ),
        Sdk::Version(v) => format!("wasmpilot-guest = \"{v}\""),
    };
    let files = project.files(&workspace, &sdk_dep)?;
    let mut written = Vec::new();
    for (rel, text) in &files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    std::fs::create_dir_all(dir.join("crds"))?;
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
        let text = std::fs::read_to_string(root)?;
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
        generate_crd(&dir, &project, &crd_path).with_context(|| {
            format!(
                "the project is written; generate the CRD yourself with: cd {} && {crdgen_cmd}",
                dir.display()
            )
        })?;
        written.push(crd_path);
    }
    eprintln!(
        "\nnext:\n  cd {}\n  cargo test                  # the stubs' native tests and the CRD drift test\n  wasmpilot build .           # components for wasm32-wasip2\n  wasmpilot simulate . --resource sample.yaml\n  see README.md for the whole loop",
        dir.display()
    );
    Ok(Scaffold {
        dir,
        files: written,
        workspace,
        sdk,
    })
}

/// Runs the project's CRD generator and writes its output.
fn generate_crd(dir: &Path, project: &Project, out: &Path) -> anyhow::Result<()> {
    let output = Command::new("cargo")
        .args(["run", "-q", "-p", &project.types_crate(), "--bin"])
        .arg(format!("{}-crdgen", project.name))
        .current_dir(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo (is it installed and on PATH?)")?;
    if !output.status.success() {
        return Err(anyhow!("the CRD generator failed ({})", output.status));
    }
    std::fs::write(out, &output.stdout).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn autoroute() -> Project {
        Project::new(
            "AutoRoute",
            "examples.io",
            "v1",
            &["Initializing".into(), "Syncing".into(), "Ready".into()],
            None,
            None,
        )
        .unwrap()
    }

    #[test]
    fn names_derive_from_phases() {
        let p = PhaseNames::new("WaitingForPods");
        assert_eq!(
            (p.kebab.as_str(), p.ident.as_str(), p.constant.as_str()),
            ("waiting-for-pods", "WaitingForPods", "WAITING_FOR_PODS")
        );
        let p = PhaseNames::new("http-ready_2");
        assert_eq!(
            (p.kebab.as_str(), p.ident.as_str(), p.constant.as_str()),
            ("http-ready-2", "HttpReady2", "HTTP_READY_2")
        );
        assert_eq!(PhaseNames::new("HTTPReady").kebab, "http-ready");
        assert_eq!(PhaseNames::new("3rd").ident, "Phase3rd");
        assert_eq!(plural_of("autoroute"), "autoroutes");
        assert_eq!(plural_of("policy"), "policies");
        assert_eq!(plural_of("gateway"), "gateways");
        assert_eq!(plural_of("mesh"), "meshes");
    }

    #[test]
    fn bad_arguments_say_what_to_pass() {
        let p = |kind: &str, group: &str, version: &str, phases: &[&str]| {
            Project::new(
                kind,
                group,
                version,
                &phases.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                None,
                None,
            )
            .map(|_| ())
            .unwrap_err()
            .to_string()
        };
        assert!(p("autoRoute", "examples.io", "v1", &["A"]).contains("UpperCamelCase"));
        assert!(p("AutoRoute", "examples", "v1", &["A"]).contains("at least one dot"));
        assert!(p("AutoRoute", "examples.io", "1", &["A"]).contains("v1alpha1"));
        assert!(p("AutoRoute", "examples.io", "v1", &["A b"]).contains("phase \"A b\""));
        assert!(
            p("AutoRoute", "examples.io", "v1", &["Ready", "ready"]).contains("same crate name")
        );
        for ok in ["v1", "v2beta1", "v1alpha12"] {
            assert!(
                Project::new("A", "a.io", ok, &["P".into()], None, None).is_ok(),
                "{ok}"
            );
        }
        for bad in ["v1beta", "valpha1", "v"] {
            assert!(
                Project::new("A", "a.io", bad, &["P".into()], None, None).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_template_placeholder_is_filled() {
        let project = autoroute();
        let sdk = |d: &str| format!("wasmpilot-guest = {{ path = \"{d}/sdk\" }}");
        for ws in [
            Workspace::Standalone,
            Workspace::Member("/x/Cargo.toml".into()),
        ] {
            let files = project.files(&ws, &sdk).unwrap();
            for (path, text) in &files {
                assert!(!text.contains("{{"), "{path}: {text}");
            }
            let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(names.contains(&"Cargo.toml"), ws == Workspace::Standalone);
            assert!(names.contains(&"workers/syncing/src/lib.rs"));
        }
        assert!(render("a {{missing}} b", &[]).is_err());
        assert_eq!(render("{{a}}", &[("a", "x".into())]).unwrap(), "x");
    }

    #[test]
    fn operator_yaml_is_a_valid_definition_with_next_lists() {
        let files = autoroute()
            .files(&Workspace::Standalone, &|_| String::new())
            .unwrap();
        let yaml = &files.iter().find(|(p, _)| p == "operator.yaml").unwrap().1;
        let op: crate::crd::WasmOperator = serde_yaml::from_str(yaml).unwrap();
        let def = crate::definition::OperatorDefinition::validate("autoroute", &op.spec).unwrap();
        assert_eq!(def.initial_phase, "Initializing");
        assert_eq!(def.phase("Initializing").unwrap().next, ["Syncing"]);
        assert_eq!(def.phase("Ready").unwrap().next, ["Ready"]);
        let module = def.phase("Syncing").unwrap().module.clone().unwrap();
        assert_eq!(module.file.unwrap().path, "autoroute_syncing.wasm");
        let worker = &files
            .iter()
            .find(|(p, _)| p == "workers/ready/src/lib.rs")
            .unwrap()
            .1;
        assert!(worker.contains("Outcome::next(phases::READY)"), "{worker}");
        assert!(worker.contains("fn stays_ready()"), "{worker}");
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(Path::new("/r/examples/x/types"), Path::new("/r/guest-sdk")),
            PathBuf::from("../../../guest-sdk")
        );
        assert_eq!(
            relative_path(Path::new("/a/b"), Path::new("/a/b/c")),
            PathBuf::from("c")
        );
        assert_eq!(
            relative_path(Path::new("/a"), Path::new("/a")),
            PathBuf::from(".")
        );
    }

    #[test]
    fn workspace_members_are_added_like_cargo_new() {
        let multi = "[workspace]\nresolver = \"2\"\nmembers = [\n    \"host\",\n    \"guest-sdk\"\n]\ndefault-members = [\"host\"]\n\n[profile.release]\nlto = true\n";
        let out = add_workspace_members(multi, &["ops/a/types".into(), "host".into()]).unwrap();
        assert_eq!(
            out,
            "[workspace]\nresolver = \"2\"\nmembers = [\n    \"host\",\n    \"guest-sdk\",\n    \"ops/a/types\",\n]\ndefault-members = [\"host\"]\n\n[profile.release]\nlto = true\n"
        );
        let one = "[workspace]\nmembers = [\"a\", \"b\"]\n";
        assert_eq!(
            add_workspace_members(one, &["c".into()]).unwrap(),
            "[workspace]\nmembers = [\"a\", \"b\", \"c\"]\n"
        );
        let trailing = "[workspace]\nmembers = [\n  \"a\",\n  \"b\"]\n";
        assert_eq!(
            add_workspace_members(trailing, &["c".into()]).unwrap(),
            "[workspace]\nmembers = [\n  \"a\",\n  \"b\",\n  \"c\",\n]\n"
        );
        assert!(add_workspace_members("[package]\nname = \"x\"\n", &["c".into()]).is_none());
        assert!(add_workspace_members("[workspace]\nresolver = \"2\"\n", &["c".into()]).is_none());
        // This repository's own manifest can be edited.
        let root = include_str!("../../../Cargo.toml");
        let edited = add_workspace_members(root, &["examples/new/types".into()]).unwrap();
        assert!(
            edited.contains("    \"examples/new/types\",\n]"),
            "{edited}"
        );
    }

    #[test]
    fn dependency_versions_match_this_workspace() {
        let root = include_str!("../../../Cargo.toml");
        let dep = |name: &str| {
            root.lines()
                .find(|l| l.starts_with(&format!("{name} = ")))
                .unwrap_or_else(|| panic!("{name} in the workspace Cargo.toml"))
                .to_string()
        };
        assert!(dep("kube").contains(&format!("version = \"{KUBE_VERSION}\"")));
        assert!(dep("k8s-openapi").contains(&format!("version = \"{K8S_OPENAPI_VERSION}\"")));
        assert!(dep("k8s-openapi").contains(K8S_FEATURE));
        assert!(dep("schemars").contains(&format!("\"{SCHEMARS_VERSION}\"")));
    }
}
