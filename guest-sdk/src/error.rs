//! Why a worker could not decide: retry later (with backoff), or give up on these inputs (run
//! again on the next change or resync).

use std::fmt;

/// Whether the host should retry a failed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient: the host retries with exponential backoff.
    Retryable,
    /// Permanent for this generation of the resource: the host reports it as a
    /// Condition and an Event and does not retry until the resource or an input changes.
    Fatal,
}

/// The error a worker returns instead of an [`Outcome`](crate::Outcome).
///
/// ```no_run
/// use wasmpilot_guest::WorkerError;
///
/// fn parse_port(s: &str) -> Result<u16, WorkerError> {
///     s.parse().map_err(|e| WorkerError::fatal(format!("spec.port {s:?} is not a port: {e}")))
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerError {
    kind: ErrorKind,
    message: String,
}

impl WorkerError {
    /// A transient failure: the host runs the worker again with backoff.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Retryable,
            message: message.into(),
        }
    }

    /// A permanent failure for these inputs: reported as a Condition and an Event, not retried
    /// with backoff; the worker runs again when the resource or an input changes, or at the
    /// resync interval.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Fatal,
            message: message.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn is_fatal(&self) -> bool {
        self.kind == ErrorKind::Fatal
    }

    pub fn is_retryable(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with what was being done: `"{context}: {message}"`.
    ///
    /// ```no_run
    /// # use wasmpilot_guest::WorkerError;
    /// let err = WorkerError::fatal("bad port").context("deployment web");
    /// assert_eq!(err.message(), "deployment web: bad port");
    /// ```
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self {
            kind: self.kind,
            message: format!("{context}: {}", self.message),
        }
    }
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::Retryable => "retryable",
            ErrorKind::Fatal => "fatal",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for WorkerError {}

/// JSON that does not (de)serialize will not do so on a retry either: fatal.
impl From<serde_json::Error> for WorkerError {
    fn from(err: serde_json::Error) -> Self {
        Self::fatal(format!("JSON error: {err}"))
    }
}

/// YAML that does not parse will not parse on a retry either: fatal.
impl From<serde_yaml::Error> for WorkerError {
    fn from(err: serde_yaml::Error) -> Self {
        Self::fatal(format!("YAML error: {err}"))
    }
}

impl From<crate::wit::wasmpilot::operator::types::WorkerError> for WorkerError {
    fn from(err: crate::wit::wasmpilot::operator::types::WorkerError) -> Self {
        use crate::wit::wasmpilot::operator::types::WorkerError as Wire;
        match err {
            Wire::Retryable(m) => Self::retryable(m),
            Wire::Fatal(m) => Self::fatal(m),
        }
    }
}

impl From<WorkerError> for crate::wit::wasmpilot::operator::types::WorkerError {
    fn from(err: WorkerError) -> Self {
        match err.kind {
            ErrorKind::Retryable => Self::Retryable(err.message),
            ErrorKind::Fatal => Self::Fatal(err.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_kind() {
        assert_eq!(WorkerError::fatal("x").to_string(), "fatal: x");
        assert_eq!(WorkerError::retryable("y").to_string(), "retryable: y");
    }

    #[test]
    fn context_keeps_the_kind() {
        let err = WorkerError::retryable("timeout").context("listing");
        assert!(err.is_retryable());
        assert_eq!(err.message(), "listing: timeout");
    }

    #[test]
    fn serde_errors_are_fatal() {
        let err: WorkerError = serde_json::from_str::<u8>("x").unwrap_err().into();
        assert!(err.is_fatal());
    }
}
