//! The project `wasmpilot init` writes, as data: names derived from the kind and phases, and
//! every file rendered from the templates in `templates/` (included at compile time).

use super::generate;
use super::workspace::Workspace;
use anyhow::bail;

/// Versions the generated crates depend on: the ones wasmpilot-guest is built against (a test
/// checks them against this workspace's `Cargo.toml`).
const KUBE_VERSION: &str = "5";
const K8S_OPENAPI_VERSION: &str = "0.29";
const K8S_FEATURE: &str = "v1_33";
const SCHEMARS_VERSION: &str = "1";

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
    pub mod guest {
        pub const PYTHON_APP: &str = include_str!("templates/guest/python.app.py");
        pub const PYTHON_TEST: &str = include_str!("templates/guest/python.test.py");
        pub const PYPROJECT: &str = include_str!("templates/guest/python.pyproject.toml");
        pub const JS_WORKER: &str = include_str!("templates/guest/js.worker.js");
        pub const JS_TEST: &str = include_str!("templates/guest/js.test.js");
        pub const PACKAGE_JSON: &str = include_str!("templates/guest/js.package.json");
        pub const TSCONFIG: &str = include_str!("templates/guest/js.tsconfig.json");
        pub const CRD: &str = include_str!("templates/guest/crd.yaml");
        pub const README: &str = include_str!("templates/guest/README.md");
        pub const GITIGNORE: &str = include_str!("templates/guest/gitignore");
    }
}

/// The language of a project's workers (`wasmpilot init --lang`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    #[value(alias = "js")]
    Javascript,
}

/// A Python project's README: the finalizer worker to write.
const PYTHON_FINALIZER: &str = r#"and `workers/finalizer/app.py`:

```python
from datetime import timedelta
from typing import Any

import wasmpilot_guest as guest


class Finalizer(guest.FinalizerWorker):
    def finalize(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Finalized:
        # Declared inputs: FinalizerInputs(inputs).<input name>() (from phases import FinalizerInputs)
        # Not done yet: guest.Finalized.pending(timedelta(seconds=10))
        return guest.Finalized.done()


FinalizerWorker = guest.export_finalizer(Finalizer)
```"#;

/// A JavaScript project's README: the finalizer worker to write.
const JS_FINALIZER: &str = r#"and `workers/finalizer/worker.js`:

```js
import { exportFinalizer, Finalized } from '@wasmpilot/guest';

export class Finalizer {
  finalize(ctx, resource, inputs) {
    // Declared inputs: new FinalizerInputs(inputs).<input name>() (from '../../shared/phases.js')
    // Not done yet: Finalized.pending(10_000)
    return Finalized.done();
  }
}

export const finalizerWorker = exportFinalizer(Finalizer);
```"#;

/// A Python project's native tests, with the pinned toolchain's pytest
/// (`deploy/local/guest-toolchains.sh install`): what its README and `wasmpilot init` say.
pub const PYTHON_TEST_COMMAND: &str = "~/.cache/wasmpilot/toolchains/python/bin/pytest";
/// A Python project's type check, with the pinned toolchain's mypy.
pub const PYTHON_TYPECHECK_COMMAND: &str = "for w in workers/*/app.py; do ~/.cache/wasmpilot/toolchains/python/bin/mypy --strict \"$w\"; done";
/// A JavaScript project's type check, with the pinned toolchain's TypeScript (tsconfig.json).
pub const JS_TYPECHECK_COMMAND: &str =
    "~/.cache/wasmpilot/toolchains/js/node_modules/.bin/tsc --noEmit";

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
        if crate::definition::is_kubernetes_group(group) {
            bail!("--group {group:?} is reserved for Kubernetes' own APIs: use a domain of yours, e.g. examples.io");
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

    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    pub fn types_crate(&self) -> String {
        format!("{}-types", self.name)
    }

    pub fn crd_file(&self) -> String {
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

    /// The command that runs the project's tests: in a workspace of its own every member's;
    /// as members of a bigger workspace, its crates by name.
    pub fn test_command(&self, workspace: &Workspace) -> String {
        match workspace {
            Workspace::Standalone => "cargo test".into(),
            Workspace::Member(_) => {
                std::iter::once(format!("cargo test -p {}", self.types_crate()))
                    .chain(
                        self.phases
                            .iter()
                            .map(|p| format!("-p {}", self.worker_crate(p))),
                    )
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        }
    }

    pub fn phase_list(&self) -> String {
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
            ("a_kind", with_article(&self.kind, "a", "an")),
            ("a_kind_cap", with_article(&self.kind, "A", "An")),
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
            (
                "finalizer_artifact",
                crate::component_build::ComponentCrates::artifact(&format!(
                    "{}-finalizer",
                    self.name
                )),
            ),
        ]
    }

    /// The operator.yaml entries of every phase, each naming the module file
    /// `<name>_<phase>.wasm` (the artifact of the Rust crate, the component `wasmpilot build`
    /// makes of `workers/<phase>/` in the other languages).
    /// `types/src/phases.rs`: what `wasmpilot generate` writes for the scaffolded operator.yaml.
    fn phase_api(&self) -> anyhow::Result<String> {
        let (op, def) = parse_operator(&self.name, &self.operator_yaml()?)?;
        Ok(generate::render(&op, &def)?)
    }

    fn operator_yaml(&self) -> anyhow::Result<String> {
        let common = self.common_vars();
        let mut entries = Vec::new();
        for (i, p) in self.phases.iter().enumerate() {
            let next = self.next_of(i);
            let mut vars = common.clone();
            vars.extend([
                ("phase", p.name.clone()),
                (
                    "summary_yaml",
                    serde_json::to_string(&format!("Scaffolded: {}.", self.summary(i)))
                        .unwrap_or_default(),
                ),
                (
                    "initial",
                    match (i == 0, i + 1 == self.phases.len()) {
                        (true, true) => "\n    initial: true\n    # A resource here is done: Ready=True (kubectl wait, kstatus).\n    ready: true".into(),
                        (true, false) => "\n    initial: true".into(),
                        // The last phase is the steady one: a resource there counts as done.
                        (false, true) => "\n    # A resource here is done: Ready=True (kubectl wait, kstatus).\n    ready: true".into(),
                        (false, false) => String::new(),
                    },
                ),
                (
                    "artifact",
                    crate::component_build::ComponentCrates::artifact(&self.worker_crate(p)),
                ),
                ("next", next.name.clone()),
            ]);
            entries.push(render(templates::OPERATOR_PHASE, &vars)?);
        }
        let mut vars = common;
        vars.push(("phase_entries", entries.concat().trim_end().to_string()));
        render(templates::OPERATOR, &vars)
    }

    /// What the stub of phase `i` does.
    fn summary(&self, i: usize) -> String {
        let next = self.next_of(i);
        if next.name == self.phases[i].name {
            format!("stays in {}", next.name)
        } else {
            format!("moves on to {}", next.name)
        }
    }

    /// Every file of a project whose workers are in Python or JavaScript: per phase a worker
    /// (a subclass of the phase's generated `<Phase>Worker`) and its native test, the typed API
    /// `wasmpilot generate` writes for the scaffolded operator.yaml (`shared/phases.py`, or
    /// `shared/phases.js` and `.d.ts`), the package and type-checker settings (SDK at
    /// `sdk_path`, relative to the root), operator.yaml, an open-schema CRD, a sample and a README.
    pub fn guest_files(&self, lang: Lang, sdk_path: &str) -> anyhow::Result<Vec<(String, String)>> {
        use templates::guest;
        let (python, dialect) = match lang {
            Lang::Python => (true, generate::Dialect::Python),
            Lang::Javascript => (false, generate::Dialect::TypeScript),
            Lang::Rust => bail!("Rust projects are scaffolded by Project::files"),
        };
        let mut common = self.common_vars();
        common.push(("sdk_path", sdk_path.to_string()));
        let mut files = Vec::new();
        let mut table = String::from("| phase | worker | moves to |\n|---|---|---|\n");
        for (i, p) in self.phases.iter().enumerate() {
            let next = self.next_of(i);
            let stays = next.name == p.name;
            let mut vars = common.clone();
            vars.extend([
                ("phase", p.name.clone()),
                ("ident", p.ident.clone()),
                // `<class>Inputs`, `<class>Outcome`, `<class>Worker` in the generated API.
                ("class", generate::pascal_case(&p.name)),
                ("kebab", p.kebab.clone()),
                ("snake", p.constant.to_ascii_lowercase()),
                ("next", next.name.clone()),
                ("next_snake", next.constant.to_ascii_lowercase()),
                (
                    "next_call",
                    if stays {
                        "stay()".to_owned()
                    } else {
                        format!("{}()", generate::guest::move_method(dialect, &next.name))
                    },
                ),
                (
                    "log_message",
                    if stays { "staying" } else { "moving on" }.to_owned(),
                ),
                ("summary", self.summary(i)),
            ]);
            let (worker, test) = if python {
                (
                    (format!("workers/{}/app.py", p.kebab), guest::PYTHON_APP),
                    (
                        format!("tests/test_{}.py", p.constant.to_ascii_lowercase()),
                        guest::PYTHON_TEST,
                    ),
                )
            } else {
                (
                    (format!("workers/{}/worker.js", p.kebab), guest::JS_WORKER),
                    (format!("test/{}.test.js", p.kebab), guest::JS_TEST),
                )
            };
            table.push_str(&format!(
                "| `{}`{} | `{}` | `{}` |\n",
                p.name,
                if i == 0 { " (initial)" } else { "" },
                worker.0,
                next.name
            ));
            files.push((worker.0, render(worker.1, &vars)?));
            files.push((test.0, render(test.1, &vars)?));
        }
        let (language, worker_file, test_dir, test_command, toolchain) = if python {
            (
                "Python",
                "app.py",
                "tests",
                PYTHON_TEST_COMMAND,
                "componentize-py",
            )
        } else {
            (
                "JavaScript",
                "worker.js",
                "test",
                "npm install && npm test",
                "componentize-js",
            )
        };
        let (generated_files, typecheck_command, typechecker) = if python {
            (
                format!("`{}`", generate::guest::PYTHON_PATH),
                PYTHON_TYPECHECK_COMMAND,
                "`mypy --strict`",
            )
        } else {
            (
                format!(
                    "`{}` and `{}`",
                    generate::guest::JS_PATH,
                    generate::guest::DTS_PATH
                ),
                JS_TYPECHECK_COMMAND,
                "`tsc --noEmit` (checkJs, tsconfig.json)",
            )
        };
        let mut vars = common.clone();
        vars.extend([
            ("language", language.to_string()),
            ("worker_file", worker_file.to_string()),
            ("test_dir", test_dir.to_string()),
            ("test_command", test_command.to_string()),
            ("toolchain", toolchain.to_string()),
            ("phase_table", table.trim_end().to_string()),
            ("generated_files", generated_files),
            ("typecheck_command", typecheck_command.to_string()),
            ("typechecker", typechecker.to_string()),
            (
                "finalizer_code",
                if python {
                    PYTHON_FINALIZER.to_string()
                } else {
                    JS_FINALIZER.to_string()
                },
            ),
        ]);
        if python {
            files.push(("pyproject.toml".into(), render(guest::PYPROJECT, &vars)?));
        } else {
            files.push(("package.json".into(), render(guest::PACKAGE_JSON, &vars)?));
            files.push(("tsconfig.json".into(), guest::TSCONFIG.to_string()));
        }
        let operator = self.operator_yaml()?.replace(
            "# Each phase's worker is the crate workers/<phase>; `wasmpilot deploy .` builds them for\n# wasm32-wasip2 and replaces",
            &format!("# Each phase's worker is workers/<phase>/{worker_file} ({language}); `wasmpilot deploy .` builds\n# them with {toolchain} and replaces"),
        );
        // What `wasmpilot generate .` writes from this operator.yaml (`generate --check` passes).
        let (op, def) = parse_operator(&self.name, &operator)?;
        if python {
            let api = generate::guest::python(&op, &def)?;
            files.push((api.path.to_owned(), api.text));
        } else {
            for api in generate::guest::javascript(&op, &def)? {
                files.push((api.path.to_owned(), api.text));
            }
        }
        files.push(("operator.yaml".into(), operator));
        files.push((
            format!("crds/{}", self.crd_file()),
            render(guest::CRD, &vars)?,
        ));
        files.push(("sample.yaml".into(), render(templates::SAMPLE, &common)?));
        files.push(("README.md".into(), render(guest::README, &vars)?));
        files.push((".gitignore".into(), guest::GITIGNORE.to_string()));
        Ok(files)
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
        let types_vars = with(vec![("sdk_dep", sdk_dep("types"))]);
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
        files.push((
            crate::authoring::generate::GENERATED_PATH.into(),
            self.phase_api()?,
        ));
        for (i, p) in self.phases.iter().enumerate() {
            let next = self.next_of(i);
            let stays = next.name == p.name;
            let summary = self.summary(i);
            let dir = format!("workers/{}", p.kebab);
            let vars = with(vec![
                ("sdk_dep", sdk_dep(&dir)),
                ("crate", self.worker_crate(p)),
                ("phase", p.name.clone()),
                ("phase_ident", p.ident.clone()),
                ("phase_module", generate::snake_case(&p.name)),
                ("phase_variant", generate::pascal_case(&p.name)),
                ("next_variant", generate::pascal_case(&next.name)),
                (
                    "next_call",
                    if stays {
                        "stay()".to_owned()
                    } else {
                        format!("next(Next::{})", generate::pascal_case(&next.name))
                    },
                ),
                // A phase that stays has no move to name (an unused import warns).
                ("next_import", if stays { "" } else { "Next, " }.to_owned()),
                ("summary", summary.clone()),
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
        }
        files.push(("operator.yaml".into(), self.operator_yaml()?));
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
                    ("test_command", self.test_command(workspace)),
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

/// `an AutoRoute`, `a Canary`.
fn with_article(kind: &str, a: &str, an: &str) -> String {
    let vowel = kind.starts_with(['A', 'E', 'I', 'O', 'U', 'a', 'e', 'i', 'o', 'u']);
    format!("{} {kind}", if vowel { an } else { a })
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

/// The scaffolded operator.yaml as `wasmpilot generate` reads it.
fn parse_operator(
    name: &str,
    yaml: &str,
) -> anyhow::Result<(
    crate::crd::WasmOperator,
    crate::definition::OperatorDefinition,
)> {
    let op: crate::crd::WasmOperator = serde_yaml::from_str(yaml)?;
    let def = crate::definition::OperatorDefinition::validate(name, &op.spec)?;
    Ok((op, def))
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
        assert!(p("AutoRoute", "ops.k8s.io", "v1", &["A"]).contains("reserved for Kubernetes"));
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
            let readme = &files.iter().find(|(p, _)| p == "README.md").unwrap().1;
            let test = if ws == Workspace::Standalone {
                "\ncargo test\n"
            } else {
                "\ncargo test -p autoroute-types -p autoroute-initializing -p autoroute-syncing -p autoroute-ready\n"
            };
            assert!(readme.contains(test), "{readme}");
            assert!(names.contains(&"workers/syncing/src/lib.rs"));
        }
        for lang in [Lang::Python, Lang::Javascript] {
            for (path, text) in &project.guest_files(lang, "../sdk").unwrap() {
                assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
            }
        }
        assert!(render("a {{missing}} b", &[]).is_err());
        assert_eq!(render("{{a}}", &[("a", "x".into())]).unwrap(), "x");
    }

    /// The last phase stays: its stub names no move, so it imports no `Next` (which would be
    /// an unused-import warning in a freshly scaffolded project).
    #[test]
    fn only_workers_that_move_import_their_moves() {
        let files = autoroute()
            .files(&Workspace::Standalone, &|_| String::new())
            .unwrap();
        let lib = |phase: &str| {
            let path = format!("workers/{phase}/src/lib.rs");
            files.iter().find(|(p, _)| *p == path).unwrap().1.clone()
        };
        let syncing = lib("syncing");
        assert!(
            syncing.contains("{Export, Inputs, Next, Outcome, Worker}"),
            "{syncing}"
        );
        assert!(syncing.contains("Outcome::next(Next::Ready)"), "{syncing}");
        let ready = lib("ready");
        assert!(
            ready.contains("{Export, Inputs, Outcome, Worker}"),
            "{ready}"
        );
        assert!(ready.contains("Ok(Outcome::stay())"), "{ready}");
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
        assert!(
            def.phase("Ready").unwrap().ready && !def.phase("Syncing").unwrap().ready,
            "the steady last phase is the ready one (kstatus Ready=True there)"
        );
        let module = def.phase("Syncing").unwrap().module.clone().unwrap();
        assert_eq!(module.file.unwrap().path, "autoroute_syncing.wasm");
        let worker = &files
            .iter()
            .find(|(p, _)| p == "workers/ready/src/lib.rs")
            .unwrap()
            .1;
        assert!(worker.contains("Outcome::stay()"), "{worker}");
        let syncing = &files
            .iter()
            .find(|(p, _)| p == "workers/syncing/src/lib.rs")
            .unwrap()
            .1;
        assert!(syncing.contains("Outcome::next(Next::Ready)"), "{syncing}");
        let api = &files
            .iter()
            .find(|(p, _)| p == "types/src/phases.rs")
            .unwrap()
            .1;
        assert!(api.starts_with(generate::GENERATED_HEADER), "{api}");
        assert!(worker.contains("fn stays_ready()"), "{worker}");
    }

    #[test]
    fn guest_projects_hold_the_generated_api_and_workers_typed_against_it() {
        let project = Project::new(
            "AutoRoute",
            "examples.io",
            "v1",
            &[
                "Initializing".into(),
                "Waiting-for_db".into(),
                "Import".into(),
            ],
            None,
            None,
        )
        .unwrap();
        let file = |files: &[(String, String)], path: &str| -> String {
            files
                .iter()
                .find(|(p, _)| p == path)
                .unwrap_or_else(|| panic!("no {path}"))
                .1
                .clone()
        };
        let python = project.guest_files(Lang::Python, "../sdk").unwrap();
        let operator = file(&python, "operator.yaml");
        let (op, def) = parse_operator("autoroute", &operator).unwrap();
        let api = generate::guest::python(&op, &def).unwrap();
        assert_eq!(file(&python, "shared/phases.py"), api.text);
        let waiting = file(&python, "workers/waiting-for-db/app.py");
        assert!(
            waiting.contains(
                "from phases import WaitingForDbInputs, WaitingForDbOutcome, WaitingForDbWorker"
            ),
            "{waiting}"
        );
        assert!(
            waiting.contains("class WaitingForDb(WaitingForDbWorker[dict[str, Any]]):"),
            "{waiting}"
        );
        // A keyword phase name: the method the generator escapes it to.
        assert!(
            waiting.contains("return WaitingForDbOutcome.import_()"),
            "{waiting}"
        );
        assert!(
            api.text
                .contains("def import_(cls) -> WaitingForDbOutcome:"),
            "{}",
            api.text
        );
        let import = file(&python, "workers/import/app.py");
        assert!(import.contains("return ImportOutcome.stay()"), "{import}");
        let pyproject = file(&python, "pyproject.toml");
        assert!(
            pyproject.contains("pythonpath = [\"../sdk\", \"shared\"]"),
            "{pyproject}"
        );
        assert!(
            pyproject.contains("[tool.mypy]\nstrict = true"),
            "{pyproject}"
        );

        let js = project.guest_files(Lang::Javascript, "../sdk").unwrap();
        let (op, def) = parse_operator("autoroute", &file(&js, "operator.yaml")).unwrap();
        for api in generate::guest::javascript(&op, &def).unwrap() {
            assert_eq!(file(&js, api.path), api.text, "{}", api.path);
        }
        let waiting = file(&js, "workers/waiting-for-db/worker.js");
        assert!(
            waiting.contains("export class WaitingForDb extends WaitingForDbWorker {"),
            "{waiting}"
        );
        assert!(
            waiting.contains("return WaitingForDbOutcome.import_();"),
            "{waiting}"
        );
        assert!(
            file(&js, "shared/phases.d.ts").contains("static import_(): WaitingForDbOutcome;"),
            "{}",
            file(&js, "shared/phases.d.ts")
        );
        assert!(file(&js, "tsconfig.json").contains("\"checkJs\": true"));
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
