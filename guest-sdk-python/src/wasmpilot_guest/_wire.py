"""The WIT records a worker exchanges with the host, and the host's `log` import.

Inside a component these are the bindings componentize-py generates from
`wit/operator.wit` (the `wit_world` package). Natively (tests, no `wit_world`) they are
plain dataclasses with the same names and fields, and `host_log` is None: the
`Context` then keeps log records for the test instead of sending them to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Union

try:
    from componentize_py_types import Err
    from wit_world.imports import log as _log
    from wit_world.imports.types import (
        FinalizeRequest,
        FinalizeResult,
        NamedObjects,
        SyncRequest,
        SyncResult,
        WorkerError_Fatal,
        WorkerError_Retryable,
    )

    IN_COMPONENT = True

    # Imported by the finalizer world only. Imported here, not when a finalizer runs:
    # componentize-py keeps only the modules imported while it initializes the component.
    try:
        from wit_world.imports import finalizer_inputs as _finalizer_inputs
    except ImportError:
        _finalizer_inputs = None

    def _host_finalizer_inputs() -> list[NamedObjects]:
        """The finalizer's declared inputs (`wasmpilot:operator/finalizer-inputs.inputs`)."""
        return list(_finalizer_inputs.inputs())

    host_finalizer_inputs: Optional[Callable[[], List[NamedObjects]]] = (
        _host_finalizer_inputs if _finalizer_inputs is not None else None
    )

    def host_log(level: int, message: str, fields: list[tuple[str, str]]) -> None:
        """Sends one log record to the host (`wasmpilot:operator/log.log`)."""
        _log.log(
            _log.Level(level),
            message,
            [_log.Field(key=key, value=value) for key, value in fields],
        )

except ImportError:
    IN_COMPONENT = False
    host_log: Optional[Callable[[int, str, list[tuple[str, str]]], None]] = None  # type: ignore[no-redef]
    host_finalizer_inputs: Optional[Callable[[], List[NamedObjects]]] = None  # type: ignore[no-redef]

    @dataclass
    class NamedObjects:  # type: ignore[no-redef]
        name: str
        objects: List[str]

    @dataclass
    class SyncRequest:  # type: ignore[no-redef]
        operator: str
        phase: str
        resource: str
        inputs: List[NamedObjects]
        now: str

    @dataclass
    class SyncResult:  # type: ignore[no-redef]
        next_phase: str
        status_info: Optional[str]
        outputs: List[str]
        requeue_after_ms: Optional[int]

    @dataclass
    class FinalizeRequest:  # type: ignore[no-redef]
        operator: str
        resource: str
        now: str

    @dataclass
    class FinalizeResult:  # type: ignore[no-redef]
        done: bool
        status_info: Optional[str]
        requeue_after_ms: Optional[int]

    @dataclass
    class WorkerError_Retryable:  # type: ignore[no-redef]  # noqa: N801 (the generated name)
        value: str

    @dataclass
    class WorkerError_Fatal:  # type: ignore[no-redef]  # noqa: N801
        value: str

    class Err(Exception):  # type: ignore[no-redef]
        """The failure case of a WIT `result`, raised by an export."""

        def __init__(self, value: Union[WorkerError_Retryable, WorkerError_Fatal]):
            super().__init__(value)
            self.value = value


__all__ = [
    "IN_COMPONENT",
    "Err",
    "FinalizeRequest",
    "FinalizeResult",
    "NamedObjects",
    "SyncRequest",
    "SyncResult",
    "WorkerError_Fatal",
    "WorkerError_Retryable",
    "host_log",
]
