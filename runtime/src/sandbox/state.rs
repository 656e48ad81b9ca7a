//! Per-run guest state: a `HostStateBuilder` per call becomes the `HostState` of one fresh Store.
//! It holds the WASI context (no files, sockets, env or args), the memory limiter and the log sink.

use super::bindings::{phase::wasmpilot::operator::log, LogField, LogLevel};
use super::stdio::CappedOutput;
use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Caps applied to one run.
#[derive(Clone, Debug)]
pub struct RunLimits {
    pub deadline: std::time::Duration,
    pub memory_bytes: usize,
    pub log_lines: usize,
    pub log_bytes: usize,
    pub stdio_bytes: usize,
    /// What the guest's wall clock reads, since the Unix epoch: the request's `now`.
    pub wall_clock: Option<std::time::Duration>,
    /// Seed of the guest's WASI random (the request's sha256); `None`: the host's OS generator.
    pub random_seed: Option<[u8; 32]>,
}

/// Everything one Store owns for one worker call.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    logs: LogSink,
    pub(super) stdout: CappedOutput,
    pub(super) stderr: CappedOutput,
    pub(super) deadline: std::time::Duration,
    /// What the `finalizer-inputs` import returns: a finalizer call's declared inputs (empty
    /// for a phase call).
    pub(super) finalizer_inputs: Vec<super::NamedObjects>,
    /// The Secret values the call was handed: replaced in the log lines it sends.
    pub(super) redactor: crate::redaction::Redactor,
    /// The operator's share of the host's log (`None`: not limited).
    pub(super) log_rate: Option<super::log_rate::LogShare>,
}

impl HostState {
    pub fn new(limits: &RunLimits) -> Self {
        let stdout = CappedOutput::new(limits.stdio_bytes);
        let stderr = CappedOutput::new(limits.stdio_bytes);
        // No preopened directories, no environment, no arguments: WasiCtxBuilder grants none of
        // these unless asked. No network: TCP, UDP and name lookup are switched off (and the
        // default socket address check denies every address anyway). The wall clock reads the
        // request's `now`, so a worker that asks the system for the time gets the same answer
        // as `Context::now`. Random bytes come from a generator seeded by the request (unless
        // the phase asks for the host's). What remains outside the request: the monotonic clock
        // (for measuring; it must not decide anything), and stdout/stderr captured below.
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(now) = limits.wall_clock {
            wasi.wall_clock(FrozenWallClock(now));
        }
        if let Some(seed) = limits.random_seed {
            // Both of WASI's generators and the insecure seed derive from the request, so the
            // same request gives the same bytes (and a replay the same decision).
            use rand::SeedableRng;
            let mut insecure = seed;
            insecure[0] ^= 0x5a;
            let mut low = [0u8; 16];
            low.copy_from_slice(&seed[..16]);
            wasi.secure_random(rand::rngs::StdRng::from_seed(seed))
                .insecure_random(rand::rngs::StdRng::from_seed(insecure))
                .insecure_random_seed(u128::from_le_bytes(low));
        }
        let wasi = wasi.build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                max_bytes: limits.memory_bytes,
                used: 0,
                exceeded: false,
            },
            logs: LogSink {
                lines_left: limits.log_lines,
                bytes_left: limits.log_bytes,
                lines: limits.log_lines,
                bytes: limits.log_bytes,
            },
            stdout,
            stderr,
            deadline: limits.deadline,
            finalizer_inputs: Vec::new(),
            redactor: Default::default(),
            log_rate: None,
        }
    }
}

impl HostState {
    /// Whether the host's log takes one more line of this call's operator (its share, see
    /// [`super::log_rate`]); the call goes on either way.
    pub(super) fn host_log_takes_a_line(&self) -> bool {
        self.log_rate.as_ref().is_none_or(|rate| rate.admit())
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A wall clock that always reads the same instant.
struct FrozenWallClock(std::time::Duration);

impl HostWallClock for FrozenWallClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }

    fn now(&self) -> std::time::Duration {
        self.0
    }
}

/// The instant an RFC 3339 timestamp names, as the guest's wall clock reads it.
pub fn wall_clock_at(rfc3339: &str) -> Option<std::time::Duration> {
    let t: jiff::Timestamp = rfc3339.parse().ok()?;
    let secs = u64::try_from(t.as_second()).ok()?;
    let nanos = u32::try_from(t.subsec_nanosecond()).ok()?;
    Some(std::time::Duration::new(secs, nanos))
}

/// Refuses linear memory growth beyond the limit, counted over every memory of the call's
/// instance (a component may have several), and remembers that it did.
pub struct MemoryLimiter {
    pub(super) max_bytes: usize,
    /// Bytes of linear memory the call's memories hold together (each created at its initial
    /// size and only ever grown, every step asked of this limiter).
    pub(super) used: usize,
    pub(super) exceeded: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.used.saturating_add(desired.saturating_sub(current));
        if after > self.max_bytes {
            self.exceeded = true;
            return Ok(false);
        }
        self.used = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

struct LogSink {
    lines_left: usize,
    bytes_left: usize,
    lines: usize,
    bytes: usize,
}

/// The trap a guest gets for the log line that crosses its per-call budget.
#[derive(Debug, thiserror::Error)]
#[error("log budget of {lines} lines / {bytes} bytes per call exceeded")]
pub struct LogBudgetExceeded {
    pub lines: usize,
    pub bytes: usize,
}

impl log::Host for HostState {
    fn log(
        &mut self,
        level: LogLevel,
        message: String,
        fields: Vec<LogField>,
    ) -> wasmtime::Result<()> {
        let size = message.len()
            + fields
                .iter()
                .map(|f| f.key.len() + f.value.len())
                .sum::<usize>();
        if self.logs.lines_left == 0 || size > self.logs.bytes_left {
            return Err(LogBudgetExceeded {
                lines: self.logs.lines,
                bytes: self.logs.bytes,
            }
            .into());
        }
        self.logs.lines_left -= 1;
        self.logs.bytes_left -= size;
        if !guest_level_enabled(level) || !self.host_log_takes_a_line() {
            return Ok(());
        }
        // The budget counts what the guest sent; the host's log gets a bounded line.
        let fields = fields
            .iter()
            .map(|f| format!("{}={}", f.key, f.value))
            .collect::<Vec<_>>()
            .join(" ");
        // Secret values replaced before the cut, so none is cut in two and kept in part.
        let max = crate::worker_text::LOG_LINE_BYTES;
        let message = crate::worker_text::bound_owned(self.redactor.owned(message), max);
        let fields = crate::worker_text::bound_owned(self.redactor.owned(fields), max);
        // The span of the current reconcile (operator, resource, phase) is entered by the caller.
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: "wasmpilot::guest", fields = fields.as_str(), "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "wasmpilot::guest", fields = fields.as_str(), "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "wasmpilot::guest", fields = fields.as_str(), "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "wasmpilot::guest", fields = fields.as_str(), "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: "wasmpilot::guest", fields = fields.as_str(), "{message}")
            }
        }
        Ok(())
    }
}

/// Whether the host's log writes worker lines of `level` (a line it filters out takes nothing
/// of the operator's share).
fn guest_level_enabled(level: LogLevel) -> bool {
    use tracing::Level;
    match level {
        LogLevel::Trace => tracing::enabled!(target: "wasmpilot::guest", Level::TRACE),
        LogLevel::Debug => tracing::enabled!(target: "wasmpilot::guest", Level::DEBUG),
        LogLevel::Info => tracing::enabled!(target: "wasmpilot::guest", Level::INFO),
        LogLevel::Warn => tracing::enabled!(target: "wasmpilot::guest", Level::WARN),
        LogLevel::Error => tracing::enabled!(target: "wasmpilot::guest", Level::ERROR),
    }
}

impl super::bindings::phase::wasmpilot::operator::types::Host for HostState {}

impl super::bindings::finalizer::wasmpilot::operator::finalizer_inputs::Host for HostState {
    fn inputs(&mut self) -> Vec<super::NamedObjects> {
        self.finalizer_inputs.clone()
    }
}
