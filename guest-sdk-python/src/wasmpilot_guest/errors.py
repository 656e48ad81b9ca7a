"""Why a worker could not decide: retry later (with backoff), or give up on these inputs (run
again on the next change or resync)."""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """Whether the host should retry a failed run."""

    #: Transient: the host retries with exponential backoff.
    RETRYABLE = "retryable"
    #: Permanent for this generation of the resource: reported as a Condition and an Event,
    #: not retried until the resource or an input changes.
    FATAL = "fatal"


class WorkerError(Exception):
    """The error a worker raises instead of returning an `Outcome`.

    >>> raise WorkerError.fatal(f"spec.port {port!r} is not a port")  # doctest: +SKIP
    """

    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @classmethod
    def retryable(cls, message: str) -> "WorkerError":
        """A transient failure: the host runs the worker again with backoff."""
        return cls(ErrorKind.RETRYABLE, message)

    @classmethod
    def fatal(cls, message: str) -> "WorkerError":
        """A permanent failure for these inputs: reported as a Condition and an Event, not
        retried with backoff; the worker runs again when the resource or an input changes, or
        at the resync interval."""
        return cls(ErrorKind.FATAL, message)

    @property
    def is_fatal(self) -> bool:
        return self.kind is ErrorKind.FATAL

    @property
    def is_retryable(self) -> bool:
        return self.kind is ErrorKind.RETRYABLE

    def context(self, context: object) -> "WorkerError":
        """The same kind of error, its message prefixed: `"{context}: {message}"`."""
        return WorkerError(self.kind, f"{context}: {self.message}")

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.message}"

    def __repr__(self) -> str:
        return f"WorkerError.{self.kind.name.lower()}({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WorkerError)
            and self.kind is other.kind
            and self.message == other.message
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.message))
