//! Compiles a component in a child process of the host's own binary, so a module's compile can
//! be stopped, its memory is bounded, and its peak heap and the compiler's code leave with it.
//!
//! Cranelift cannot be interrupted: compiled in a host thread, a module that compiles for hours
//! holds the one compile slot (every other operator's new module waits) and its 300–400 MiB
//! heap peak (a Python component) stays in the host's malloc after it ends. In a child, the host
//! kills it at [`super::COMPILE_TIMEOUT`], its data segment is limited (`RLIMIT_DATA`), it runs
//! at a lower CPU priority than the reconciles, the container's out-of-memory killer takes it
//! before the host (`oom_score_adj` 1000), and whatever it allocated is gone when it exits.
//!
//! The protocol is the binary's hidden first argument [`SUBCOMMAND`]: the component's bytes on
//! stdin, the precompiled artifact (`.cwasm`) on stdout, an error message on stderr and exit
//! code 1 when the component does not compile. The child builds its engine from
//! [`crate::sandbox::codegen_config`], the settings that decide the generated code, so the host's
//! engine accepts the artifact (wasmtime checks that again when it loads it). Any other failure
//! of the child (exit code 2, a signal, the timeout) is [`LoadError::CompileStopped`].

use crate::sandbox::LoadError;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The hidden first argument that makes the host binary a compile child.
pub const SUBCOMMAND: &str = "__compile-component";

/// The child's data segment limit unless the host is told otherwise: a Python component (18 MiB
/// of Wasm, CPython and its libraries) peaks at 300–400 MiB while it compiles.
pub const DEFAULT_MEMORY_LIMIT_MIB: u64 = 1024;

/// The largest artifact read back from a child: compiled code is 2–4× its Wasm, and a component
/// is at most [`super::MAX_MODULE_BYTES`].
const MAX_ARTIFACT_BYTES: u64 = 8 * super::MAX_MODULE_BYTES;

/// The child's exit code when the component does not compile (its stderr: wasmtime's error).
const COMPILE_ERROR_EXIT: u8 = 1;

/// How much of the child's stderr reaches a message (the tail: where the error is).
const MAX_STDERR_BYTES: usize = 2048;

/// The child's `nice` increment: a compile yields the CPU to the reconciles of loaded operators.
const CHILD_NICENESS: i32 = 10;

/// How the host runs compiles in child processes.
#[derive(Clone, Debug)]
pub struct CompileProcess {
    program: PathBuf,
    memory_limit_bytes: u64,
    timeout: Duration,
}

impl CompileProcess {
    /// Children of this very executable (`/proc/self/exe`), limited to `memory_limit_mib`.
    pub fn of_current_exe(memory_limit_mib: u64) -> std::io::Result<Self> {
        Ok(Self::of_program(std::env::current_exe()?, memory_limit_mib))
    }

    /// Children of `program`, which must dispatch [`SUBCOMMAND`] to [`serve_if_asked`] (both
    /// host binaries do, through `host::run_main`).
    pub fn of_program(program: PathBuf, memory_limit_mib: u64) -> Self {
        CompileProcess {
            program,
            memory_limit_bytes: memory_limit_mib.saturating_mul(1 << 20),
            timeout: super::COMPILE_TIMEOUT,
        }
    }

    /// Kills a child after `timeout` instead of [`super::COMPILE_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn memory_limit_mib(&self) -> u64 {
        self.memory_limit_bytes >> 20
    }

    /// The precompiled artifact of `bytes`, compiled by a child that is killed (SIGKILL) when it
    /// runs past the timeout, so the caller's compile slot is free again at once.
    pub async fn precompile(&self, bytes: Vec<u8>) -> Result<Vec<u8>, LoadError> {
        let mut child = tokio::process::Command::new(&self.program)
            .arg(SUBCOMMAND)
            .arg(self.memory_limit_bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                LoadError::CompileStopped(format!(
                    "could not start the compile process {}: {e}",
                    self.program.display()
                ))
            })?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(LoadError::CompileStopped(
                "the compile process has no pipes".to_string(),
            ));
        };
        let feeding = async move {
            // A child that dies early closes its end: its exit status says why, not this write.
            let _ = stdin.write_all(&bytes).await;
            drop(stdin);
        };
        let (mut artifact, mut message) = (Vec::new(), Vec::new());
        let reading = read_bounded(stdout, MAX_ARTIFACT_BYTES + 1, &mut artifact);
        let reading_errors = read_bounded(stderr, 64 << 10, &mut message);
        let running = async {
            let (_, read, _) = tokio::join!(feeding, reading, reading_errors);
            let status = child.wait().await;
            (read, status)
        };
        let (read, status) = match tokio::time::timeout(self.timeout, running).await {
            Ok(done) => done,
            Err(_) => {
                // Dropping `running` drops nothing of the child; kill it and reap it.
                let _ = child.kill().await;
                return Err(LoadError::CompileStopped(format!(
                    "it took longer than {:?}; the compile process was killed (a smaller component compiles faster)",
                    self.timeout
                )));
            }
        };
        let status = status.map_err(|e| {
            LoadError::CompileStopped(format!("could not wait for the compile process: {e}"))
        })?;
        let said = stderr_tail(&message);
        if status.success() {
            read.map_err(|e| {
                LoadError::CompileStopped(format!(
                    "could not read the compile process's output: {e}"
                ))
            })?;
            if artifact.len() as u64 > MAX_ARTIFACT_BYTES {
                return Err(LoadError::CompileStopped(format!(
                    "the compiled component is larger than {} MiB",
                    MAX_ARTIFACT_BYTES >> 20
                )));
            }
            return Ok(artifact);
        }
        let said_after = if said.is_empty() {
            String::new()
        } else {
            format!(": {said}")
        };
        Err(match status.code() {
            Some(code) if code == i32::from(COMPILE_ERROR_EXIT) => LoadError::Compile(said),
            Some(_) => {
                LoadError::CompileStopped(format!("the compile process failed ({status}){said_after}"))
            }
            None => LoadError::CompileStopped(format!(
                "the compile process ended with {status} (its memory is limited to {} MiB; a smaller component needs less){said_after}",
                self.memory_limit_mib(),
            )),
        })
    }
}

/// Reads `from` to its end, keeping the first `limit` bytes in `into` and dropping the rest (so
/// a child never blocks on a full pipe).
async fn read_bounded(
    mut from: impl tokio::io::AsyncRead + Unpin,
    limit: u64,
    into: &mut Vec<u8>,
) -> std::io::Result<()> {
    (&mut from).take(limit).read_to_end(into).await?;
    tokio::io::copy(&mut from, &mut tokio::io::sink()).await?;
    Ok(())
}

/// The last [`MAX_STDERR_BYTES`] of what a child wrote to stderr, as one trimmed line.
fn stderr_tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes).trim().replace('\n', " / ");
    crate::worker_text::tail(&text, MAX_STDERR_BYTES).into_owned()
}

/// Runs as a compile child when the process was started as one (first argument [`SUBCOMMAND`]):
/// the exit code to end with; `None` for any other start. Call first thing in `main`.
pub fn serve_if_asked() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(SUBCOMMAND)) {
        return None;
    }
    let limit = args
        .next()
        .and_then(|a: OsString| a.to_str().and_then(|s| s.parse::<u64>().ok()));
    Some(match serve(limit) {
        Ok(()) => ExitCode::SUCCESS,
        Err(ChildError::Compile(e)) => {
            let _ = writeln!(std::io::stderr(), "{e}");
            ExitCode::from(COMPILE_ERROR_EXIT)
        }
        Err(other) => {
            let _ = writeln!(std::io::stderr(), "{other}");
            ExitCode::from(2)
        }
    })
}

/// What a compile child failed at, as its stderr says it.
#[derive(Debug, thiserror::Error)]
enum ChildError {
    #[error("the compile process could not read the component: {0}")]
    Input(std::io::Error),
    #[error("the component is larger than {} MiB", super::MAX_MODULE_BYTES >> 20)]
    TooLarge,
    #[error("the compile process could not make its engine: {0:#}")]
    Engine(wasmtime::Error),
    /// One line ([`crate::sandbox::compile_error_text`]).
    #[error("not a valid Wasm component: {0}")]
    Compile(String),
    #[error("the compile process could not write the compiled component: {0}")]
    Output(std::io::Error),
}

fn serve(memory_limit_bytes: Option<u64>) -> Result<(), ChildError> {
    lower_priority_and_limit(memory_limit_bytes);
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(super::MAX_MODULE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ChildError::Input)?;
    if bytes.len() as u64 > super::MAX_MODULE_BYTES {
        return Err(ChildError::TooLarge);
    }
    let engine =
        wasmtime::Engine::new(&crate::sandbox::codegen_config()).map_err(ChildError::Engine)?;
    let artifact = engine
        .precompile_component(&bytes)
        .map_err(|e| ChildError::Compile(crate::sandbox::compile_error_text(&e)))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&artifact).map_err(ChildError::Output)?;
    out.flush().map_err(ChildError::Output)
}

/// Limits the data segment (heap and private mappings) to `limit` bytes and lowers the CPU
/// priority; on other systems than Linux, nothing.
fn lower_priority_and_limit(limit: Option<u64>) {
    #[cfg(target_os = "linux")]
    {
        if let Some(limit) = limit {
            let rlimit = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            // SAFETY: setrlimit reads the struct passed by reference and changes only this
            // process's own limit.
            unsafe {
                libc::setrlimit(libc::RLIMIT_DATA, &rlimit);
            }
        }
        // SAFETY: nice changes only this process's scheduling priority.
        unsafe {
            libc::nice(CHILD_NICENESS);
        }
        // Out of memory in the container, the kernel kills this process before the host.
        let _ = std::fs::write("/proc/self/oom_score_adj", b"1000");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (limit, CHILD_NICENESS);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_a_long_stderr_is_kept_on_one_line() {
        let long = format!("{}\nthe error", "x".repeat(5000));
        let tail = stderr_tail(long.as_bytes());
        // One line once joined: its start and its end are kept.
        let cut = format!("… ({} bytes truncated) …", 5012 - MAX_STDERR_BYTES);
        assert!(tail.starts_with("xxx"), "{tail}");
        assert!(tail.contains(&cut), "{tail}");
        assert!(tail.ends_with("x / the error"));
        assert_eq!(tail.len(), cut.len() + MAX_STDERR_BYTES);
        assert_eq!(stderr_tail(b"  short\n"), "short");
    }

    #[test]
    fn the_child_engine_makes_code_the_sandbox_engine_loads() {
        use std::hash::{Hash, Hasher};
        let sandbox = crate::sandbox::Sandbox::new(Default::default()).expect("a sandbox");
        let child =
            wasmtime::Engine::new(&crate::sandbox::codegen_config()).expect("the child's engine");
        let key = |engine: &wasmtime::Engine| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut h);
            h.finish()
        };
        assert_eq!(key(sandbox.engine()), key(&child));
        let artifact = child
            .precompile_component(super::super::EMPTY_COMPONENT)
            .expect("compiles");
        // SAFETY: made just now by an engine of the same settings.
        unsafe { wasmtime::component::Component::deserialize(sandbox.engine(), &artifact) }
            .expect("the sandbox's engine loads the child's artifact");
    }
}
