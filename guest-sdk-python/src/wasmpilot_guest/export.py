"""The worker base classes, the one function each export runs, and the component exports.

`run_sync` and `run_finalize` take and return the WIT records (JSON strings inside), so the
component export and `wasmpilot_guest.testing` run the same code.
"""

from __future__ import annotations

import abc
import inspect
import json
from datetime import datetime, timezone
from typing import Any, Callable, Optional, Sequence, Union

from . import _wire
from .context import Context, LogRecord
from .errors import ErrorKind, WorkerError
from .inputs import FromJson, Inputs, error_text, identity, parse_as, type_name
from .outcome import Finalized, Outcome, millis, to_json

#: The phase name a finalizer worker's `Context.phase` reports.
FINALIZER_PHASE = "finalizer"


class PhaseWorker(abc.ABC):
    """Decides one phase of a resource. Export it from the component's `app.py` with
    `PhaseWorker = export_phase(MyWorker)`; the class must construct without arguments.

        class Initializing(wasmpilot_guest.PhaseWorker):
            def sync(self, ctx, resource, inputs):
                ctx.info("starting")
                return Outcome.next("Syncing")

        PhaseWorker = wasmpilot_guest.export_phase(Initializing)
    """

    #: What the resource is parsed into: a type with a `from_json(value)` classmethod (its
    #: errors become a fatal "the resource (…) is not a valid <type>: …"), or None for a dict.
    resource_type: Optional[FromJson[Any]] = None

    @abc.abstractmethod
    def sync(self, ctx: Context, resource: Any, inputs: Inputs) -> Outcome:
        """Decides the phase: the next phase, a status patch, outputs, when to run again.

        Raise `WorkerError.retryable(...)` to be retried with backoff, `WorkerError.fatal(...)`
        to stop until the resource or an input changes."""


class FinalizerWorker(abc.ABC):
    """Cleans up when a resource carrying the operator's finalizer is deleted. Export it with
    `FinalizerWorker = export_finalizer(MyFinalizer)` (componentize-py world `finalizer`)."""

    #: As `PhaseWorker.resource_type`.
    resource_type: Optional[FromJson[Any]] = None

    @abc.abstractmethod
    def finalize(self, ctx: Context, resource: Any, inputs: Inputs) -> Finalized:
        """Cleans up; `Finalized.done()` lets the deletion proceed. `inputs`: the finalizer's
        declared inputs (`spec.finalizer.inputs`), selected as for a phase. Errors as for
        `PhaseWorker.sync`. (A `finalize(self, ctx, resource)` written before finalizers had
        inputs is still called that way.)"""


def run_sync(
    worker: PhaseWorker, request: _wire.SyncRequest
) -> tuple[Union[_wire.SyncResult, WorkerError], list[LogRecord]]:
    """Runs a phase worker on a request: parse, decide, serialize. Also returns the log
    records kept natively (none in a component, where they went to the host)."""
    try:
        now = parse_now(request.now)
    except WorkerError as err:
        return err, []
    ctx = Context(request.operator, request.phase, now)
    try:
        resource = parse_resource(worker.resource_type, request.resource)
        inputs = Inputs([(i.name, i.objects) for i in request.inputs])
        outcome = worker.sync(ctx, resource, inputs)
        result: Union[_wire.SyncResult, WorkerError] = _wire.SyncResult(
            next_phase=outcome.next_phase,
            status_info=status_json(outcome.status_patch),
            outputs=outcome.output_json,
            requeue_after_ms=optional_millis(outcome.requeue_after_delay),
        )
    except WorkerError as err:
        result = err
    return result, ctx.take_logs()


def run_finalize(
    worker: FinalizerWorker,
    request: _wire.FinalizeRequest,
    inputs: Sequence[_wire.NamedObjects] = (),
) -> tuple[Union[_wire.FinalizeResult, WorkerError], list[LogRecord]]:
    """Runs a finalizer worker on a request and the finalizer's inputs; see `run_sync`."""
    try:
        now = parse_now(request.now)
    except WorkerError as err:
        return err, []
    ctx = Context(request.operator, FINALIZER_PHASE, now)
    try:
        resource = parse_resource(worker.resource_type, request.resource)
        handed = Inputs([(i.name, i.objects) for i in inputs])
        if takes_inputs(worker.finalize):
            finalized = worker.finalize(ctx, resource, handed)
        else:
            finalized = worker.finalize(ctx, resource)  # type: ignore[call-arg]
        result: Union[_wire.FinalizeResult, WorkerError] = _wire.FinalizeResult(
            done=finalized.is_done,
            status_info=status_json(finalized.status_patch),
            requeue_after_ms=optional_millis(finalized.requeue_after_delay),
        )
    except WorkerError as err:
        result = err
    return result, ctx.take_logs()


def export_phase(worker_type: type[PhaseWorker]) -> type:
    """The class componentize-py calls for the `phase-worker` export (world `phase`): bind it
    as `PhaseWorker` in the app module. Each call runs a new `worker_type()`."""
    base: type = object
    if _wire.IN_COMPONENT:
        from wit_world import exports

        base = exports.PhaseWorker

    class ExportedPhaseWorker(base):  # type: ignore[misc]
        def sync(self, request: _wire.SyncRequest) -> _wire.SyncResult:
            result, _ = run_sync(worker_type(), request)
            if isinstance(result, WorkerError):
                raise _wire.Err(wire_error(result))
            return result

    ExportedPhaseWorker.__qualname__ = ExportedPhaseWorker.__name__ = "PhaseWorker"
    return ExportedPhaseWorker


def export_finalizer(worker_type: type[FinalizerWorker]) -> type:
    """The class componentize-py calls for the `finalizer-worker` export (world `finalizer`):
    bind it as `FinalizerWorker` in the app module."""
    base: type = object
    if _wire.IN_COMPONENT:
        from wit_world import exports

        base = exports.FinalizerWorker

    class ExportedFinalizerWorker(base):  # type: ignore[misc]
        def finalize(self, request: _wire.FinalizeRequest) -> _wire.FinalizeResult:
            inputs = _wire.host_finalizer_inputs() if _wire.host_finalizer_inputs else []
            result, _ = run_finalize(worker_type(), request, inputs)
            if isinstance(result, WorkerError):
                raise _wire.Err(wire_error(result))
            return result

    ExportedFinalizerWorker.__qualname__ = ExportedFinalizerWorker.__name__ = "FinalizerWorker"
    return ExportedFinalizerWorker


def takes_inputs(finalize: Callable[..., Any]) -> bool:
    """Whether a bound `finalize` takes the inputs (three parameters) or was written before
    finalizers had inputs (`finalize(self, ctx, resource)`)."""
    try:
        parameters = inspect.signature(finalize).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [
        p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return variadic or len(positional) >= 3


def wire_error(err: WorkerError) -> Union[_wire.WorkerError_Retryable, _wire.WorkerError_Fatal]:
    if err.kind is ErrorKind.RETRYABLE:
        return _wire.WorkerError_Retryable(err.message)
    return _wire.WorkerError_Fatal(err.message)


def parse_now(now: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(now)
    except ValueError as err:
        raise WorkerError.fatal(
            f"the host's clock `{now}` is not an RFC 3339 timestamp: {err}"
        ) from err
    if parsed.tzinfo is None:
        raise WorkerError.fatal(
            f"the host's clock `{now}` is not an RFC 3339 timestamp: it has no UTC offset"
        )
    return parsed.astimezone(timezone.utc)


def parse_resource(kind: Optional[FromJson[Any]], resource_json: str) -> Any:
    try:
        return parse_as(kind, resource_json)
    except (ValueError, TypeError, KeyError) as err:
        try:
            ident = identity(json.loads(resource_json))
        except ValueError:
            ident = None
        what = f" ({ident})" if ident else ""
        raise WorkerError.fatal(
            f"the resource{what} is not a valid {type_name(kind)}: {error_text(err)}"
        ) from err


def status_json(status: Optional[dict[str, Any]]) -> Optional[str]:
    if not status:
        return None
    try:
        return to_json(status)
    except (TypeError, ValueError) as err:
        raise WorkerError.fatal(f"the status does not serialize to JSON: {err}") from err


def optional_millis(delay: Any) -> Optional[int]:
    return None if delay is None else millis(delay)
