//! What a worker knows about its run besides the resource: names, the host's clock, logging.

use std::cell::RefCell;
use std::fmt;

use k8s_openapi::jiff::Timestamp;

/// A log level, as in the host's `tracing` output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// One log line a worker wrote. In a component it goes straight to the host;
/// natively (tests) it is kept and returned by [`testing`](crate::testing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub level: LogLevel,
    pub message: String,
    /// Key/value pairs, values already formatted with `Display`.
    pub fields: Vec<(String, String)>,
}

impl LogRecord {
    /// The value of the field `key`, if the record has one.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for LogRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.level, self.message)?;
        for (k, v) in &self.fields {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// The run a worker is deciding: which operator and phase, the host's clock, and a logger.
///
/// ```no_run
/// # fn f(ctx: &wasmpilot_guest::Context) {
/// let name = "web";
/// ctx.info("creating service", &[("deployment", &name), ("port", &8080)]);
/// let started = ctx.now(); // a jiff::Timestamp
/// # }
/// ```
pub struct Context {
    operator: String,
    phase: String,
    now: Timestamp,
    /// Natively, where log records go; in a component they go to the host instead.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    logs: RefCell<Vec<LogRecord>>,
}

impl Context {
    pub(crate) fn new(operator: String, phase: String, now: Timestamp) -> Self {
        Self {
            operator,
            phase,
            now,
            logs: RefCell::new(Vec::new()),
        }
    }

    /// The name of the WasmOperator this worker belongs to.
    pub fn operator(&self) -> &str {
        &self.operator
    }

    /// The phase being run: the resource's current `.status.phase`, or the initial phase.
    /// For a finalizer worker: `"finalizer"`.
    pub fn phase(&self) -> &str {
        &self.phase
    }

    /// The host's clock when it started this run. Workers have no other clock.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Writes a log line with key/value fields. See [`info`](Self::info) for the shorthand.
    pub fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.to_string()))
            .collect();
        self.emit(level, message, fields);
    }

    pub fn trace(&self, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        self.log(LogLevel::Trace, message, fields);
    }

    pub fn debug(&self, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        self.log(LogLevel::Debug, message, fields);
    }

    /// Writes an info line: `ctx.info("synced", &[("services", &3)])`.
    pub fn info(&self, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        self.log(LogLevel::Info, message, fields);
    }

    pub fn warn(&self, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        self.log(LogLevel::Warn, message, fields);
    }

    pub fn error(&self, message: &str, fields: &[(&str, &dyn fmt::Display)]) {
        self.log(LogLevel::Error, message, fields);
    }

    #[cfg(target_arch = "wasm32")]
    fn emit(&self, level: LogLevel, message: &str, fields: Vec<(String, String)>) {
        use crate::wit::wasmpilot::operator::log::{self as host, Field, Level};
        let level = match level {
            LogLevel::Trace => Level::Trace,
            LogLevel::Debug => Level::Debug,
            LogLevel::Info => Level::Info,
            LogLevel::Warn => Level::Warn,
            LogLevel::Error => Level::Error,
        };
        let fields: Vec<Field> = fields
            .into_iter()
            .map(|(key, value)| Field { key, value })
            .collect();
        host::log(level, message, &fields);
    }

    /// Natively the host's `log` import does not exist: keep the record for the
    /// test and print it (libtest shows it when the test fails).
    #[cfg(not(target_arch = "wasm32"))]
    fn emit(&self, level: LogLevel, message: &str, fields: Vec<(String, String)>) {
        let record = LogRecord {
            level,
            message: message.to_owned(),
            fields,
        };
        eprintln!("[{} {}] {record}", self.operator, self.phase);
        self.logs.borrow_mut().push(record);
    }

    /// The records written so far (always empty in a component).
    pub(crate) fn take_logs(&self) -> Vec<LogRecord> {
        self.logs.take()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("operator", &self.operator)
            .field("phase", &self.phase)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}
