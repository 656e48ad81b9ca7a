"""Run workers natively under pytest, through the same code as the component export.

A `SyncTest` builds the request the host would send (the resource and each input
serialized to JSON strings, a fixed clock), hands it to the function the component's
`phase-worker.sync` export calls, and parses the JSON that comes back into a `SyncReport`
to assert on. Log lines are kept instead of going to the host.

    report = (SyncTest(route).phase("Syncing")
              .input("deployments", objects_from_yaml(path.read_text()))
              .run(Syncing()))
    assert report.next_phase == "Ready"

For an input the host selects by a selector the resource holds (`selectorFrom`),
`input_selected` keeps only the objects the host would hand over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterable, Optional

from . import _wire
from .context import LogRecord
from .errors import WorkerError
from .export import FinalizerWorker, PhaseWorker, run_finalize, run_sync
from .outcome import to_json
from .selector import LabelSelector, SelectorError

#: The clock a test request carries unless `SyncTest.now` sets another.
DEFAULT_NOW = "2025-01-01T00:00:00Z"

#: The operator name a test request carries unless `SyncTest.operator` sets another.
DEFAULT_OPERATOR = "test-operator"


class FailedRun(Exception):
    """A run that ended in a `WorkerError`, with the log lines written before it."""

    def __init__(self, error: WorkerError, logs: list[LogRecord]):
        super().__init__(error)
        self.error = error
        self.logs = logs

    def __str__(self) -> str:
        return str(self.error) + "".join(f"\n  log: {record}" for record in self.logs)


@dataclass
class SyncReport:
    """What a phase worker returned, parsed back from the JSON the host would receive."""

    next_phase: str
    #: The status patch (host-owned fields already dropped), if any.
    status: Optional[dict[str, Any]]
    #: The objects the host would apply, in the order the worker returned them.
    outputs: list[dict[str, Any]]
    requeue_after: Optional[timedelta]
    logs: list[LogRecord] = field(default_factory=list)

    def outputs_of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The outputs whose `kind` is `kind`."""
        return [o for o in self.outputs if o.get("kind") == kind]

    def output(self, kind: str, name: str) -> Optional[dict[str, Any]]:
        """The output of `kind` named `name`."""
        return next(
            (o for o in self.outputs_of_kind(kind) if o.get("metadata", {}).get("name") == name),
            None,
        )

    def logged(self, text: str) -> bool:
        """Whether a log line's message contains `text`."""
        return any(text in record.message for record in self.logs)


@dataclass
class FinalizeReport:
    """What a finalizer worker returned."""

    done: bool
    status: Optional[dict[str, Any]]
    requeue_after: Optional[timedelta]
    logs: list[LogRecord] = field(default_factory=list)


class SyncTest:
    """A phase worker run to set up: resource, inputs, phase, clock. The phase defaults to the
    resource's `.status.phase`, or `""` if it has none."""

    def __init__(self, resource: Any):
        status = resource.get("status") if isinstance(resource, dict) else None
        phase = status.get("phase") if isinstance(status, dict) else None
        self._operator = DEFAULT_OPERATOR
        self._phase = phase if isinstance(phase, str) else ""
        self._resource = to_json(resource)
        self._inputs: list[tuple[str, list[str]]] = []
        self._now = DEFAULT_NOW

    def operator(self, name: str) -> "SyncTest":
        self._operator = name
        return self

    def phase(self, name: str) -> "SyncTest":
        """The phase being run, as the host would pass it."""
        self._phase = name
        return self

    def now(self, rfc3339: str) -> "SyncTest":
        """The host's clock, RFC 3339. Not validated here: a bad value reaches the worker's
        export as it would from a broken host."""
        self._now = rfc3339
        return self

    def input(self, name: str, objects: Iterable[Any]) -> "SyncTest":
        """Adds objects (dicts, e.g. from `objects_from_yaml`) to input `name`, declaring it if new."""
        self._slot(name).extend(to_json(o) for o in objects)
        return self

    def input_selected(self, name: str, selector_field: str, objects: Iterable[Any]) -> "SyncTest":
        """Adds to input `name` the objects the host would hand over for an input declared with
        `selectorFrom: <selector_field>` (e.g. `spec.deploymentSelector`); see `selected_by`.
        The other objects are left out, as the host leaves them out."""
        return self.input(name, selected_by(json.loads(self._resource), selector_field, objects))

    def empty_input(self, name: str) -> "SyncTest":
        """Declares input `name` with no objects (as when nothing matches in the cluster)."""
        self._slot(name)
        return self

    def input_json(self, name: str, objects: Iterable[str]) -> "SyncTest":
        """Adds objects to input `name` as raw JSON strings, passed on unchecked (to test how a
        worker handles objects that do not parse)."""
        self._slot(name).extend(objects)
        return self

    def _slot(self, name: str) -> list[str]:
        for existing, objects in self._inputs:
            if existing == name:
                return objects
        self._inputs.append((name, []))
        return self._inputs[-1][1]

    def request(self) -> _wire.SyncRequest:
        """The request the host would send."""
        return _wire.SyncRequest(
            operator=self._operator,
            phase=self._phase,
            resource=self._resource,
            inputs=[_wire.NamedObjects(name=n, objects=list(o)) for n, o in self._inputs],
            now=self._now,
        )

    def run(self, worker: PhaseWorker) -> SyncReport:
        """Runs `worker` through the component export's code path. Raises `FailedRun` with the
        worker's `WorkerError` and the log lines written before it."""
        result, logs = run_sync(worker, self.request())
        if isinstance(result, WorkerError):
            raise FailedRun(result, logs)
        return SyncReport(
            next_phase=result.next_phase,
            status=parse_back(result.status_info),
            outputs=[json.loads(o) for o in result.outputs],
            requeue_after=optional_delay(result.requeue_after_ms),
            logs=logs,
        )

    def fail(self, worker: PhaseWorker) -> FailedRun:
        """Runs `worker` expecting a `WorkerError`; the failed run. Raises AssertionError if it decided."""
        try:
            report = self.run(worker)
        except FailedRun as failed:
            return failed
        raise AssertionError(f"expected a WorkerError, the worker decided {report}")


class FinalizeTest:
    """A finalizer worker run to set up; see `SyncTest`."""

    def __init__(self, resource: Any):
        self._operator = DEFAULT_OPERATOR
        self._resource = to_json(resource)
        self._now = DEFAULT_NOW
        self._inputs: list[tuple[str, list[str]]] = []

    def input(self, name: str, objects: Iterable[Any]) -> "FinalizeTest":
        """Adds objects to the finalizer's input `name` (`spec.finalizer.inputs`), declaring it
        if new; see `SyncTest.input`."""
        self._slot(name).extend(to_json(o) for o in objects)
        return self

    def input_selected(
        self, name: str, selector_field: str, objects: Iterable[Any]
    ) -> "FinalizeTest":
        """As `SyncTest.input_selected`, for the finalizer's input `name`."""
        return self.input(name, selected_by(json.loads(self._resource), selector_field, objects))

    def empty_input(self, name: str) -> "FinalizeTest":
        """Declares the finalizer's input `name` with no objects."""
        self._slot(name)
        return self

    def _slot(self, name: str) -> list[str]:
        for existing, objects in self._inputs:
            if existing == name:
                return objects
        self._inputs.append((name, []))
        return self._inputs[-1][1]

    def operator(self, name: str) -> "FinalizeTest":
        self._operator = name
        return self

    def now(self, rfc3339: str) -> "FinalizeTest":
        self._now = rfc3339
        return self

    def run(self, worker: FinalizerWorker) -> FinalizeReport:
        """Runs `worker` through the component export's code path; raises `FailedRun` on an error."""
        request = _wire.FinalizeRequest(
            operator=self._operator, resource=self._resource, now=self._now
        )
        inputs = [_wire.NamedObjects(name=n, objects=list(o)) for n, o in self._inputs]
        result, logs = run_finalize(worker, request, inputs)
        if isinstance(result, WorkerError):
            raise FailedRun(result, logs)
        return FinalizeReport(
            done=result.done,
            status=parse_back(result.status_info),
            requeue_after=optional_delay(result.requeue_after_ms),
            logs=logs,
        )


def selected_by(resource: Any, selector_field: str, objects: Iterable[Any]) -> list[Any]:
    """The `objects` the host hands a worker for an input declared with
    `selectorFrom: <selector_field>`: those in the resource's namespace whose labels match the
    label selector at that field of the resource, in the order given.

    Raises SelectorError where the host would report `InvalidSelector` instead of running the
    worker: no selector at `selector_field`, or an invalid one."""
    selector_json = field_at(resource, selector_field)
    if selector_json is None:
        raise SelectorError(selector_field, "is not set")
    selector = LabelSelector.from_json(selector_json, selector_field)
    namespace = field_at(resource, "metadata.namespace")

    def in_namespace(obj: Any) -> bool:
        found = field_at(obj, "metadata.namespace")
        return namespace is None or found is None or found == namespace

    return [o for o in objects if in_namespace(o) and selector.matches(field_at(o, "metadata.labels"))]


def field_at(value: Any, path: str) -> Any:
    """The value at a dotted field path (`spec.deploymentSelector`), None where there is none."""
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def objects_from_yaml(yaml_text: str) -> list[Any]:
    """Parses a multi-document YAML string (`---` separated, e.g. a fixture file) into objects.
    Empty documents are skipped and the items of a `kind: List` are returned one by one.

    Raises a fatal `WorkerError` naming the document that does not parse. Needs PyYAML
    (the `testing` extra)."""
    import yaml  # Only tests need it; a component never imports this module.

    objects: list[Any] = []
    documents = yaml.safe_load_all(yaml_text)
    index = 0
    while True:
        try:
            document = next(documents)
        except StopIteration:
            return objects
        except yaml.YAMLError as err:
            raise WorkerError.fatal(f"YAML document #{index}: {err}") from err
        index += 1
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") == "List":
            objects.extend(document.get("items") or [])
        else:
            objects.append(document)


def parse_back(json_text: Optional[str]) -> Optional[dict[str, Any]]:
    """The SDK wrote this JSON itself; not parsing back is a bug in the SDK."""
    return None if json_text is None else json.loads(json_text)


def optional_delay(ms: Optional[int]) -> Optional[timedelta]:
    return None if ms is None else timedelta(milliseconds=ms)
