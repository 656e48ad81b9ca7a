//! `wasmpilot-js-snapshot`: the snapshot step of componentize-js, run reproducibly. It takes the
//! arguments componentize-js gives wizer and gives the engine fixed WASI randomness and clocks.
//!
//! componentize-js runs StarlingMonkey's initialisation (the bundle's top level) under wizer and
//! keeps the heap it leaves as the component's data. With wizer's real randomness and clocks
//! that heap differs from build to build (hash seeds, time-budgeted GC slices), and so does the
//! work directory's random name, which the engine keeps as the initializer's path: every build of
//! unchanged workers gave another digest. Here the initializer's directory is opened under a
//! fixed name, the workspace under `/` as wizer's `--mapdir=/::…` did, randomness comes from a
//! fixed seed and both clocks from counters, so the same bundle gives the same component.
//! componentize-js runs this in place of its wizer binary (`wizerBin`, set by
//! deploy/local/guest-toolchains/componentize-js.mjs when `wasmpilot build` passes `--snapshot`).

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmtime::error::Context;
use wasmtime::{bail, Engine, Linker, Module, Result, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, HostMonotonicClock, HostWallClock, WasiCtxBuilder};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// Where the guest finds the initializer's directory (componentize-js's random work directory).
const SOURCES: &str = "/componentize-sources";

/// What componentize-js asks of wizer (its non-AOT invocation).
struct Invocation {
    init_func: String,
    /// `--dir=<host path>`: the work directory holding `initializer.js`.
    sources: Option<PathBuf>,
    /// `--mapdir=/::<host path>`: the bundle's directory, the guest's `/`.
    workspace: Option<PathBuf>,
    inherit_env: bool,
    input: PathBuf,
    output: PathBuf,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Invocation> {
    let mut init_func = None;
    let (mut sources, mut workspace, mut input, mut output) = (None, None, None, None);
    let mut inherit_env = false;
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') => (flag.to_string(), Some(value.into())),
            _ => (arg.clone(), None),
        };
        let mut value = |inline: Option<String>| -> Result<String> {
            inline
                .or_else(|| args.next())
                .with_context(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--allow-wasi" => {}
            "--init-func" | "-f" => init_func = Some(value(inline)?),
            "--dir" => sources = Some(PathBuf::from(value(inline)?)),
            "--mapdir" => {
                let mapping = value(inline)?;
                let Some(("/", host)) = mapping.split_once("::") else {
                    bail!("--mapdir {mapping}: only `/::<host dir>` is supported");
                };
                workspace = Some(PathBuf::from(host));
            }
            "--inherit-env" => inherit_env = value(inline)? == "true",
            "--wasm-bulk-memory" => {
                if value(inline)? != "true" {
                    bail!("--wasm-bulk-memory must be true");
                }
            }
            "-o" | "--output" => output = Some(PathBuf::from(value(inline)?)),
            _ if !flag.starts_with('-') => {
                if input.replace(PathBuf::from(&arg)).is_some() {
                    bail!("more than one input module");
                }
            }
            _ => bail!("unsupported wizer option {flag}"),
        }
    }
    Ok(Invocation {
        init_func: init_func.unwrap_or_else(|| "wizer.initialize".into()),
        sources,
        workspace,
        inherit_env,
        input: input.context("no input module")?,
        output: output.context("no output (-o)")?,
    })
}

/// A wall clock stopped at the Unix epoch.
struct StoppedWallClock;

impl HostWallClock for StoppedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// A monotonic clock that moves a microsecond at each reading, the same on every build.
#[derive(Default)]
struct CountingClock(AtomicU64);

impl HostMonotonicClock for CountingClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.0.fetch_add(1_000, Ordering::Relaxed)
    }
}

/// The instance's globals and memories as the snapshot reads them.
struct Initialized<'a> {
    store: &'a mut Store<WasiP1Ctx>,
    instance: wasmtime::Instance,
}

impl InstanceState for Initialized<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|g| g.get(&mut *self.store));
        match value {
            Some(wasmtime::Val::I32(x)) => SnapshotVal::I32(x),
            Some(wasmtime::Val::I64(x)) => SnapshotVal::I64(x),
            Some(wasmtime::Val::F32(x)) => SnapshotVal::F32(x),
            Some(wasmtime::Val::F64(x)) => SnapshotVal::F64(x),
            Some(wasmtime::Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // wizer exports every global it snapshots, of these types only.
            other => panic!("wizer's export {name} is no numeric global: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => panic!("wizer's export {name} is no memory"),
        }
    }
}

fn snapshot(invocation: &Invocation) -> Result<Vec<u8>> {
    let mut runtime_args = String::new();
    std::io::stdin()
        .read_to_string(&mut runtime_args)
        .context("reading the engine's arguments from stdin")?;
    let mut wasi = WasiCtxBuilder::new();
    if let Some(sources) = &invocation.sources {
        wasi.preopened_dir(sources, SOURCES, FsPerms::ReadOnly)
            .with_context(|| format!("opening {}", sources.display()))?;
        // The engine keeps the initializer's path: name it by the fixed directory.
        runtime_args = runtime_args.replace(&*sources.to_string_lossy(), SOURCES);
    }
    if let Some(workspace) = &invocation.workspace {
        wasi.preopened_dir(workspace, "/", FsPerms::ReadOnly)
            .with_context(|| format!("opening {}", workspace.display()))?;
        // `--strip-path-prefix <workspace>/`: the guest sees the workspace as `/`.
        let prefix = format!("{}/", workspace.to_string_lossy());
        runtime_args = runtime_args.replace(&prefix, "/");
    }
    if invocation.inherit_env {
        // componentize-js runs wizer with only its own variables (names, counts).
        let vars: Vec<(String, String)> = std::env::vars().collect();
        wasi.envs(&vars);
    }
    use rand::SeedableRng;
    wasi.stdin(MemoryInputPipe::new(runtime_args))
        .inherit_stdout()
        .inherit_stderr()
        .secure_random(rand::rngs::StdRng::from_seed([7; 32]))
        .insecure_random(rand::rngs::StdRng::from_seed([11; 32]))
        .insecure_random_seed(0x5eed)
        .wall_clock(StoppedWallClock)
        .monotonic_clock(CountingClock::default());

    let wasm = std::fs::read(&invocation.input)
        .with_context(|| format!("reading {}", invocation.input.display()))?;
    let mut wizer = Wizer::new();
    wizer.init_func(invocation.init_func.clone());
    let (cx, instrumented) = wizer
        .instrument(&wasm)
        .context("instrumenting the engine")?;

    // What could differ between machines: relaxed SIMD's and NaNs' bits.
    let mut config = wasmtime::Config::new();
    config
        .relaxed_simd_deterministic(true)
        .cranelift_nan_canonicalization(true);
    let engine = Engine::new(&config)?;
    let module = Module::new(&engine, &instrumented).context("compiling the engine")?;
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |ctx| ctx)?;
    // The component's own imports (WASI 0.2, the operator's): not callable while initialising,
    // as under wizer.
    linker.define_unknown_imports_as_traps(&module)?;
    let mut store = Store::new(&engine, wasi.build_p1());
    let instance = linker
        .instantiate(&mut store, &module)
        .context("instantiating the engine")?;
    // A reactor's own initialisation first, as wizer does.
    if let Some(reactor) = instance.get_func(&mut store, "_initialize") {
        reactor
            .typed::<(), ()>(&store)?
            .call(&mut store, ())
            .context("calling the engine's _initialize")?;
    }
    instance
        .get_typed_func::<(), ()>(&mut store, &invocation.init_func)
        .with_context(|| format!("the engine exports no `{}`", invocation.init_func))?
        .call(&mut store, ())
        .with_context(|| format!("the `{}` function trapped", invocation.init_func))?;

    // Nothing in the snapshot waits: the future completes on its first poll.
    futures::executor::block_on(wizer.snapshot(
        &cx,
        &mut Initialized {
            store: &mut store,
            instance,
        },
    ))
}

fn main() -> Result<()> {
    let invocation = parse(std::env::args().skip(1))?;
    let component = snapshot(&invocation)?;
    std::fs::write(&invocation.output, component)
        .with_context(|| format!("writing {}", invocation.output.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> + '_ {
        line.split_whitespace().map(String::from)
    }

    #[test]
    fn takes_what_componentize_js_gives_wizer() {
        // componentize-js 0.23.0's invocation (src/componentize.js), without AOT.
        let invocation = parse(args(
            "--allow-wasi --init-func componentize.wizer --dir=/tmp/0123abcd/sources \
             --mapdir=/::/work/op/target --wasm-bulk-memory=true --inherit-env=true \
             -o=/tmp/0123abcd/out.wasm /tmp/0123abcd/in.wasm",
        ))
        .expect("parses");
        assert_eq!(invocation.init_func, "componentize.wizer");
        assert_eq!(
            invocation.sources,
            Some(PathBuf::from("/tmp/0123abcd/sources"))
        );
        assert_eq!(invocation.workspace, Some(PathBuf::from("/work/op/target")));
        assert!(invocation.inherit_env);
        assert_eq!(invocation.input, PathBuf::from("/tmp/0123abcd/in.wasm"));
        assert_eq!(invocation.output, PathBuf::from("/tmp/0123abcd/out.wasm"));
    }

    #[test]
    fn refuses_what_it_would_not_do_as_wizer_does() {
        for (line, named) in [
            ("--weird-flag in.wasm -o out.wasm", "--weird-flag"),
            ("--mapdir=/sub::/x in.wasm -o out.wasm", "--mapdir"),
            ("a.wasm b.wasm -o out.wasm", "more than one input"),
            ("in.wasm", "no output"),
            ("-o out.wasm --init-func", "--init-func needs a value"),
        ] {
            let error = parse(args(line)).err().expect("refused").to_string();
            assert!(error.contains(named), "{line}: {error}");
        }
    }
}
