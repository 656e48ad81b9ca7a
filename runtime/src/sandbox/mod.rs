//! Runs phase and finalizer components: compiled once per digest, instantiated fresh per call.
//! Every call is bounded: a wall-clock deadline (epoch interruption), a memory cap, log and output
//! budgets, and a semaphore; calls run on fibers that yield to the async runtime at every epoch tick.

pub mod bindings;
mod digest;
pub mod log_rate;
pub mod slots;
mod state;
mod stdio;

pub use digest::RequestDigest;

use bindings::finalizer::FinalizerPre;
use bindings::phase::PhasePre;
pub use bindings::{
    FinalizeRequest, FinalizeResult, NamedObjects, SyncRequest, SyncResult, WorkerError,
};
pub use bindings::{LogField, LogLevel};
pub use slots::WorkerSlot;
use state::HostState;
pub use state::RunLimits;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
    UpdateDeadline,
};

/// No phase may return more outputs than this, whatever it asks for.
const MAX_OUTPUTS_CEILING: usize = 10_000;

/// No phase may send more log lines per call than this, whatever it asks for.
const LOG_LINES_CEILING: usize = 10_000;

/// No phase may send more bytes of log per call than this, whatever it asks for.
const LOG_BYTES_CEILING: usize = 1 << 20;

/// No phase may return more bytes of status info than this, whatever it asks for: the status
/// lives in the resource, and the API server refuses objects past ~1.5 MiB.
const STATUS_BYTES_CEILING: usize = 1 << 20;

/// Bytes of each pooled memory kept mapped between calls (`--keep-resident-mib`).
pub const DEFAULT_KEEP_RESIDENT: usize = 8 << 20;

/// Modules whose memory slots the pool keeps beside the running calls (`--warm-modules`).
pub const DEFAULT_WARM_MODULES: usize = 32;

/// Memories a component may define; Rust components have one, more are refused at load.
const MEMORIES_PER_COMPONENT: u32 = 2;

/// Core instances a component may make (a Python component makes ~15, a JavaScript or Rust one
/// fewer); more are refused at load. Each core instance defines at most one table (wasmtime's
/// default per module), so this bounds a component's tables too.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;

/// How often the epoch ticks: a running call checks its deadline and yields its thread to the
/// async runtime at every tick, so no call holds a runtime thread for longer.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Limits for every worker call, set on the host (`wasmpilot run` flags): defaults, and the
/// ceilings a WasmOperator's per-phase overrides cannot exceed.
#[derive(Clone, Debug)]
pub struct SandboxLimits {
    pub deadline: Duration,
    pub memory_bytes: usize,
    pub max_outputs: usize,
    pub max_deadline: Duration,
    pub max_memory_bytes: usize,
    pub max_output_bytes: usize,
    /// The most a phase's `maxOutputKib` override may raise `max_output_bytes` to.
    pub max_output_bytes_ceiling: usize,
    pub log_lines: usize,
    pub log_bytes: usize,
    /// Status info (its JSON) one call may return.
    pub max_status_bytes: usize,
    pub stdio_bytes: usize,
    pub concurrency: usize,
    /// How worker instances get their memory: see [`InstanceMemory`].
    pub instance_memory: InstanceMemory,
    /// Bytes the host may give worker calls together (`None`: not bounded): a definition whose
    /// largest call limit times `concurrency` exceeds it is refused at load.
    pub worker_memory_budget: Option<usize>,
    /// Worker log lines the host's log takes from one operator (`None`: all of them).
    pub log_rate: Option<log_rate::LogRateLimit>,
}

/// Where a fresh instance's linear memory and tables come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceMemory {
    /// mmap per instance, unmapped on drop (wasmtime's default).
    OnDemand,
    /// A pool of slots reserved at start: one per call that may run at once, and one per
    /// module of the `warm_modules` most recently called. A module's slot keeps its memory image
    /// mapped, and on drop up to `keep_resident` bytes of its memory are reset in place and stay
    /// mapped (the rest is returned with madvise), so the module's next call neither maps its
    /// image again nor page-faults its heap in. Costs at most `keep_resident` of RSS per slot
    /// in use or kept (what a call wrote, usually far less); past `warm_modules` modules, the
    /// slot of the one called least recently is taken.
    Pooling {
        keep_resident: usize,
        warm_modules: usize,
    },
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            deadline: Duration::from_secs(2),
            memory_bytes: 64 << 20,
            max_outputs: 1000,
            max_deadline: Duration::from_secs(30),
            max_memory_bytes: 512 << 20,
            max_output_bytes: 8 << 20,
            max_output_bytes_ceiling: 64 << 20,
            log_lines: 1000,
            log_bytes: 256 << 10,
            max_status_bytes: 256 << 10,
            stdio_bytes: 16 << 10,
            concurrency: 4,
            instance_memory: InstanceMemory::Pooling {
                keep_resident: DEFAULT_KEEP_RESIDENT,
                warm_modules: DEFAULT_WARM_MODULES,
            },
            worker_memory_budget: None,
            log_rate: None,
        }
    }
}

/// A definition's memory limits do not fit the host's worker memory budget.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{role} may use {} MiB per call, and {concurrency} calls run at once: {} MiB, more than the host's worker memory budget of {} MiB (lower its limits.memoryMib to at most {} MiB)", .memory >> 20, (.memory * .concurrency) >> 20, .budget >> 20, (.budget / .concurrency) >> 20)]
pub struct MemoryBudgetExceeded {
    pub role: String,
    pub memory: usize,
    pub concurrency: usize,
    pub budget: usize,
}

/// How one sync call runs beyond its request.
#[derive(Default)]
pub struct SyncCall {
    /// The worker slot the caller took before it built the request (`None`: taken here).
    pub slot: Option<WorkerSlot>,
    /// The Secret values the request holds, replaced in the worker's log lines.
    pub redactor: crate::redaction::Redactor,
}

/// Why a worker call produced no usable decision.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the worker returned a retryable error: {0}")]
    Retryable(String),
    #[error("the worker returned a fatal error: {0}")]
    Fatal(String),
    #[error("the worker exceeded its {0:?} deadline")]
    DeadlineExceeded(Duration),
    #[error("the worker exceeded its memory limit of {} MiB{}", .limit >> 20, stderr_suffix(.stderr))]
    MemoryLimit { limit: usize, stderr: String },
    #[error("the worker trapped: {message}{}", stderr_suffix(.stderr))]
    Trap { message: String, stderr: String },
    #[error("the request is {size} bytes, more than half the worker's memory limit of {} MiB", .limit >> 20)]
    RequestTooLarge { size: usize, limit: usize },
    #[error("the worker returned {count} outputs, more than the limit of {limit}")]
    TooManyOutputs { count: usize, limit: usize },
    #[error("the worker returned {}{size} bytes of outputs, more than the limit of {limit}{}", at_least(.unserialized), unserialized_suffix(.unserialized))]
    OutputsTooLarge {
        size: usize,
        limit: usize,
        /// When the worker could not even serialize them and reported their size instead (see
        /// [`SerializeFailure`]): why, in its engine's words.
        unserialized: Option<Unserialized>,
    },
    #[error("the worker returned {}{size} bytes of status info, more than the limit of {limit} (raise it with the phase's limits.maxStatusKib, or keep less in the status){}", at_least(.unserialized), unserialized_suffix(.unserialized))]
    StatusTooLarge {
        size: usize,
        limit: usize,
        unserialized: Option<Unserialized>,
    },
    #[error("the worker sent more than its {lines} log lines or {} KiB of log per call", .bytes >> 10)]
    LogLimit { lines: usize, bytes: usize },
    #[error("could not instantiate the component: {0}")]
    Instantiate(String),
    #[error("the sandbox is shutting down")]
    ShuttingDown,
}

/// A decision the worker could not serialize, as its SDK reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unserialized {
    /// Why, in the worker's engine's words (bounded).
    pub cause: String,
    /// The size is a lower bound: the worker could not read all of it either.
    pub at_least: bool,
}

fn at_least(unserialized: &Option<Unserialized>) -> &'static str {
    match unserialized {
        Some(u) if u.at_least => "at least ",
        _ => "",
    }
}

fn unserialized_suffix(unserialized: &Option<Unserialized>) -> String {
    match unserialized {
        Some(u) => format!("; the worker could not serialize it: {}", u.cause),
        None => String::new(),
    }
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!(" (guest stderr: {})", stderr.trim())
    }
}

/// Lines an engine writes to stderr on its own whatever the worker's error, which would only
/// push the worker's message out of the tail (StarlingMonkey's, as a JavaScript worker aborts).
const ENGINE_STDERR_NOISE: &[&str] = &["Redirecting call to abort() to mozalloc_abort"];

/// The end of what the guest wrote to stderr (a panic message comes last) without the engines'
/// own noise, bounded for messages.
fn stderr_tail(stderr: &str) -> String {
    let stderr = stderr.trim();
    let kept: String;
    let stderr = if ENGINE_STDERR_NOISE.iter().any(|n| stderr.contains(n)) {
        kept = stderr
            .lines()
            .filter(|line| !ENGINE_STDERR_NOISE.contains(&line.trim()))
            .collect::<Vec<_>>()
            .join("\n");
        kept.trim()
    } else {
        stderr
    };
    crate::worker_text::error_text(stderr, crate::worker_text::MESSAGE_BYTES).into_owned()
}

impl RunError {
    /// Fatal errors are not retried with backoff: the same inputs would give the same answer.
    pub fn is_fatal(&self) -> bool {
        matches!(self, RunError::Fatal(_))
    }

    /// A short CamelCase reason for Conditions and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            RunError::Retryable(_) => "WorkerRetryableError",
            RunError::Fatal(_) => "WorkerFatalError",
            RunError::DeadlineExceeded(_) => "WorkerDeadlineExceeded",
            RunError::MemoryLimit { .. } => "WorkerMemoryLimitExceeded",
            RunError::Trap { .. } => "WorkerTrapped",
            RunError::RequestTooLarge { .. } => "RequestTooLarge",
            RunError::TooManyOutputs { .. } | RunError::OutputsTooLarge { .. } => {
                "OutputLimitExceeded"
            }
            RunError::LogLimit { .. } => "WorkerLogLimitExceeded",
            RunError::StatusTooLarge { .. } => "StatusInfoLimitExceeded",
            RunError::Instantiate(_) => "InstantiateFailed",
            RunError::ShuttingDown => "ShuttingDown",
        }
    }
}

/// A component could not be compiled or does not export what its role needs.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("not a valid Wasm component: {0}")]
    Compile(String),
    /// The compile did not finish: stopped at its timeout, or its process died or could not run.
    #[error("compiling stopped: {0}")]
    CompileStopped(String),
    #[error(
        "the component does not fit the `{world}` world of wasmpilot:operator@0.1.0: {message}"
    )]
    WrongWorld {
        world: &'static str,
        message: String,
    },
    #[error(
        "the component imports {}, which the host does not provide: a worker may import only wasmpilot:operator/log and WASI 0.2 io, clocks, random, cli, filesystem and sockets (within the sandbox's limits). Rebuild it without them: componentize-js adds wasi:http unless given `--disable http --disable fetch-event`; a worker gets its data as inputs, so it needs no HTTP client",
        .imports.join(", ")
    )]
    MissingImports { imports: Vec<String> },
}

/// A compile error on one line, for a Condition: wasmtime prints some (a bad magic number) with
/// byte arrays spread over many indented lines.
pub(crate) fn compile_error_text(error: &wasmtime::Error) -> String {
    let text = format!("{error:#}");
    let mut line = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        // `[` and `]` hug what they enclose, and a trailing `,` before `]` goes.
        if !line.is_empty() && !line.ends_with('[') && !word.starts_with(']') {
            line.push(' ');
        }
        if word.starts_with(']') && line.ends_with(',') {
            line.pop();
        }
        line.push_str(word);
    }
    line
}

/// Interface packages the host links into every worker (any 0.2 version for WASI).
const PROVIDED_PACKAGES: [&str; 7] = [
    "wasmpilot:operator/",
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
];

/// The component's imports from packages the host does not link at all.
fn unprovided_imports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .filter(|name| !PROVIDED_PACKAGES.iter().any(|p| name.starts_with(p)))
        .collect()
}

/// The limits of one call: the host's defaults or a phase's overrides, within the ceilings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    pub deadline: Duration,
    pub memory_bytes: usize,
    pub max_outputs: usize,
    pub max_output_bytes: usize,
    pub log_lines: usize,
    pub log_bytes: usize,
    pub max_status_bytes: usize,
}

/// A phase's requested limits; unset fields take the host's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitOverride {
    pub deadline: Option<Duration>,
    pub memory_bytes: Option<usize>,
    pub max_outputs: Option<usize>,
    pub max_output_bytes: Option<usize>,
    pub log_lines: Option<usize>,
    pub log_bytes: Option<usize>,
    pub max_status_bytes: Option<usize>,
}

/// Where a call's WASI random bytes come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Randomness {
    /// A generator seeded from the request's sha256: the same request gives the same bytes,
    /// so a decision can be replayed bit for bit (the default).
    #[default]
    Seeded,
    /// The host's OS generator, for workers that need unpredictable bytes (nonces, passwords);
    /// their decisions cannot be replayed.
    Host,
}

/// Whatever keeps a component listed in its cache while a module made from it lives (see
/// `modules::ComponentInUse`); opaque here, so the sandbox does not depend on the cache.
pub type CacheHold = Arc<dyn std::any::Any + Send + Sync>;

/// A phase component ready to be instantiated per call, with the limits of its calls.
#[derive(Clone)]
pub struct PhaseModule {
    pub digest: String,
    pub limits: CallLimits,
    pub randomness: Randomness,
    pre: PhasePre<HostState>,
    /// Whatever keeps the component listed in its cache while this module lives (see
    /// `modules::ComponentInUse`).
    held: Option<CacheHold>,
}

/// A finalizer component ready to be instantiated per call, with the limits of its calls.
#[derive(Clone)]
pub struct FinalizerModule {
    pub digest: String,
    pub limits: CallLimits,
    pub randomness: Randomness,
    pre: FinalizerPre<HostState>,
    /// Whatever keeps the component listed in its cache while this module lives (see
    /// `modules::ComponentInUse`).
    held: Option<CacheHold>,
}

impl PhaseModule {
    /// The same component with other limits (see [`Sandbox::call_limits`]).
    pub fn with_limits(mut self, limits: CallLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Keeps `hold` (its cache's hold on the component) as long as this module or a clone lives.
    pub fn holding(mut self, hold: CacheHold) -> Self {
        self.held = Some(hold);
        self
    }

    pub fn with_randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }
}

impl FinalizerModule {
    pub fn with_limits(mut self, limits: CallLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn with_randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// Keeps `hold` (its cache's hold on the component) as long as this module or a clone lives.
    pub fn holding(mut self, hold: CacheHold) -> Self {
        self.held = Some(hold);
        self
    }
}

/// The engine settings that decide the generated code: the sandbox's engine adds only its
/// instance allocator to these, and a compile process ([`crate::modules::compile_process`]) uses
/// them as they are, so the artifacts it makes load here.
pub fn codegen_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config
}

/// The Wasm engine, linker, epoch ticker and run limits shared by all operators.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<HostState>,
    limits: SandboxLimits,
    /// The `concurrency` worker slots, handed to operators in turn.
    slots: slots::FairSlots,
    /// Each operator's share of the host's log.
    log_rates: log_rate::LogRates,
    /// The tenant of each operator whose grant names one: slots are handed out per tenant.
    tenants: std::sync::Mutex<std::collections::HashMap<String, String>>,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Sandbox {
    pub fn new(limits: SandboxLimits) -> anyhow::Result<Arc<Self>> {
        let mut config = codegen_config();
        if let InstanceMemory::Pooling {
            keep_resident,
            warm_modules,
        } = limits.instance_memory
        {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(instance_pool(
                &limits,
                keep_resident,
                warm_modules,
            )));
        }
        let engine = Engine::new(&config).map_err(anyhow::Error::from)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(anyhow::Error::from)?;
        bindings::phase::wasmpilot::operator::log::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |s: &mut HostState| s)
        .map_err(anyhow::Error::from)?;
        bindings::finalizer::wasmpilot::operator::finalizer_inputs::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |s: &mut HostState| s)
        .map_err(anyhow::Error::from)?;
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let stop = ticker_stop.clone();
        let ticking = engine.clone();
        std::thread::Builder::new()
            .name("wasmpilot-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticking.increment_epoch();
                }
            })?;
        let slots = slots::FairSlots::new(limits.concurrency.max(1));
        let log_rates = log_rate::LogRates::new(limits.log_rate);
        Ok(Arc::new(Sandbox {
            engine,
            linker,
            limits,
            slots,
            log_rates,
            tenants: Default::default(),
            ticker_stop,
        }))
    }

    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    /// Makes `operator` share the turns of `tenant` (its grant's `spec.tenant`) and its share
    /// of the host's log; `None`: a tenant of its own.
    pub fn set_tenant(&self, operator: &str, tenant: Option<&str>) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        match tenant {
            Some(t) => tenants.insert(operator.to_string(), format!("tenant:{t}")),
            None => tenants.remove(operator),
        };
    }

    /// The tenant `operator` belongs to (its grant's `spec.tenant`), if any.
    pub fn tenant_name(&self, operator: &str) -> Option<String> {
        self.tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(operator)
            .and_then(|key| key.strip_prefix("tenant:"))
            .map(str::to_string)
    }

    /// Whose turn a call of `operator` waits for: its tenant's (`tenant:<name>`, which no
    /// operator name can be), else its own.
    pub fn tenant_of(&self, operator: &str) -> String {
        self.tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(operator)
            .cloned()
            .unwrap_or_else(|| operator.to_string())
    }

    /// The engine components are compiled for (the module compile cache keys entries by it).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether calls limited as `limits` say (by role: `phase Syncing`, `finalizer`) fit the
    /// worker memory budget when every slot runs one: the first that does not, if any.
    pub fn check_fits<'a>(
        &self,
        limits: impl IntoIterator<Item = (String, &'a LimitOverride)>,
    ) -> Result<(), MemoryBudgetExceeded> {
        let Some(budget) = self.limits.worker_memory_budget else {
            return Ok(());
        };
        let concurrency = self.limits.concurrency.max(1);
        for (role, o) in limits {
            let memory = self.call_limits(o).memory_bytes;
            if memory.saturating_mul(concurrency) > budget {
                return Err(MemoryBudgetExceeded {
                    role,
                    memory,
                    concurrency,
                    budget,
                });
            }
        }
        Ok(())
    }

    /// The host's defaults with a phase's overrides applied, capped at the host's ceilings.
    pub fn call_limits(&self, o: &LimitOverride) -> CallLimits {
        let l = &self.limits;
        CallLimits {
            deadline: o.deadline.unwrap_or(l.deadline).min(l.max_deadline),
            memory_bytes: o
                .memory_bytes
                .unwrap_or(l.memory_bytes)
                .min(l.max_memory_bytes),
            max_outputs: o
                .max_outputs
                .unwrap_or(l.max_outputs)
                .min(MAX_OUTPUTS_CEILING),
            max_output_bytes: o
                .max_output_bytes
                .unwrap_or(l.max_output_bytes)
                .min(l.max_output_bytes_ceiling),
            log_lines: o.log_lines.unwrap_or(l.log_lines).min(LOG_LINES_CEILING),
            log_bytes: o.log_bytes.unwrap_or(l.log_bytes).min(LOG_BYTES_CEILING),
            max_status_bytes: o
                .max_status_bytes
                .unwrap_or(l.max_status_bytes)
                .min(STATUS_BYTES_CEILING),
        }
    }

    /// What of `o` this host's ceilings cap, each as the WasmOperator's field, what it asked
    /// and what a call gets (`memoryMib 4096 → 512`): an author who asked for more is told.
    pub fn capped(&self, o: &LimitOverride) -> Vec<String> {
        let got = self.call_limits(o);
        let mut capped = Vec::new();
        let mut note = |field: &str, asked: Option<usize>, allowed: usize, unit: usize| {
            if let Some(asked) = asked.filter(|a| *a > allowed) {
                capped.push(format!("{field} {} → {}", asked / unit, allowed / unit));
            }
        };
        note("memoryMib", o.memory_bytes, got.memory_bytes, 1 << 20);
        note("maxOutputs", o.max_outputs, got.max_outputs, 1);
        note(
            "maxOutputKib",
            o.max_output_bytes,
            got.max_output_bytes,
            1 << 10,
        );
        note("logLines", o.log_lines, got.log_lines, 1);
        note("logKib", o.log_bytes, got.log_bytes, 1 << 10);
        note(
            "maxStatusKib",
            o.max_status_bytes,
            got.max_status_bytes,
            1 << 10,
        );
        if let Some(asked) = o.deadline.filter(|d| *d > got.deadline) {
            capped.insert(0, format!("deadline {asked:?} → {:?}", got.deadline));
        }
        capped
    }

    /// Compiles component bytes to native code (CPU-heavy: call from a blocking thread).
    pub fn compile(&self, bytes: &[u8]) -> Result<Component, LoadError> {
        Component::new(&self.engine, bytes).map_err(|e| LoadError::Compile(compile_error_text(&e)))
    }

    /// Why `component` does not link as a worker of `world`: imports the host does not provide,
    /// or else the world's exports missing.
    fn link_error(
        &self,
        world: &'static str,
        component: &Component,
        error: wasmtime::Error,
    ) -> LoadError {
        let imports = unprovided_imports(&self.engine, component);
        if imports.is_empty() {
            LoadError::WrongWorld {
                world,
                message: format!("{error:#}"),
            }
        } else {
            LoadError::MissingImports { imports }
        }
    }

    /// Links a compiled component as a phase worker; fails if it lacks the `phase-worker` export.
    pub fn phase_module(
        &self,
        digest: &str,
        component: &Component,
    ) -> Result<PhaseModule, LoadError> {
        let wrong = |e| self.link_error("phase", component, e);
        let pre = self.linker.instantiate_pre(component).map_err(wrong)?;
        let pre = PhasePre::new(pre).map_err(wrong)?;
        Ok(PhaseModule {
            digest: digest.to_string(),
            limits: self.call_limits(&LimitOverride::default()),
            randomness: Randomness::default(),
            pre,
            held: None,
        })
    }

    /// Links a compiled component as a finalizer worker.
    pub fn finalizer_module(
        &self,
        digest: &str,
        component: &Component,
    ) -> Result<FinalizerModule, LoadError> {
        let wrong = |e| self.link_error("finalizer", component, e);
        let pre = self.linker.instantiate_pre(component).map_err(wrong)?;
        let pre = FinalizerPre::new(pre).map_err(wrong)?;
        Ok(FinalizerModule {
            digest: digest.to_string(),
            limits: self.call_limits(&LimitOverride::default()),
            randomness: Randomness::default(),
            pre,
            held: None,
        })
    }

    /// Runs `sync` in a fresh instance, on a fiber of the caller's task, within the limits. (A
    /// task per call, to use the other core for another call of the same controller, measured
    /// 1.27× slower at 1,000 AutoRoutes: BENCHMARKS.md.)
    pub async fn run_sync(
        &self,
        module: &PhaseModule,
        request: SyncRequest,
    ) -> Result<SyncResult, RunError> {
        let digest = RequestDigest::of_sync(&request);
        self.run_sync_digested(module, request, digest, SyncCall::default())
            .await
    }

    /// [`Sandbox::run_sync`] for a request whose digest the caller has (it records it), as
    /// `call` says (the slot the caller took, the Secret values to keep out of its logs).
    pub async fn run_sync_digested(
        &self,
        module: &PhaseModule,
        request: SyncRequest,
        digest: RequestDigest,
        call: SyncCall,
    ) -> Result<SyncResult, RunError> {
        let SyncCall { slot, redactor } = call;
        let size = request.resource.len()
            + request
                .inputs
                .iter()
                .flat_map(|i| i.objects.iter())
                .map(String::len)
                .sum::<usize>();
        let limits = module.limits;
        Self::check_request_size(size, &limits)?;
        let _slot = match slot {
            Some(slot) => slot,
            None => self.slot(&request.operator).await?,
        };
        let seed = (module.randomness == Randomness::Seeded).then_some(digest);
        let mut call = self.call(&request.operator, limits, &request.now, seed);
        call.store.data_mut().redactor = redactor;
        let store = &mut call.store;
        let result = within_deadline(limits.deadline, call.started, async {
            let instance = module
                .pre
                .instantiate_async(&mut *store)
                .await
                .map_err(|e| instantiate_error(store, e))?;
            instance
                .wasmpilot_operator_phase_worker()
                .call_sync(&mut *store, &request)
                .await
                .map_err(|e| classify(store, e))
        })
        .await;
        let redactor = call.finish();
        let result = result?.map_err(|e| worker_error(e, &limits, &redactor))?;
        Self::check_outputs(&result.outputs, &limits)?;
        Self::check_status_info(result.status_info.as_deref(), &limits)?;
        Ok(result)
    }

    /// Runs `finalize` in a fresh instance, on a fiber of the caller's task, within the limits;
    /// `inputs` (the finalizer's declared inputs) are what its `finalizer-inputs` import returns;
    /// `redactor`'s Secret values are replaced in its log lines.
    pub async fn run_finalize(
        &self,
        module: &FinalizerModule,
        request: FinalizeRequest,
        inputs: Vec<NamedObjects>,
        redactor: crate::redaction::Redactor,
    ) -> Result<FinalizeResult, RunError> {
        let limits = module.limits;
        let size = request.resource.len()
            + inputs
                .iter()
                .flat_map(|i| i.objects.iter())
                .map(String::len)
                .sum::<usize>();
        Self::check_request_size(size, &limits)?;
        let _slot = self.slot(&request.operator).await?;
        let seed = (module.randomness == Randomness::Seeded)
            .then(|| RequestDigest::of_finalize(&request, &inputs));
        let mut call = self.call(&request.operator, limits, &request.now, seed);
        call.store.data_mut().finalizer_inputs = inputs;
        call.store.data_mut().redactor = redactor;
        let store = &mut call.store;
        let result = within_deadline(limits.deadline, call.started, async {
            let instance = module
                .pre
                .instantiate_async(&mut *store)
                .await
                .map_err(|e| instantiate_error(store, e))?;
            instance
                .wasmpilot_operator_finalizer_worker()
                .call_finalize(&mut *store, &request)
                .await
                .map_err(|e| classify(store, e))
        })
        .await;
        let redactor = call.finish();
        let result = result?.map_err(|e| worker_error(e, &limits, &redactor))?;
        Self::check_status_info(result.status_info.as_deref(), &limits)?;
        Ok(result)
    }

    /// One of the `concurrency` slots for a call of `operator`; the rest wait here, served one
    /// operator after another (see [`slots`]). Held while the call's request is built and run.
    pub async fn slot(&self, operator: &str) -> Result<WorkerSlot, RunError> {
        let waiting = &crate::metrics::METRICS.worker_calls_waiting;
        waiting.inc();
        let slot = self.slots.acquire(&self.tenant_of(operator)).await;
        waiting.dec();
        slot.map_err(|_| RunError::ShuttingDown)
    }

    /// A fresh store for one call of `operator`: its own WASI context, memory limiter, log and
    /// output budgets (and the operator's share of the host's log), and a deadline checked at
    /// every epoch tick, where the call also yields to the runtime.
    fn call(
        &self,
        operator: &str,
        limits: CallLimits,
        now: &str,
        seed: Option<RequestDigest>,
    ) -> WorkerCall {
        let run_limits = RunLimits {
            deadline: limits.deadline,
            memory_bytes: limits.memory_bytes,
            log_lines: limits.log_lines,
            log_bytes: limits.log_bytes,
            stdio_bytes: self.limits.stdio_bytes,
            wall_clock: state::wall_clock_at(now),
            random_seed: seed.map(|d| d.0),
        };
        let mut state = HostState::new(&run_limits);
        // A tenant's operators share one share of the host's log (each operator's drops counted
        // as its own, reported for the tenant).
        state.log_rate = self.log_rates.of(&self.tenant_of(operator), operator);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        let started = Instant::now();
        let deadline = limits.deadline;
        store.epoch_deadline_callback(move |_| {
            if started.elapsed() >= deadline {
                Err(Trap::Interrupt.into())
            } else {
                // tokio's yield lets the runtime poll its I/O and timers before the call goes
                // on; a plain yield would wait behind up to 61 other polls.
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            }
        });
        store.set_epoch_deadline(1);
        WorkerCall { store, started }
    }

    fn check_request_size(size: usize, limits: &CallLimits) -> Result<(), RunError> {
        // Input is copied into linear memory and parsed there; beyond half the limit the call
        // would trap inside the guest allocator with no message.
        if size > limits.memory_bytes / 2 {
            return Err(RunError::RequestTooLarge {
                size,
                limit: limits.memory_bytes,
            });
        }
        Ok(())
    }

    fn check_status_info(info: Option<&str>, limits: &CallLimits) -> Result<(), RunError> {
        let size = info.map_or(0, str::len);
        if size > limits.max_status_bytes {
            return Err(RunError::StatusTooLarge {
                size,
                limit: limits.max_status_bytes,
                unserialized: None,
            });
        }
        Ok(())
    }

    fn check_outputs(outputs: &[String], limits: &CallLimits) -> Result<(), RunError> {
        if outputs.len() > limits.max_outputs {
            return Err(RunError::TooManyOutputs {
                count: outputs.len(),
                limit: limits.max_outputs,
            });
        }
        let size: usize = outputs.iter().map(String::len).sum();
        if size > limits.max_output_bytes {
            return Err(RunError::OutputsTooLarge {
                size,
                limit: limits.max_output_bytes,
                unserialized: None,
            });
        }
        Ok(())
    }
}

/// The store of one worker call, from its creation to what the guest printed.
struct WorkerCall {
    store: Store<HostState>,
    started: Instant,
}

impl WorkerCall {
    /// Forwards what the guest printed to the host log; gives back the call's Secret values,
    /// for the worker's own error.
    fn finish(mut self) -> crate::redaction::Redactor {
        forward_stdio(&self.store);
        tracing::debug!(
            elapsed_us = self.started.elapsed().as_micros() as u64,
            "worker call finished"
        );
        std::mem::take(&mut self.store.data_mut().redactor)
    }
}

/// Slots for every worker call that may run at once (stores live only inside a call, and calls
/// are bounded by the semaphore), each memory able to grow to the largest per-phase limit.
/// Every call's share of the pool is what one component may use at most, checked when it
/// loads: a component that needed more would exhaust the pool when its calls run beside
/// others, and whichever call instantiated next, maybe another operator's, would fail.
///
/// Memory slots are kept for `warm_modules` modules besides: wasmtime hands a module the slot
/// its last instance used (its image still mapped, its heap resident), so with one slot per
/// call only, calls going round more modules than that map images and fault heaps in at every
/// call (measured: 2.2× the time of a call with 30 modules loaded against 3). Below 128 memory
/// slots wasmtime keeps one pool; from 128 it shards it by CPU, and a module is warm only in
/// the shards of the threads that called it.
fn instance_pool(
    limits: &SandboxLimits,
    keep_resident: usize,
    warm_modules: usize,
) -> PoolingAllocationConfig {
    let slots = u32::try_from(limits.concurrency.max(1)).unwrap_or(u32::MAX);
    let warm = u32::try_from(warm_modules).unwrap_or(u32::MAX);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .total_memories(
            slots
                .saturating_add(warm)
                .saturating_mul(MEMORIES_PER_COMPONENT),
        )
        .max_unused_warm_slots(warm.saturating_mul(MEMORIES_PER_COMPONENT))
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .total_tables(slots.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .max_tables_per_component(CORE_INSTANCES_PER_COMPONENT)
        .total_stacks(slots)
        .max_memory_size(limits.max_memory_bytes.max(limits.memory_bytes))
        .linear_memory_keep_resident(keep_resident)
        .table_keep_resident(64 << 10)
        // Reset only the pages a call dirtied (Linux 6.7+), not all of `keep_resident`.
        .pagemap_scan(Enabled::Auto);
    pool
}

/// Ends `call` at `started + deadline` whatever the guest is doing. The epoch deadline stops a
/// guest that computes; this stops one that waits in a host call (a WASI sleep or poll), where
/// no guest code runs to notice the epoch. Dropping the call's future abandons its fiber; the
/// store is dropped with it, and the caller's permit is released.
async fn within_deadline<T>(
    deadline: Duration,
    started: Instant,
    call: impl std::future::Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    let at = tokio::time::Instant::from_std(started + deadline);
    match tokio::time::timeout_at(at, call).await {
        Ok(result) => result,
        Err(_) => Err(RunError::DeadlineExceeded(deadline)),
    }
}

/// A worker's own error, its Secret values replaced and then its message bounded: it ends in
/// Conditions, Events and logs. A fatal
/// error that is an SDK's report of a decision too large to serialize ([`SerializeFailure`])
/// beyond the call's limit is that limit's error, in the words the host uses when it measures
/// the JSON itself (a Rust or Python worker's case).
fn worker_error(
    e: WorkerError,
    limits: &CallLimits,
    redactor: &crate::redaction::Redactor,
) -> RunError {
    use crate::worker_text::{bound_owned, MESSAGE_BYTES};
    match e {
        WorkerError::Retryable(m) => {
            RunError::Retryable(bound_owned(redactor.owned(m), MESSAGE_BYTES))
        }
        WorkerError::Fatal(m) => worker_fatal(redactor.owned(m), limits),
    }
}

/// A worker's fatal error (its text redacted), or the limit its SDK's report names.
fn worker_fatal(m: String, limits: &CallLimits) -> RunError {
    use crate::worker_text::{bound_owned, MESSAGE_BYTES};
    {
        match SerializeFailure::parse(&m) {
            Some(f) if f.is_status() && f.size > limits.max_status_bytes => {
                RunError::StatusTooLarge {
                    size: f.size,
                    limit: limits.max_status_bytes,
                    unserialized: Some(f.unserialized()),
                }
            }
            Some(f) if f.is_output() && f.size > limits.max_output_bytes => {
                RunError::OutputsTooLarge {
                    size: f.size,
                    limit: limits.max_output_bytes,
                    unserialized: Some(f.unserialized()),
                }
            }
            _ => RunError::Fatal(bound_owned(m, MESSAGE_BYTES)),
        }
    }
}

/// A guest SDK's report that its engine could not serialize part of a decision, with the size
/// the JSON would have had: `{what} ([at least ]{size} bytes of JSON) could not be serialized:
/// {cause}`, `what` being `the status` or `output #{index}` (the JavaScript SDK's
/// `serializeFor`; its engine throws rather than grow a string of tens of MB, where Rust and
/// Python return the JSON and the host measures it). A worker that claims a size it did not
/// have misreports only its own failure.
#[derive(Debug, PartialEq)]
struct SerializeFailure<'a> {
    what: &'a str,
    size: usize,
    at_least: bool,
    cause: &'a str,
}

impl<'a> SerializeFailure<'a> {
    fn parse(message: &'a str) -> Option<Self> {
        let (head, cause) = message.split_once(" bytes of JSON) could not be serialized: ")?;
        let (what, size) = head.rsplit_once(" (")?;
        let (size, at_least) = match size.strip_prefix("at least ") {
            Some(size) => (size, true),
            None => (size, false),
        };
        Some(SerializeFailure {
            what,
            size: size.parse().ok()?,
            at_least,
            cause,
        })
    }

    fn unserialized(&self) -> Unserialized {
        Unserialized {
            cause: crate::worker_text::bound_owned(
                self.cause.to_string(),
                crate::worker_text::MESSAGE_BYTES,
            ),
            at_least: self.at_least,
        }
    }

    fn is_status(&self) -> bool {
        self.what == "the status"
    }

    fn is_output(&self) -> bool {
        self.what
            .strip_prefix("output #")
            .is_some_and(|i| i.parse::<usize>().is_ok())
    }
}

/// What the guest wrote to stderr, its Secret values replaced before the tail is cut.
fn stderr_of(store: &Store<HostState>) -> String {
    stderr_tail(&captured(store, &store.data().stderr))
}

/// A captured stream with the call's Secret values replaced, one cut by its cap included.
fn captured(store: &Store<HostState>, pipe: &stdio::CappedOutput) -> String {
    let text = String::from_utf8_lossy(&pipe.contents()).into_owned();
    let redactor = &store.data().redactor;
    if pipe.dropped() > 0 {
        redactor.text_cut_at_end(&text)
    } else {
        redactor.owned(text)
    }
}

fn instantiate_error(store: &Store<HostState>, e: wasmtime::Error) -> RunError {
    match classify(store, e) {
        RunError::Trap { message, .. } => RunError::Instantiate(message),
        other => other,
    }
}

/// Turns a wasmtime error from a call into the precise reason the call failed.
fn classify(store: &Store<HostState>, e: wasmtime::Error) -> RunError {
    let stderr = stderr_of(store);
    if let Some(trap) = e.downcast_ref::<Trap>() {
        if *trap == Trap::Interrupt {
            return RunError::DeadlineExceeded(store.data().deadline);
        }
    }
    if let Some(budget) = e.downcast_ref::<state::LogBudgetExceeded>() {
        return RunError::LogLimit {
            lines: budget.lines,
            bytes: budget.bytes,
        };
    }
    if store.data().limiter.exceeded {
        return RunError::MemoryLimit {
            limit: store.data().limiter.max_bytes,
            stderr,
        };
    }
    let message = match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => {
            let text = format!("{e:#}");
            let first_line = text.lines().next().unwrap_or("trap");
            let redacted = store.data().redactor.text(first_line);
            crate::worker_text::bounded(&redacted, crate::worker_text::MESSAGE_BYTES).into_owned()
        }
    };
    RunError::Trap { message, stderr }
}

/// Sends what the guest printed to the host log, bounded by the pipes' capacity, its Secret
/// values replaced.
fn forward_stdio(store: &Store<HostState>) {
    for (stream, pipe) in [
        ("stdout", &store.data().stdout),
        ("stderr", &store.data().stderr),
    ] {
        if pipe.is_empty() || !store.data().host_log_takes_a_line() {
            continue;
        }
        let text = captured(store, pipe);
        let dropped = pipe.dropped();
        tracing::info!(target: "wasmpilot::guest", stream, dropped_bytes = dropped, "{}", text.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_message_keeps_the_workers_stderr_without_the_engines_noise() {
        // What a JavaScript worker's uncaught error leaves on stderr (StarlingMonkey's line last).
        let js = "the worker threw TypeError: x is undefined\nStack:\n  decide@w.js:9:7\n\
                  Redirecting call to abort() to mozalloc_abort\n";
        assert_eq!(
            stderr_tail(js),
            "the worker threw TypeError: x is undefined\nStack:\n  decide@w.js:9:7"
        );
        // A worker's own line that merely mentions it is kept.
        let own = "log: Redirecting call to abort() to mozalloc_abort is the engine's";
        assert_eq!(stderr_tail(own), own);
        let long = format!("{}\npanicked at the end", "x".repeat(4000));
        let tail = stderr_tail(&long);
        assert!(tail.ends_with("x\npanicked at the end"), "{tail}");
        assert!(tail.contains("… (2996 bytes truncated) …"), "{tail}");
    }

    /// Page faults of the calling thread so far.
    fn thread_minor_faults() -> i64 {
        // SAFETY: getrusage writes the struct it is given, nothing else.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        usage.ru_minflt
    }

    /// Whether the kernel has PAGEMAP_SCAN (Linux 6.7), which the pool's reset needs.
    fn kernel_has_pagemap_scan() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (major, minor) >= (6, 7)
    }

    /// A memory whose dirty pages lie in more regions than one PAGEMAP_SCAN reports (32) is
    /// still reset in place (wasmtime 48.0.11; before, our patch: third_party/README.md), so the
    /// next instance of the module writes them without faulting them in again. Before 48.0.11,
    /// all but the first 32 regions were decommitted on every reset.
    #[test]
    fn scattered_dirty_pages_stay_resident_between_instances() {
        if !kernel_has_pagemap_scan() {
            eprintln!(
                "SKIPPED: this kernel has no PAGEMAP_SCAN (Linux 6.7+); memory is reset by madvise"
            );
            return;
        }
        let pages = 100;
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(instance_pool(
            &SandboxLimits::default(),
            DEFAULT_KEEP_RESIDENT,
            DEFAULT_WARM_MODULES,
        )));
        let engine = Engine::new(&config).expect("engine");
        // One byte written on every other host page: `pages` regions apart.
        let wat = format!(
            r#"(module
                (memory (export "memory") 16)
                (data (i32.const 0) "image")
                (func (export "touch")
                  (local $at i32)
                  (loop $pages
                    (i32.store8 (local.get $at) (i32.const 1))
                    (local.set $at (i32.add (local.get $at) (i32.const 8192)))
                    (br_if $pages (i32.lt_u (local.get $at) (i32.const {})))))
            )"#,
            pages * 8192
        );
        let module =
            wasmtime::Module::new(&engine, wat::parse_str(&wat).expect("wat")).expect("module");
        let faults: Vec<i64> = (0..3)
            .map(|_| {
                let mut store = Store::new(&engine, ());
                let instance =
                    wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiates");
                let touch = instance
                    .get_typed_func::<(), ()>(&mut store, "touch")
                    .expect("touch");
                let before = thread_minor_faults();
                touch.call(&mut store, ()).expect("runs");
                thread_minor_faults() - before
            })
            .collect();
        // The premise: the first instance faulted its pages in.
        assert!(faults[0] >= pages, "first instance: {faults:?}");
        assert!(
            faults[2] < 8,
            "the third instance faulted {} of its {pages} pages in again: {faults:?}",
            faults[2]
        );
    }

    /// Calls going round more modules than there are call slots: with slots kept for warm
    /// modules, each module's next instance finds its image mapped and the pages it wrote
    /// resident (no page faults); without (the premise), every instance maps its module's image
    /// again and faults in every page it writes.
    #[test]
    fn modules_called_in_turn_keep_their_memory_slots() {
        let pages = 40;
        let modules = 6;
        let faults_per_instance = |warm_modules: usize| {
            let limits = SandboxLimits {
                concurrency: 1,
                ..SandboxLimits::default()
            };
            let mut config = Config::new();
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(instance_pool(
                &limits,
                DEFAULT_KEEP_RESIDENT,
                warm_modules,
            )));
            let engine = Engine::new(&config).expect("engine");
            // Each module has its own image (a data segment on every page it reads and writes).
            let loaded: Vec<wasmtime::Module> = (0..modules)
                .map(|m| {
                    let data: String = (0..pages)
                        .map(|p| format!("(data (i32.const {}) \"module {m}\")\n", p * 4096))
                        .collect();
                    let wat = format!(
                        r#"(module
                            (memory (export "memory") 4)
                            {data}
                            (func (export "touch") (result i32)
                              (local $at i32) (local $sum i32)
                              (loop $pages
                                (local.set $sum (i32.add (local.get $sum) (i32.load8_u (local.get $at))))
                                (i32.store8 (i32.add (local.get $at) (i32.const 100)) (local.get $sum))
                                (local.set $at (i32.add (local.get $at) (i32.const 4096)))
                                (br_if $pages (i32.lt_u (local.get $at) (i32.const {}))))
                              (local.get $sum)))"#,
                        pages * 4096
                    );
                    wasmtime::Module::new(&engine, wat::parse_str(&wat).expect("wat"))
                        .expect("module")
                })
                .collect();
            let mut faults = Vec::new();
            for round in 0..3 {
                for module in &loaded {
                    let mut store = Store::new(&engine, ());
                    let before = thread_minor_faults();
                    let instance =
                        wasmtime::Instance::new(&mut store, module, &[]).expect("instantiates");
                    let touch = instance
                        .get_typed_func::<(), i32>(&mut store, "touch")
                        .expect("touch");
                    touch.call(&mut store, ()).expect("runs");
                    if round == 2 {
                        faults.push(thread_minor_faults() - before);
                    }
                }
            }
            faults
        };
        let without = faults_per_instance(0);
        assert!(
            without.iter().all(|&f| f >= pages),
            "premise: one slot for {modules} modules faults every page in: {without:?}"
        );
        let with = faults_per_instance(modules);
        eprintln!("page faults per instance: without warm slots {without:?}, with {with:?}");
        assert!(
            with.iter().all(|&f| f < 4),
            "a warm module faulted pages in again: {with:?} (without warm slots: {without:?})"
        );
    }

    /// Function references made while a table is filled at instantiation (our former wasmtime
    /// patch built them from a per-module table: `third_party/README.md`). Two dynamically linked
    /// "libraries" fill a shared table from element segments at imported offsets, as
    /// componentize-py's CPython does; every slot must call its own function, in every fresh
    /// instance, with imported functions shifting the function indices.
    #[test]
    fn table_slots_filled_at_instantiation_call_their_own_functions() {
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(instance_pool(
            &SandboxLimits::default(),
            DEFAULT_KEEP_RESIDENT,
            DEFAULT_WARM_MODULES,
        )));
        let engine = Engine::new(&config).expect("engine");
        let table_module = wasmtime::Module::new(
            &engine,
            wat::parse_str(r#"(module (table (export "table") 200 funcref))"#).expect("wat"),
        )
        .expect("table module");
        // `count` functions returning `seed + i`, placed in the table at the imported base; an
        // imported function first, and one more function that never escapes.
        let library = |seed: i32, count: i32| {
            let funcs: String = (0..count)
                .map(|i| format!("(func $f{i} (result i32) i32.const {})\n", seed + i))
                .collect();
            let names: String = (0..count).map(|i| format!(" $f{i}")).collect();
            let wat = format!(
                r#"(module
                    (import "host" "ignored" (func $ignored))
                    (import "env" "table" (table 200 funcref))
                    (import "env" "base" (global $base i32))
                    (type $ret (func (result i32)))
                    (func $private (result i32) i32.const -1)
                    {funcs}
                    (elem (global.get $base) func{names})
                    (func (export "slot") (param $i i32) (result i32)
                      (call_indirect (type $ret) (i32.add (local.get $i) (global.get $base)))))"#
            );
            wasmtime::Module::new(&engine, wat::parse_str(&wat).expect("wat")).expect("library")
        };
        let (first, second) = (library(1000, 60), library(5000, 40));
        for round in 0..3 {
            let mut store = Store::new(&engine, ());
            let table = wasmtime::Instance::new(&mut store, &table_module, &[])
                .expect("table instance")
                .get_table(&mut store, "table")
                .expect("table");
            let ignored = wasmtime::Func::wrap(&mut store, || {});
            for (module, base, seed, count) in [(&first, 3, 1000, 60), (&second, 100, 5000, 40)] {
                let base = wasmtime::Global::new(
                    &mut store,
                    wasmtime::GlobalType::new(wasmtime::ValType::I32, wasmtime::Mutability::Const),
                    wasmtime::Val::I32(base),
                )
                .expect("global");
                let instance = wasmtime::Instance::new(
                    &mut store,
                    module,
                    &[ignored.into(), table.into(), base.into()],
                )
                .expect("library instance");
                let slot = instance
                    .get_typed_func::<i32, i32>(&mut store, "slot")
                    .expect("slot");
                for i in 0..count {
                    assert_eq!(
                        slot.call(&mut store, i).expect("calls"),
                        seed + i,
                        "round {round}, slot {i} of the library seeded {seed}"
                    );
                }
            }
        }
    }

    /// A component of `instances` core instances of one empty module (and nothing else).
    fn component_of_core_instances(instances: u32) -> Vec<u8> {
        let body: String = (0..instances)
            .map(|_| "(core instance (instantiate $m))\n")
            .collect();
        wat::parse_str(format!("(component (core module $m) {body})")).expect("component wat")
    }

    /// The premise of the per-component limit: with it lifted, two calls of one operator whose
    /// component makes more than its share of core instances leave too few for another
    /// operator's call of a component within its share, which fails.
    #[test]
    fn without_a_per_component_limit_one_operators_calls_fail_anothers() {
        let limits = SandboxLimits::default();
        let mut pool = instance_pool(&limits, DEFAULT_KEEP_RESIDENT, DEFAULT_WARM_MODULES);
        pool.max_core_instances_per_component(u32::MAX);
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).expect("engine");
        let total =
            u32::try_from(limits.concurrency).expect("small") * CORE_INSTANCES_PER_COMPONENT;
        let oversized = Component::new(&engine, component_of_core_instances(total * 3 / 8 + 1))
            .expect("loads without the limit");
        let within_share = Component::new(
            &engine,
            component_of_core_instances(CORE_INSTANCES_PER_COMPONENT),
        )
        .expect("loads");
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let mut calls = Vec::new();
        for _ in 0..2 {
            let mut store = Store::new(&engine, ());
            linker
                .instantiate(&mut store, &oversized)
                .expect("each of two calls fits");
            calls.push(store);
        }
        let mut other = Store::new(&engine, ());
        let error = linker
            .instantiate(&mut other, &within_share)
            .expect_err("the other operator's call fails");
        assert!(format!("{error:?}").contains("core instances"), "{error:?}");
        drop(calls);
        let mut again = Store::new(&engine, ());
        linker
            .instantiate(&mut again, &within_share)
            .expect("fits once those calls ended");
    }

    /// The shipped pool refuses such a component when it loads: a component may make at most
    /// one call's share of the pool's core instances, so `concurrency` calls always fit.
    #[test]
    fn a_component_making_more_than_a_calls_share_of_core_instances_is_refused_at_load() {
        let sandbox = Sandbox::new(SandboxLimits::default()).expect("sandbox");
        sandbox
            .compile(&component_of_core_instances(CORE_INSTANCES_PER_COMPONENT))
            .expect("a call's share loads");
        let refused = sandbox
            .compile(&component_of_core_instances(
                CORE_INSTANCES_PER_COMPONENT + 1,
            ))
            .expect_err("more is refused");
        let text = refused.to_string();
        assert!(
            text.contains("33 core module instances") && text.contains("maximum of 32"),
            "{text}"
        );
    }

    /// One tenant's many operators take one turn of the slots: another tenant's call waits
    /// for one of theirs, not for one of each.
    #[tokio::test]
    async fn the_operators_of_one_tenant_share_its_turn() {
        let limits = SandboxLimits {
            concurrency: 1,
            ..SandboxLimits::default()
        };
        let sandbox = Sandbox::new(limits).expect("sandbox");
        for op in ["a1", "a2", "a3"] {
            sandbox.set_tenant(op, Some("team-a"));
        }
        assert_eq!(sandbox.tenant_of("a2"), sandbox.tenant_of("a3"));
        assert_eq!(sandbox.tenant_of("b"), "b");
        assert_eq!(sandbox.tenant_name("a1").as_deref(), Some("team-a"));
        assert_eq!(sandbox.tenant_name("b"), None);
        let held = sandbox.slot("x").await.expect("the only slot");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for op in ["a1", "a2", "a3", "b"] {
            let (sandbox, order) = (sandbox.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _slot = sandbox.slot(op).await.expect("a slot");
                order.lock().expect("order").push(op);
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }));
            // Queued in this order.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        drop(held);
        for w in waiting {
            w.await.expect("served");
        }
        let order = order.lock().expect("order").clone();
        assert_eq!(
            order,
            ["a1", "b", "a2", "a3"],
            "b waits for one call of team-a, not three"
        );
        sandbox.set_tenant("a1", None);
        assert_eq!(sandbox.tenant_of("a1"), "a1");
    }

    #[test]
    fn limits_that_cannot_fit_the_worker_memory_budget_are_refused() {
        let limits = SandboxLimits {
            worker_memory_budget: Some(256 << 20),
            instance_memory: InstanceMemory::OnDemand,
            ..SandboxLimits::default()
        };
        let sandbox = Sandbox::new(limits).expect("sandbox");
        let default = LimitOverride::default();
        let large = LimitOverride {
            memory_bytes: Some(128 << 20),
            ..Default::default()
        };
        assert!(sandbox
            .check_fits([("phase A".to_string(), &default)])
            .is_ok());
        let refused = sandbox
            .check_fits([
                ("phase A".to_string(), &default),
                ("phase B".to_string(), &large),
            ])
            .expect_err("4 × 128 MiB > 256 MiB");
        assert_eq!(
            refused.to_string(),
            "phase B may use 128 MiB per call, and 4 calls run at once: 512 MiB, more than the host's worker memory budget of 256 MiB (lower its limits.memoryMib to at most 64 MiB)"
        );
    }

    fn limits() -> CallLimits {
        let l = SandboxLimits::default();
        CallLimits {
            deadline: l.deadline,
            memory_bytes: l.memory_bytes,
            max_outputs: l.max_outputs,
            max_output_bytes: l.max_output_bytes,
            log_lines: l.log_lines,
            log_bytes: l.log_bytes,
            max_status_bytes: l.max_status_bytes,
        }
    }

    #[test]
    fn an_sdks_report_of_a_status_beyond_the_limit_is_the_hosts_limit_error() {
        let e = worker_error(
            WorkerError::Fatal(
                "the status (52428812 bytes of JSON) could not be serialized: out of memory".into(),
            ),
            &limits(),
            &Default::default(),
        );
        assert_eq!(e.reason(), "StatusInfoLimitExceeded");
        assert_eq!(
            e.to_string(),
            "the worker returned 52428812 bytes of status info, more than the limit of 262144 \
             (raise it with the phase's limits.maxStatusKib, or keep less in the status); the \
             worker could not serialize it: out of memory"
        );
        let e = worker_error(
            WorkerError::Fatal(
                "output #3 (9000000 bytes of JSON) could not be serialized: RangeError: Invalid string length".into(),
            ),
            &limits(),
            &Default::default(),
        );
        assert_eq!(e.reason(), "OutputLimitExceeded");

        assert!(
            e.to_string().starts_with(
                "the worker returned 9000000 bytes of outputs, more than the limit of 8388608; \
                 the worker could not serialize it: RangeError: Invalid string length"
            ),
            "{e}"
        );
        let lower = worker_error(
            WorkerError::Fatal(
                "the status (at least 52428802 bytes of JSON) could not be serialized: out of memory".into(),
            ),
            &limits(),
            &Default::default(),
        );
        assert!(
            lower.to_string().starts_with("the worker returned at least 52428802 bytes of status info, more than the limit of 262144 ("),
            "{lower}"
        );
    }

    #[test]
    fn an_sdks_report_within_the_limit_or_of_another_shape_stays_the_workers_error() {
        for message in [
            // Within the limit: the engine's failure (memory) is the news, kept as it is.
            "the status (1000 bytes of JSON) could not be serialized: out of memory",
            "output #x (99999999 bytes of JSON) could not be serialized: out of memory",
            "the resource (99999999 bytes of JSON) could not be serialized: out of memory",
            "the status (lots of bytes of JSON) could not be serialized: out of memory",
            "the status does not serialize to JSON: a BigInt (10) is not JSON",
        ] {
            let e = worker_error(
                WorkerError::Fatal(message.into()),
                &limits(),
                &Default::default(),
            );
            assert_eq!(e.reason(), "WorkerFatalError", "{message}");
            assert_eq!(
                e.to_string(),
                format!("the worker returned a fatal error: {message}")
            );
        }
    }
}
