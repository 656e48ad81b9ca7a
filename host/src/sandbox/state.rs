//! Per-run guest state: a `HostStateBuilder` per call becomes the `HostState` of one fresh Store.
//! It holds the WASI context (no files, sockets, env or args), the memory limiter and the log sink.

use super::bindings::{phase::wasmpilot::operator::log, LogField, LogLevel};
use super::stdio::CappedOutput;
use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Caps applied to one run.
#[derive(Clone, Debug)]
pub struct RunLimits {
    pub deadline: std::time::Duration,
    pub memory_bytes: usize,
    pub log_lines: usize,
    pub log_bytes: usize,
    pub stdio_bytes: usize,
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
}

impl HostState {
    pub fn new(limits: &RunLimits) -> Self {
        let stdout = CappedOutput::new(limits.stdio_bytes);
        let stderr = CappedOutput::new(limits.stdio_bytes);
        // No preopened directories, no environment, no arguments, no network: WasiCtxBuilder
        // grants none of these unless asked, and the socket address check denies everything.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                max_bytes: limits.memory_bytes,
                exceeded: false,
            },
            logs: LogSink {
                lines_left: limits.log_lines,
                bytes_left: limits.log_bytes,
                dropped: 0,
            },
            stdout,
            stderr,
            deadline: limits.deadline,
        }
    }

    /// Log lines the guest sent beyond its budget.
    pub fn dropped_log_lines(&self) -> usize {
        self.logs.dropped
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

/// Refuses linear memory growth beyond the limit and remembers that it did.
pub struct MemoryLimiter {
    pub(super) max_bytes: usize,
    pub(super) exceeded: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.exceeded = true;
            return Ok(false);
        }
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
    dropped: usize,
}

impl log::Host for HostState {
    fn log(&mut self, level: LogLevel, message: String, fields: Vec<LogField>) {
        let size = message.len()
            + fields
                .iter()
                .map(|f| f.key.len() + f.value.len())
                .sum::<usize>();
        if self.logs.lines_left == 0 || size > self.logs.bytes_left {
            self.logs.dropped += 1;
            return;
        }
        self.logs.lines_left -= 1;
        self.logs.bytes_left -= size;
        let fields = fields
            .iter()
            .map(|f| format!("{}={}", f.key, f.value))
            .collect::<Vec<_>>()
            .join(" ");
        // The span of the current reconcile (operator, resource, phase) is entered by the caller.
        match level {
            LogLevel::Trace => tracing::trace!(target: "wasmpilot::guest", %fields, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "wasmpilot::guest", %fields, "{message}"),
            LogLevel::Info => tracing::info!(target: "wasmpilot::guest", %fields, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "wasmpilot::guest", %fields, "{message}"),
            LogLevel::Error => tracing::error!(target: "wasmpilot::guest", %fields, "{message}"),
        }
    }
}

impl super::bindings::phase::wasmpilot::operator::types::Host for HostState {}
