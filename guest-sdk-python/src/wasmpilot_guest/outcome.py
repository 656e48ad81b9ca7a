"""What a worker decided: the next phase, a status patch, objects to apply, when to run again."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Optional

from .errors import WorkerError
from .inputs import json_type

#: The `.status` fields the host writes itself; removed from a worker's status patch so a
#: worker cannot fight the host over them (see `HostStatus`).
HOST_STATUS_FIELDS = ("phase", "observedGeneration", "conditions", "moduleDigest")


class Outcome:
    """What a phase worker decided.

        return (Outcome.next("Ready")
                .status({"syncedDeployments": ["web"]})
                .output(service)
                .requeue_after(timedelta(seconds=60)))
    """

    def __init__(self, next_phase: str):
        self.next_phase = next_phase
        self.status_patch: Optional[dict[str, Any]] = None
        # Each output serialized when it was added: the text is the decision.
        self._output_json: list[str] = []
        self.requeue_after_delay: Optional[timedelta] = None

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The objects to apply, parsed again from what was added: a fresh copy at each read."""
        return [json.loads(text) for text in self._output_json]

    @property
    def output_json(self) -> list[str]:
        """The objects to apply as the JSON the host gets (sorted keys), one string each."""
        return list(self._output_json)

    @property
    def output_count(self) -> int:
        """How many objects were added."""
        return len(self._output_json)

    @classmethod
    def next(cls, phase: str) -> "Outcome":
        """Move to `phase` (which may be the current one) with no status change and no outputs."""
        return cls(phase)

    def status(self, status: Mapping[str, Any]) -> "Outcome":
        """Merge `status` into the resource's `.status` (JSON merge patch: None removes a field).

        The fields the host owns (`phase`, `observedGeneration`, `conditions`, `moduleDigest`)
        are dropped. Raises a fatal `WorkerError` if `status` is not a JSON object. Calling it
        again merges into the earlier patch."""
        self.status_patch = {**(self.status_patch or {}), **status_patch(status)}
        return self

    def output(self, obj: Mapping[str, Any]) -> "Outcome":
        """Add one object for the host to server-side apply, owned by the resource. The host
        must be told about its kind in the phase's `outputs`.

        Raises a fatal `WorkerError` if it is not a JSON object with `apiVersion`, `kind` and
        `metadata.name`."""
        self._output_json.append(output_json(obj, len(self._output_json)))
        return self

    def outputs_from(self, objects: Iterable[Mapping[str, Any]]) -> "Outcome":
        """Add several objects; see `output`."""
        for obj in objects:
            self.output(obj)
        return self

    def requeue_after(self, delay: timedelta) -> "Outcome":
        """Run this resource again after `delay` (instead of the operator's resync interval)."""
        self.requeue_after_delay = delay
        return self

    def __repr__(self) -> str:
        return (
            f"Outcome(next_phase={self.next_phase!r}, status={self.status_patch!r}, "
            f"outputs={len(self._output_json)}, requeue_after={self.requeue_after_delay!r})"
        )


class Finalized:
    """What a finalizer worker decided.

        still_busy = Finalized.pending(timedelta(seconds=10)).status({"cleanup": "waiting"})
        finished = Finalized.done()
    """

    def __init__(self, done: bool, requeue_after: Optional[timedelta]):
        self.is_done = done
        self.status_patch: Optional[dict[str, Any]] = None
        self.requeue_after_delay = requeue_after

    @classmethod
    def done(cls) -> "Finalized":
        """Cleanup is finished: the host removes its finalizer and the deletion proceeds."""
        return cls(True, None)

    @classmethod
    def pending(cls, delay: timedelta) -> "Finalized":
        """Cleanup is not finished: run the finalizer again after `delay`."""
        return cls(False, delay)

    def status(self, status: Mapping[str, Any]) -> "Finalized":
        """Merge `status` into `.status` while the resource is terminating; see `Outcome.status`
        (a second call replaces the first, as in the Rust SDK)."""
        self.status_patch = status_patch(status)
        return self


def status_patch(status: Any) -> dict[str, Any]:
    if not isinstance(status, Mapping):
        raise WorkerError.fatal(
            f"the status must serialize to a JSON object, not {json_type(status)}"
        )
    return {k: v for k, v in status.items() if k not in HOST_STATUS_FIELDS}


def output_json(obj: Any, index: int) -> str:
    """`obj` checked as a Kubernetes object and serialized: the text is the decision, so later
    changes to `obj` do not change it (one serialization, no copy parsed back)."""
    # A dict is checked with C-level tests; any other Mapping through the ABC (slower).
    if not isinstance(obj, dict) and not isinstance(obj, Mapping):
        raise WorkerError.fatal(
            f"output #{index} must be a Kubernetes object, not {json_type(obj)}"
        )
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, (dict, Mapping)) else None
    if not (_text(obj.get("apiVersion")) and _text(obj.get("kind")) and _text(name)):
        raise _missing_identity(obj, index)
    try:
        return to_json(obj)
    except (TypeError, ValueError) as err:
        raise WorkerError.fatal(f"output #{index} does not serialize to JSON: {err}") from err


def _text(value: Any) -> bool:
    """Whether `value` is a non-empty string."""
    return isinstance(value, str) and value != ""


def _missing_identity(obj: Mapping[str, Any], index: int) -> WorkerError:
    """The error for an output without `apiVersion`, `kind` or `metadata.name` (each a
    non-empty string), naming what it has."""

    def text(value: Any, key: str) -> Optional[str]:
        found = value.get(key) if isinstance(value, Mapping) else None
        return found if _text(found) else None

    kind, name = text(obj, "kind"), text(obj.get("metadata"), "name")
    missing = [
        field
        for field, value in (
            ("apiVersion", text(obj, "apiVersion")),
            ("kind", kind),
            ("metadata.name", name),
        )
        if value is None
    ]
    what = " ".join(p for p in (kind, name) if p is not None)
    what = f" ({what})" if what else ""
    return WorkerError.fatal(f"output #{index}{what} has no {', no '.join(missing)}")


#: One encoder for every `to_json` call: `json.dumps` with options builds a new one each time.
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False
)


def to_json(value: Any) -> str:
    """Compact JSON with sorted keys: the bytes the Rust SDK (serde_json) writes for the same value."""
    return _ENCODER.encode(value)


def millis(delay: timedelta) -> int:
    """A delay in whole milliseconds, as the WIT `requeue-after-ms` carries it."""
    return max(0, delay // timedelta(milliseconds=1))
