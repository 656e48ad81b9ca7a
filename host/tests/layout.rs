//! The layout keeps the data flow readable, in the runtime crate (`runtime/`) and the tools
//! crate (`host/`) alike: no import cycle between top-level modules (e.g. `pipeline` never
//! reaches back into `controller`), nor between any two modules at any depth, and every module
//! file opens with a doc comment saying what it is. (The tools depend on the runtime, never the
//! reverse: cargo refuses a cycle between crates.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("host/src") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A source text without its test code: each item under `#[cfg(test)]` (a `mod x;` line, or a
/// block to its closing brace) and comment lines are left out.
fn without_test_code(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if !trimmed.starts_with("#[cfg(test)]") {
            kept.push(line);
            continue;
        }
        let mut depth = 0i32;
        let mut opened = false;
        for item in lines.by_ref() {
            depth += item.matches('{').count() as i32 - item.matches('}').count() as i32;
            opened |= item.contains('{');
            if (opened && depth <= 0) || (!opened && item.trim_end().ends_with(';')) {
                break;
            }
        }
    }
    kept.join("\n")
}

/// Top-level module → the top-level modules its non-test code names as `crate::…`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(src).ok())
        .filter_map(|f| f.components().next())
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(src).expect("under src");
        let top = relative
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        if ["lib", "main", "cli"].contains(&top.as_str()) || relative.ends_with("mock_api_tests.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = without_test_code(&text);
        let uses = graph.entry(top.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            if name != top && modules.contains(&name) {
                uses.insert(name);
            }
        }
    }
    graph
}

/// A path from `from` back to `to`, if any.
fn path_between(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().cloned().unwrap_or_default();
        if last == to {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

/// The `src/` directories of the runtime crate and of this (the tools) crate.
fn crate_sources() -> [PathBuf; 2] {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let runtime = host.parent().expect("host/ has a parent").join("runtime");
    [runtime.join("src"), host.join("src")]
}

#[test]
fn top_level_modules_have_no_import_cycle() {
    let [runtime, tools] = crate_sources();
    let graph = module_graph(&runtime);
    let tools_graph = module_graph(&tools);
    // The premise: the tools' graph is read too (plan and simulate build on offline).
    assert!(
        tools_graph
            .get("authoring")
            .is_some_and(|u| u.contains("offline")),
        "{tools_graph:?}"
    );
    for (module, uses) in &tools_graph {
        for used in uses {
            if let Some(back) = path_between(&tools_graph, used, module) {
                panic!("import cycle: {module} → {}", back.join(" → "));
            }
        }
    }
    // The premise: the graph is read (the controller runs pipeline steps).
    assert!(
        graph
            .get("controller")
            .is_some_and(|u| u.contains("pipeline")),
        "{graph:?}"
    );
    let mut cycles = Vec::new();
    for (module, uses) in &graph {
        for used in uses {
            if let Some(back) = path_between(&graph, used, module) {
                cycles.push(format!("{module} → {}", back.join(" → ")));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
    // The pipeline is the controller's and the offline commands' shared step: it uses neither.
    for user in ["controller", "evidence", "host"] {
        assert!(
            path_between(&graph, "pipeline", user).is_none(),
            "pipeline reaches {user}"
        );
    }
}

#[test]
fn every_module_file_opens_with_a_doc_comment() {
    let [runtime, tools] = crate_sources();
    let mut files = Vec::new();
    rust_files(&runtime, &mut files);
    rust_files(&tools, &mut files);
    let undocumented: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(tools.join("authoring/templates")))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(files.len() > 40, "premise: the sources are read");
    assert!(
        undocumented.is_empty(),
        "no module doc comment: {undocumented:#?}"
    );
}

/// A module file's path as a module path: `controller/reconcile.rs` → `controller::reconcile`,
/// `pipeline/outputs/mod.rs` → `pipeline::outputs`.
fn module_path(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The paths a source text names after `crate::` (and `super::`, relative to `module`), with
/// `{a, b::c}` groups expanded: `crate::x::{y, z::w}` → `x::y`, `x::z::w`.
fn named_paths(code: &str, module: &str) -> Vec<String> {
    fn parse(rest: &str, prefix: &str, out: &mut Vec<String>) {
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parse(&std::mem::take(&mut item), prefix, out);
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            parse(&item, prefix, out);
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            return;
        }
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}::{name}")
        };
        out.push(path.clone());
        if let Some(more) = rest[name.len()..].strip_prefix("::") {
            parse(more, &path, out);
        }
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last().unwrap_or(' ');
        if before.is_ascii_alphanumeric() || before == '_' {
            continue;
        }
        parse(&code[i + "crate::".len()..], "", &mut out);
    }
    let parent = module.rsplit_once("::").map(|(p, _)| p).unwrap_or("");
    for (i, _) in code.match_indices("super::") {
        parse(&code[i + "super::".len()..], parent, &mut out);
    }
    out
}

/// Every module (file) → the modules its non-test code names (the longest module each named
/// path starts with; an item of a parent module counts as that parent).
fn full_module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .filter(|f| !f.starts_with(src.join("authoring/templates")))
        .map(|f| (module_path(src, f), f.clone()))
        .collect();
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        if ["lib", "main", "cli"].contains(&module.as_str()) || module.ends_with("tests") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file");
        // Code only: a doc link to another module is not a dependency.
        let code = without_test_code(&text);
        let mut uses = BTreeSet::new();
        for path in named_paths(&code, module) {
            let mut target = path.as_str();
            loop {
                if modules.contains_key(target) {
                    break;
                }
                match target.rsplit_once("::") {
                    Some((shorter, _)) => target = shorter,
                    None => {
                        target = "";
                        break;
                    }
                }
            }
            // A module's own items, and its parent's re-exports, are not a dependency.
            let ancestor = module.starts_with(&format!("{target}::"));
            if !target.is_empty() && target != module && !ancestor {
                uses.insert(target.to_string());
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

#[test]
fn no_two_modules_at_any_depth_import_each_other() {
    let [runtime, tools] = crate_sources();
    let mut graph = full_module_graph(&runtime);
    for (module, uses) in full_module_graph(&tools) {
        graph.insert(
            format!("tools::{module}"),
            uses.into_iter().map(|u| format!("tools::{u}")).collect(),
        );
    }
    // The premise: nested modules and grouped imports are read (the reconcile runs the step
    // through the cluster's effects, named in a `{…}` group).
    assert!(
        graph.get("controller::reconcile").is_some_and(
            |u| u.contains("pipeline::step") && u.contains("controller::cluster_effects")
        ),
        "{:?}",
        graph.get("controller::reconcile")
    );
    let mut cycles = BTreeSet::new();
    for (module, uses) in &graph {
        for used in uses {
            if let Some(back) = path_between(&graph, used, module) {
                let mut cycle = vec![module.clone()];
                cycle.extend(back);
                cycles.insert(cycle.join(" → "));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}
