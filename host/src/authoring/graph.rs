//! `wasmpilot graph`: an operator's phase graph as a Mermaid state diagram — `next:` edges,
//! the initial phase from `[*]`, final phases to `[*]`, and a note on phases that may move to
//! any phase (no `next:` list).

use crate::definition::OperatorDefinition;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The operator manifest named by a path: the file itself, or `<dir>/operator.yaml`.
pub fn operator_manifest(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("operator.yaml")
    } else {
        path.to_path_buf()
    }
}

/// `wasmpilot graph <operator.yaml|dir>`.
pub fn graph_command(path: &Path) -> anyhow::Result<String> {
    let (_, def) = crate::offline::load_operator(&operator_manifest(path))?;
    Ok(mermaid(&def))
}

/// The Mermaid `stateDiagram-v2` of a validated definition. Staying in a phase is always
/// allowed and drawn only when `next:` lists the phase itself.
pub fn mermaid(def: &OperatorDefinition) -> String {
    let mut out = String::from("stateDiagram-v2\n");
    let id = |name: &str| -> String {
        name.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    for p in &def.phases {
        if id(&p.name) != p.name {
            let _ = writeln!(out, "    state \"{}\" as {}", p.name, id(&p.name));
        }
    }
    let _ = writeln!(out, "    [*] --> {}", id(&def.initial_phase));
    for p in &def.phases {
        if p.is_final {
            let _ = writeln!(out, "    {} --> [*]", id(&p.name));
            continue;
        }
        for n in &p.next {
            let _ = writeln!(out, "    {} --> {}", id(&p.name), id(n));
        }
    }
    for p in def
        .phases
        .iter()
        .filter(|p| !p.is_final && p.next.is_empty())
    {
        let _ = writeln!(
            out,
            "    note right of {} : no next list, may move to any phase",
            id(&p.name)
        );
    }
    if def.finalizer.is_some() {
        let _ = writeln!(
            out,
            "    %% on deletion the finalizer worker runs before the resource goes away"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::WasmOperator;

    fn definition(yaml: &str) -> OperatorDefinition {
        let op: WasmOperator = serde_yaml::from_str(yaml).unwrap();
        OperatorDefinition::validate("t", &op.spec).unwrap()
    }

    #[test]
    fn next_edges_initial_final_and_any() {
        let def = definition(
            r#"
apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: t}
spec:
  resource: {apiVersion: examples.io/v1, kind: Canary}
  phases:
  - {name: Initializing, initial: true, module: {file: {path: a.wasm}}, next: [Waiting]}
  - {name: Waiting, module: {file: {path: b.wasm}}, next: [Evaluating]}
  - {name: Evaluating, module: {file: {path: c.wasm}}, next: [Waiting, Promoting, Roll-back]}
  - {name: Promoting, module: {file: {path: d.wasm}}}
  - {name: Roll-back, final: true}
"#,
        );
        assert_eq!(
            mermaid(&def),
            "stateDiagram-v2
    state \"Roll-back\" as Roll_back
    [*] --> Initializing
    Initializing --> Waiting
    Waiting --> Evaluating
    Evaluating --> Waiting
    Evaluating --> Promoting
    Evaluating --> Roll_back
    Roll_back --> [*]
    note right of Promoting : no next list, may move to any phase
"
        );
    }

    #[test]
    fn the_autoroute_example_declares_no_next_lists() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = graph_command(&root.join("examples/autoroute")).unwrap();
        assert!(
            text.starts_with("stateDiagram-v2\n    [*] --> Initializing\n"),
            "{text}"
        );
        assert_eq!(text.matches("may move to any phase").count(), 3, "{text}");
    }
}
