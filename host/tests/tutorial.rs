//! Runs docs/tutorial.md as written: every file under a `<!-- tutorial-test: file PATH -->`
//! marker is written into the project, every `run` block is run line by line (`cd` moves
//! the working directory; `wasmpilot` is this build's binary), and every `expect` block's
//! lines must appear, in order, as lines of the previous command's output (a `…` inside a line
//! matches any text: sizes, digests, times).
//!
//! The project is generated standalone (its own cargo workspace) under
//! `~/.cache/wasmpilot/tutorial/`, and built with `CARGO_TARGET_DIR=~/.cache/wasmpilot/scaffold-target`:
//! a nested cargo must not share the outer `cargo test`'s target dir (it would wait for its
//! lock). The first run compiles kube, k8s-openapi and serde natively and for wasm32-wasip2
//! (~9 min on 2 busy cores); later runs reuse them (~2 min). A lock directory keeps two test
//! runs from sharing the project directory.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Debug)]
enum Step {
    File { path: String, text: String },
    Run(Vec<String>),
    Expect(Vec<String>),
}

/// The marked blocks of the tutorial, in order.
fn steps(markdown: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line
            .strip_prefix("<!-- tutorial-test: ")
            .and_then(|m| m.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "a tutorial-test marker must be followed by a fenced block: {line}"
        );
        let body: Vec<String> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .map(str::to_string)
            .collect();
        steps.push(match marker.split_once(' ') {
            Some(("file", path)) => Step::File {
                path: path.to_string(),
                text: body.join("\n") + "\n",
            },
            None if marker == "run" => Step::Run(
                body.into_iter()
                    .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                    .collect(),
            ),
            None if marker == "expect" => Step::Expect(body),
            _ => panic!("unknown tutorial-test marker: {line}"),
        });
    }
    steps
}

/// A directory lock: `mkdir` is atomic; a lock whose process is gone is taken over.
struct Lock(PathBuf);

impl Lock {
    fn take(dir: PathBuf) -> Lock {
        let started = Instant::now();
        loop {
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    std::fs::write(dir.join("pid"), std::process::id().to_string())
                        .expect("writing the lock's pid");
                    return Lock(dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(dir.join("pid")).unwrap_or_default();
                    let alive = !owner.is_empty() && Path::new("/proc").join(owner.trim()).exists();
                    if !alive && started.elapsed() > Duration::from_secs(2) {
                        let _ = std::fs::remove_dir_all(&dir);
                        continue;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(40 * 60),
                        "{} is held by process {owner} for 40 min",
                        dir.display()
                    );
                    std::thread::sleep(Duration::from_secs(2));
                }
                Err(e) => panic!("creating {}: {e}", dir.display()),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Lines of `expected` appear in `output`, in order (blank lines and `…` skipped).
fn missing_line(expected: &[String], output: &str) -> Option<String> {
    let mut out = output.lines();
    expected
        .iter()
        .filter(|l| !l.trim().is_empty() && l.trim() != "…")
        .find(|want| !out.any(|l| line_matches(want, l)))
        .cloned()
}

/// `line` is `want`, where each `…` in `want` stands for any text.
fn line_matches(want: &str, line: &str) -> bool {
    let parts: Vec<&str> = want.split('…').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return line == want;
    }
    if line.len() < first.len() + last.len() || !line.starts_with(first) || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

#[test]
fn the_tutorial_runs_as_written() {
    let root = common::repo_root();
    let markdown =
        std::fs::read_to_string(root.join("docs/tutorial.md")).expect("reading docs/tutorial.md");
    let steps = steps(&markdown);
    assert!(steps.len() >= 10, "the tutorial's marked blocks: {steps:?}");

    let cache = PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/wasmpilot");
    let base = cache.join("tutorial");
    std::fs::create_dir_all(&base).expect("creating the tutorial directory");
    let _lock = Lock::take(base.join("lock"));
    let work = base.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("creating the work directory");

    let bin_dir = Path::new(env!("CARGO_BIN_EXE_wasmpilot"))
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cargo_env: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("CARGO_") && k != "CARGO_HOME" && !k.starts_with("CARGO_TERM"))
        .collect();

    let started = Instant::now();
    let mut cwd = work.clone();
    let mut last_output = String::new();
    for step in &steps {
        match step {
            Step::File { path, text } => {
                let file = cwd.join(path);
                std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
                std::fs::write(&file, text).expect("writing a tutorial file");
            }
            Step::Run(commands) => {
                for command in commands {
                    if let Some(dir) = command.strip_prefix("cd ") {
                        cwd = cwd.join(dir.trim());
                        continue;
                    }
                    let t = Instant::now();
                    let mut cmd = Command::new("bash");
                    cmd.args(["-c", command]).current_dir(&cwd);
                    for k in &cargo_env {
                        cmd.env_remove(k);
                    }
                    let out = cmd
                        .env("PATH", &path)
                        .env("CARGO_TARGET_DIR", cache.join("scaffold-target"))
                        .env("RUST_BACKTRACE", "0")
                        .output()
                        .expect("running bash");
                    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    eprintln!("$ {command}   ({:.1}s)", t.elapsed().as_secs_f64());
                    assert!(
                        out.status.success(),
                        "`{command}` failed in {}:\n{stderr}\n{stdout}",
                        cwd.display()
                    );
                    last_output = stdout;
                }
            }
            Step::Expect(lines) => {
                if let Some(line) = missing_line(lines, &last_output) {
                    panic!("the tutorial expects the line {line:?} (in order) in:\n{last_output}");
                }
            }
        }
    }
    eprintln!(
        "the tutorial ran in {:.0}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn expected_lines_must_appear_in_order() {
    let out = "a\nb\nc\n";
    let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(missing_line(&lines(&["a", "…", "c"]), out), None);
    assert_eq!(missing_line(&lines(&["c", "a"]), out), Some("a".into()));
    let built = "built 3 components in 41.3s into /x/wasm32-wasip2/release\n  Ready   r.wasm    755 KiB  sha256:14c5\n";
    assert_eq!(
        missing_line(
            &lines(&[
                "built 3 components in …s into …/wasm32-wasip2/release",
                "  Ready   r.wasm  … KiB  sha256:…"
            ]),
            built
        ),
        None
    );
    assert!(missing_line(&lines(&["built 4 components in …s"]), built).is_some());
    assert!(missing_line(&lines(&["  Ready   r.wasm  … MiB  sha256:…"]), built).is_some());
    assert!(
        !line_matches("ab…ba", "aba"),
        "prefix and suffix may not overlap"
    );
    let parsed = steps("x\n<!-- tutorial-test: run -->\n```sh\n# comment\ncd d\n\nls\n```\n<!-- tutorial-test: file a/b.rs -->\n```rust\nfn f() {}\n```\n");
    assert!(matches!(&parsed[0], Step::Run(c) if c == &lines(&["cd d", "ls"])));
    assert!(
        matches!(&parsed[1], Step::File { path, text } if path == "a/b.rs" && text == "fn f() {}\n")
    );
}
