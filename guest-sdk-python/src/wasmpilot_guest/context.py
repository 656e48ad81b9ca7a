"""What a worker knows about its run besides the resource: names, the host's clock, logging."""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

from . import _wire


class LogLevel(enum.IntEnum):
    """A log level, as in the host's `tracing` output (the WIT `log.level` enum, in order)."""

    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


@dataclass
class LogRecord:
    """One log line a worker wrote. In a component it goes straight to the host; natively
    (tests) it is kept and returned by `wasmpilot_guest.testing`."""

    level: LogLevel
    message: str
    #: Key/value pairs, values already formatted (see `format_value`).
    fields: list[tuple[str, str]] = field(default_factory=list)

    def field(self, key: str) -> Optional[str]:
        """The value of the field `key`, if the record has one."""
        return next((v for k, v in self.fields if k == key), None)

    def __str__(self) -> str:
        text = f"{self.level.name.capitalize()} {self.message}"
        return text + "".join(f" {k}={v}" for k, v in self.fields)


def format_value(value: object) -> str:
    """A log field value as text: as `str`, except booleans as `true`/`false` (as the Rust SDK
    writes them, so the host's log reads the same whichever language a worker is in)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Context:
    """The run a worker is deciding: which operator and phase, the host's clock, and a logger.

        ctx.info("creating service", deployment="web", port=8080)
        started = ctx.now  # an aware datetime (UTC)
    """

    def __init__(self, operator: str, phase: str, now: datetime):
        self.operator = operator
        """The name of the WasmOperator this worker belongs to."""
        self.phase = phase
        """The phase being run: the resource's current `.status.phase`, or the initial phase.
        For a finalizer worker: `"finalizer"`."""
        self.now = now
        """The host's clock when it started this run. Workers have no other clock."""
        self._logs: list[LogRecord] = []

    def log(self, level: LogLevel, message: str, /, **fields: object) -> None:
        """Writes a log line with key/value fields, in the order given. `level` and `message` are
        positional-only, so any name can be a field: `ctx.log(LogLevel.INFO, "x", message="y")`."""
        level = level if type(level) is LogLevel else LogLevel(level)
        pairs = [
            (key, value if type(value) is str else format_value(value))
            for key, value in fields.items()
        ]
        if _wire.host_log is not None:
            _wire.host_log(int(level), message, pairs)
        else:
            # Natively the host's `log` import does not exist: keep the record for the test
            # and print it (pytest shows it when the test fails).
            record = LogRecord(level, message, pairs)
            print(f"[{self.operator} {self.phase}] {record}", file=sys.stderr)
            self._logs.append(record)

    def trace(self, message: str, /, **fields: object) -> None:
        self.log(LogLevel.TRACE, message, **fields)

    def debug(self, message: str, /, **fields: object) -> None:
        self.log(LogLevel.DEBUG, message, **fields)

    def info(self, message: str, /, **fields: object) -> None:
        """Writes an info line: `ctx.info("synced", services=3)`."""
        self.log(LogLevel.INFO, message, **fields)

    def warn(self, message: str, /, **fields: object) -> None:
        self.log(LogLevel.WARN, message, **fields)

    def error(self, message: str, /, **fields: object) -> None:
        self.log(LogLevel.ERROR, message, **fields)

    def take_logs(self) -> list[LogRecord]:
        """The records written so far, removed from the context (always empty in a component)."""
        logs, self._logs = self._logs, []
        return logs

    def __repr__(self) -> str:
        return f"Context(operator={self.operator!r}, phase={self.phase!r}, now={self.now.isoformat()!r})"
