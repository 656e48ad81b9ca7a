//! Where a scaffolded project sits among cargo workspaces: its own (`[workspace]` at its
//! root) or a member of an enclosing one, added to that workspace's `members` as `cargo new`
//! does.

use std::path::{Component, Path, PathBuf};

/// How cargo sees the project.
#[derive(Clone, Debug, PartialEq)]
pub enum Workspace {
    /// The project root has `[workspace]`.
    Standalone,
    /// The crates are members of the workspace whose `Cargo.toml` is at this path.
    Member(PathBuf),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
