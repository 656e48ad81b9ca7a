//! `wasmpilot graph`: an operator's phase graph as a Mermaid state diagram or as SVG (for docs,
//! and the dashboard with resource counts) — `next:` edges, initial, final and ready phases.

use crate::definition::OperatorDefinition;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// What `wasmpilot graph` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphFormat {
    /// A Mermaid `stateDiagram-v2` (renders on GitHub and in most docs tools).
    #[default]
    Mermaid,
    /// A standalone SVG image, laid out here (no Graphviz or Mermaid needed).
    Svg,
}

/// The operator manifest named by a path: the file itself, or `<dir>/operator.yaml`.
pub fn operator_manifest(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("operator.yaml")
    } else {
        path.to_path_buf()
    }
}

/// `wasmpilot graph <operator.yaml|dir> [--format svg]`.
pub fn graph_command(path: &Path, format: GraphFormat) -> anyhow::Result<String> {
    let (_, def) = crate::offline::load_operator(&operator_manifest(path))?;
    Ok(match format {
        GraphFormat::Mermaid => mermaid(&def),
        GraphFormat::Svg => svg(&def, None),
    })
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

/// Escapes text for SVG and HTML content and attribute values.
pub fn escape_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const BOX_W: i32 = 160;
const BOX_H: i32 = 48;
const COL: i32 = 220;
const ROW: i32 = 80;
const MARGIN: i32 = 40;

/// Columns by the longest path from the initial phase along `next:` edges, edges back into a
/// phase on the way (loops) left out, so every other edge points right; phases reached by none
/// (such as targets of a phase without a `next:` list) follow in declaration order. Rows in
/// declaration order within a column.
fn layout(def: &OperatorDefinition) -> BTreeMap<&str, (i32, i32)> {
    let index: BTreeMap<&str, usize> = def
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    let targets = |i: usize| -> Vec<usize> {
        def.phases[i]
            .next
            .iter()
            .filter_map(|n| index.get(n.as_str()).copied())
            .filter(|&j| j != i)
            .collect()
    };
    // Depth-first from the initial phase: the finishing order, reversed, is a topological order
    // of the edges that are not back edges.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; def.phases.len()];
    let mut finished = Vec::new();
    let mut forward: Vec<Vec<usize>> = vec![Vec::new(); def.phases.len()];
    if let Some(&start) = index.get(def.initial_phase.as_str()) {
        let mut stack = vec![(start, targets(start), 0usize)];
        mark[start] = Mark::Open;
        while let Some((node, next, at)) = stack.last_mut() {
            if let Some(&j) = next.get(*at) {
                *at += 1;
                let from = *node;
                match mark[j] {
                    Mark::Open => {} // a loop back: drawn, not laid out
                    Mark::Done => forward[from].push(j),
                    Mark::New => {
                        forward[from].push(j);
                        mark[j] = Mark::Open;
                        stack.push((j, targets(j), 0));
                    }
                }
            } else {
                mark[*node] = Mark::Done;
                finished.push(*node);
                stack.pop();
            }
        }
    }
    let mut column: Vec<Option<i32>> = vec![None; def.phases.len()];
    for &i in finished.iter().rev() {
        let here = *column[i].get_or_insert(0);
        for &j in &forward[i] {
            column[j] = Some(column[j].map_or(here + 1, |c| c.max(here + 1)));
        }
    }
    let mut next_free = column.iter().flatten().max().map_or(0, |m| m + 1);
    for c in column.iter_mut() {
        if c.is_none() {
            *c = Some(next_free);
            next_free += 1;
        }
    }
    let mut rows: BTreeMap<i32, i32> = BTreeMap::new();
    let mut at = BTreeMap::new();
    for (i, p) in def.phases.iter().enumerate() {
        let col = column[i].unwrap_or(0);
        let row = rows.entry(col).or_insert(0);
        at.insert(p.name.as_str(), (col, *row));
        *row += 1;
    }
    at
}

/// The phase graph as a standalone SVG: one box per phase (ready phases green, final ones with
/// a double border, the initial one entered by an arrow), `next:` edges as arrows, and with
/// `counts` the number of resources in each phase under its name.
pub fn svg(def: &OperatorDefinition, counts: Option<&BTreeMap<String, usize>>) -> String {
    let at = layout(def);
    let cols = at.values().map(|(c, _)| c + 1).max().unwrap_or(1);
    let rows = at.values().map(|(_, r)| r + 1).max().unwrap_or(1);
    let width = MARGIN * 2 + (cols - 1) * COL + BOX_W;
    let height = MARGIN * 2 + (rows - 1) * ROW + BOX_H + 50;
    let pos = |name: &str| {
        at.get(name)
            .map(|&(c, r)| (MARGIN + c * COL, MARGIN + r * ROW))
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13" role="img" aria-label="phase graph of {}">"##,
        escape_markup(&def.name)
    );
    out.push_str(
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>
"##,
    );
    if let Some((x, y)) = pos(&def.initial_phase) {
        let cy = y + BOX_H / 2;
        let _ = writeln!(
            out,
            r##"<circle cx="{}" cy="{cy}" r="6" fill="#333"/><line x1="{}" y1="{cy}" x2="{x}" y2="{cy}" stroke="#555" marker-end="url(#arrow)"/>"##,
            x - 30,
            x - 24
        );
    }
    for p in &def.phases {
        let Some((x, y)) = pos(&p.name) else { continue };
        for n in &p.next {
            let Some((tx, ty)) = pos(n) else { continue };
            let path = if n == &p.name {
                format!(
                    "M{},{y} C{},{} {},{} {},{y}",
                    x + BOX_W / 2 - 15,
                    x + BOX_W / 2 - 30,
                    y - 34,
                    x + BOX_W / 2 + 30,
                    y - 34,
                    x + BOX_W / 2 + 15
                )
            } else if tx > x {
                format!("M{},{} L{tx},{}", x + BOX_W, y + BOX_H / 2, ty + BOX_H / 2)
            } else {
                // Back (or same-column) edge: a curve below the boxes, deeper and landing
                // further right the longer it is, so edges into one phase stay apart.
                let span = ((x - tx) / COL).clamp(0, 4);
                let dip = y.max(ty) + BOX_H + 18 + 12 * span;
                let land = tx + BOX_W / 2 - 24 + 16 * span;
                format!(
                    "M{},{} C{},{dip} {land},{dip} {land},{}",
                    x + BOX_W / 2,
                    y + BOX_H,
                    x + BOX_W / 2,
                    ty + BOX_H
                )
            };
            let _ = writeln!(
                out,
                r##"<path class="edge" data-from="{}" data-to="{}" d="{path}" fill="none" stroke="#555" marker-end="url(#arrow)"/>"##,
                escape_markup(&p.name),
                escape_markup(n)
            );
        }
    }
    for p in &def.phases {
        let Some((x, y)) = pos(&p.name) else { continue };
        let fill = if p.ready { "#d8f3dc" } else { "#eef1f5" };
        let dash = if !p.is_final && p.next.is_empty() {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r##"<g class="phase" data-phase="{name}"><rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" stroke="#333"{dash}/>"##,
            name = escape_markup(&p.name)
        );
        if p.is_final {
            let _ = write!(
                out,
                r##"<rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="none" stroke="#333"/>"##,
                x + 4,
                y + 4,
                BOX_W - 8,
                BOX_H - 8
            );
        }
        let label_y = if counts.is_some() { y + 20 } else { y + 29 };
        let _ = write!(
            out,
            r##"<text x="{}" y="{label_y}" text-anchor="middle" font-weight="bold">{}</text>"##,
            x + BOX_W / 2,
            escape_markup(&p.name)
        );
        if let Some(counts) = counts {
            let n = counts.get(&p.name).copied().unwrap_or(0);
            let _ = write!(
                out,
                r##"<text class="count" x="{}" y="{}" text-anchor="middle">{n} resource{}</text>"##,
                x + BOX_W / 2,
                y + 37,
                if n == 1 { "" } else { "s" }
            );
        }
        if !p.is_final && p.next.is_empty() {
            let _ = write!(
                out,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="11" fill="#555">may move to any phase</text>"##,
                x + BOX_W / 2,
                y + BOX_H + 14
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
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
        let text = graph_command(&root.join("examples/autoroute"), GraphFormat::Mermaid).unwrap();
        assert!(
            text.starts_with("stateDiagram-v2\n    [*] --> Initializing\n"),
            "{text}"
        );
        assert_eq!(text.matches("may move to any phase").count(), 3, "{text}");
    }

    #[test]
    fn svg_draws_every_phase_and_declared_edge_with_counts() {
        let def = definition(
            r#"
apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: t}
spec:
  resource: {apiVersion: examples.io/v1, kind: Canary}
  phases:
  - {name: Initializing, initial: true, module: {file: {path: a.wasm}}, next: [Waiting]}
  - {name: Waiting, ready: true, module: {file: {path: b.wasm}}, next: [Evaluating, Waiting]}
  - {name: Evaluating, module: {file: {path: c.wasm}}, next: [Waiting, Done]}
  - {name: Done, final: true}
"#,
        );
        let counts = BTreeMap::from([("Waiting".to_string(), 3), ("Done".to_string(), 1)]);
        let image = svg(&def, Some(&counts));
        assert!(image.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(image.trim_end().ends_with("</svg>"));
        for phase in ["Initializing", "Waiting", "Evaluating", "Done"] {
            assert_eq!(image.matches(&format!("data-phase=\"{phase}\"")).count(), 1);
        }
        for (from, to) in [
            ("Initializing", "Waiting"),
            ("Waiting", "Evaluating"),
            ("Waiting", "Waiting"),
            ("Evaluating", "Waiting"),
            ("Evaluating", "Done"),
        ] {
            assert!(
                image.contains(&format!("data-from=\"{from}\" data-to=\"{to}\"")),
                "{from} -> {to}: {image}"
            );
        }
        assert_eq!(image.matches("class=\"edge\"").count(), 5);
        assert!(image.contains(">3 resources<"));
        assert!(image.contains(">1 resource<"));
        assert!(image.contains(">0 resources<"), "Initializing holds none");
        // Ready phases (Waiting, and Done, being final) are green; the final one has its inner
        // border.
        assert_eq!(image.matches("#d8f3dc").count(), 2);
        assert_eq!(image.matches("rx=\"6\"").count(), 1);
        assert!(svg(&def, None).contains(">Done</text>"));
        assert!(!svg(&def, None).contains("resources<"));
    }

    #[test]
    fn svg_escapes_names() {
        assert_eq!(escape_markup("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    }

    #[test]
    fn layout_puts_every_edge_but_loops_left_to_right() {
        let def = definition(
            r#"
apiVersion: wasmpilot.io/v1alpha1
kind: WasmOperator
metadata: {name: t}
spec:
  resource: {apiVersion: examples.io/v1, kind: Board}
  phases:
  - {name: Start, initial: true, module: {file: {path: a.wasm}}, next: [Checking, Done]}
  - {name: Checking, module: {file: {path: b.wasm}}, next: [Done, Start]}
  - {name: Done, final: true}
  - {name: Orphan, final: true}
"#,
        );
        let at = layout(&def);
        assert_eq!(at["Start"], (0, 0));
        assert_eq!(at["Checking"], (1, 0));
        assert_eq!(at["Done"], (2, 0), "after Checking, which also leads there");
        assert_eq!(at["Orphan"], (3, 0), "reached by no edge: after the others");
    }

    /// docs/graphs/<example>.svg are what `wasmpilot graph --format svg` draws of each example
    /// (regenerate with `WASMPILOT_UPDATE_GOLDEN=1`).
    #[test]
    fn the_docs_phase_graphs_are_current() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for example in ["autoroute", "canary", "myownshell"] {
            let image =
                graph_command(&root.join("examples").join(example), GraphFormat::Svg).unwrap();
            let doc = root.join(format!("docs/graphs/{example}.svg"));
            if std::env::var_os("WASMPILOT_UPDATE_GOLDEN").is_some() {
                std::fs::create_dir_all(doc.parent().unwrap()).unwrap();
                std::fs::write(&doc, &image).unwrap();
            }
            let committed = std::fs::read_to_string(&doc).unwrap_or_default();
            assert!(
                committed == image,
                "{} is stale: WASMPILOT_UPDATE_GOLDEN=1 cargo test -p wasmpilot --lib docs_phase_graphs",
                doc.display()
            );
        }
    }
}
