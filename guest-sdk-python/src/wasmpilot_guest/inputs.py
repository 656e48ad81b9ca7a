"""The objects a phase declared as inputs, read by name and parsed on demand."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, List, Optional, Protocol, Sequence, TypeVar

from .errors import WorkerError

T = TypeVar("T")


T_co = TypeVar("T_co", covariant=True)


class FromJson(Protocol[T_co]):
    """A type an object can be parsed into: `from_json` raises ValueError, TypeError or
    KeyError (with a message saying what is wrong) when the JSON does not fit."""

    def from_json(self, value: Any, /) -> T_co: ...


def parse_as(kind: Optional[FromJson[T]], json_text: str) -> T:
    """Parses `json_text`, then into `kind` when given. Raises ValueError/TypeError/KeyError."""
    value = json.loads(json_text)
    return kind.from_json(value) if kind is not None else value


def type_name(kind: Optional[FromJson[Any]]) -> str:
    """`Deployment` for a `from_json` type named so; `JSON value` without one."""
    return str(getattr(kind, "__name__", "JSON value")) if kind is not None else "JSON value"


def error_text(err: Exception) -> str:
    """An exception's message, without the quotes `KeyError` puts around it."""
    if isinstance(err, KeyError) and len(err.args) == 1:
        return str(err.args[0])
    return str(err)


class Inputs:
    """The phase's declared inputs, each a list of whole Kubernetes objects as JSON.

    Objects are parsed only when asked for: into dicts, or into a type with a
    `from_json(value)` classmethod.

        deployments = inputs.list("deployments")
    """

    def __init__(self, inputs: Sequence[tuple[str, Sequence[str]]]):
        self._inputs = [(name, list(objects)) for name, objects in inputs]

    def names(self) -> list[str]:
        """The declared input names, in declaration order."""
        return [name for name, _ in self._inputs]

    def get_raw(self, name: str) -> Optional[list[str]]:
        """The objects of input `name` as JSON strings, or None if the phase declares no such input."""
        return next((objects for n, objects in self._inputs if n == name), None)

    def raw(self, name: str) -> list[str]:
        """The objects of input `name` as JSON strings.

        Raises a fatal `WorkerError` naming the declared inputs if the phase declares no input `name`.
        """
        objects = self.get_raw(name)
        if objects is None:
            raise self._unknown(name)
        return objects

    def list(self, name: str, kind: Optional[FromJson[T]] = None) -> list[Any]:
        """Parses every object of input `name` (into `kind` if given, else into dicts).

        Raises a fatal `WorkerError` if the phase declares no input `name` (the message lists
        the declared ones), or if an object does not parse (the message names the input, the
        object and the problem).
        """
        parsed = []
        for index, json_text in enumerate(self.raw(name)):
            try:
                parsed.append(parse_as(kind, json_text))
            except (ValueError, TypeError, KeyError) as err:
                raise WorkerError.fatal(
                    f"input `{name}`: object {describe_object(index, json_text)} "
                    f"is not a valid {type_name(kind)}: {error_text(err)}"
                ) from err
        return parsed

    def samples(self, name: str) -> List["Sample"]:
        """The samples of a metric query the phase declared (`queries` in the WasmOperator):
        the host ran the PromQL against Prometheus and hands the result over as data.

        Raises as `list`."""
        return self.list(name, Sample)

    def _unknown(self, name: str) -> WorkerError:
        known = ", ".join(f"`{n}`" for n in self.names()) or "none"
        return WorkerError.fatal(
            f"unknown input `{name}`: this worker declares {known} "
            "(see its `inputs` in the WasmOperator: the phase's, or spec.finalizer.inputs "
            "for the finalizer)"
        )

    def __repr__(self) -> str:
        return f"Inputs({', '.join(f'{n}: {len(o)}' for n, o in self._inputs)})"


@dataclass
class Sample:
    """One sample of a metric query result: an instant-vector element, or a scalar (no labels)."""

    #: Evaluation time, seconds since the Unix epoch.
    timestamp: float
    #: The value; None when Prometheus answered NaN or ±Inf.
    value: Optional[float]
    #: The series' labels (empty for a scalar).
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any) -> "Sample":
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, not {json_type(value)}")
        if "timestamp" not in value:
            raise KeyError("missing field `timestamp`")
        if "value" not in value:
            raise KeyError("missing field `value`")
        number = value["value"]
        if number is not None and not (isinstance(number, (int, float)) and math.isfinite(number)):
            raise TypeError(f"`value` must be a number or null, not {json_type(number)}")
        return cls(
            timestamp=float(value["timestamp"]),
            value=None if number is None else float(number),
            labels=dict(value.get("labels") or {}),
        )


def describe_object(index: int, json_text: str) -> str:
    """`#3 (apps/v1 Deployment default/web)` when the JSON has the fields, else `#3`."""
    try:
        ident = identity(json.loads(json_text))
    except ValueError:
        return f"#{index} (not JSON)"
    return f"#{index} ({ident})" if ident else f"#{index}"


def identity(value: Any) -> Optional[str]:
    """`apps/v1 Deployment default/web`, from whichever of those fields the JSON has."""
    if not isinstance(value, dict):
        return None

    def text(obj: Any, key: str) -> Optional[str]:
        found = obj.get(key) if isinstance(obj, dict) else None
        return found if isinstance(found, str) else None

    metadata = value.get("metadata")
    parts = [p for p in (text(value, "apiVersion"), text(value, "kind")) if p is not None]
    namespace, name = text(metadata, "namespace"), text(metadata, "name")
    if name is not None:
        parts.append(f"{namespace}/{name}" if namespace is not None else name)
    return " ".join(parts) or None


def json_type(value: Any) -> str:
    """`a string`, `an object`, …: how error messages name a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
