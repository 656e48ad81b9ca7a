"""Kubernetes label-selector matching (`matchLabels` AND `matchExpressions`), as
`metav1.LabelSelectorAsSelector` does it: validated once, then matched many times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


def is_control(ch: str) -> bool:
    """Whether `ch` is a C0 or C1 control character."""
    return ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F


def debug_quoted(text: str) -> str:
    """`text` quoted as Rust's `{:?}` writes a string (quotes, backslashes and control
    characters escaped), so messages read as the Rust worker's."""
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}
    quoted = "".join(
        escapes.get(ch) or (f"\\u{{{ord(ch):x}}}" if is_control(ch) else ch) for ch in text
    )
    return f'"{quoted}"'


class SelectorError(Exception):
    """Why a LabelSelector cannot be used: an unknown operator, `In`/`NotIn` without values,
    or `Exists`/`DoesNotExist` with values."""

    UNKNOWN_OPERATOR = "unknown-operator"
    VALUES_REQUIRED = "values-required"
    VALUES_FORBIDDEN = "values-forbidden"

    def __init__(self, problem: str, key: str, operator: str):
        super().__init__(problem, key, operator)
        self.problem = problem
        self.key = key
        self.operator = operator

    def __str__(self) -> str:
        key = debug_quoted(self.key)
        if self.problem == self.UNKNOWN_OPERATOR:
            return (
                f"matchExpressions key {key}: unknown operator {debug_quoted(self.operator)} "
                "(expected In, NotIn, Exists or DoesNotExist)"
            )
        if self.problem == self.VALUES_REQUIRED:
            return f"matchExpressions key {key}: operator {self.operator} needs at least one value"
        return f"matchExpressions key {key}: operator {self.operator} takes no values"


@dataclass(frozen=True)
class Requirement:
    key: str
    matches_value: Callable[[Any], bool]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.matches_value(labels.get(self.key))


def requirement(key: str, operator: str, values: list[str]) -> Requirement:
    """One `matchExpressions` entry; raises SelectorError if the operator and values do not fit."""
    if operator in ("In", "NotIn"):
        if not values:
            raise SelectorError(SelectorError.VALUES_REQUIRED, key, operator)
        if operator == "In":
            return Requirement(key, lambda value: value is not None and value in values)
        return Requirement(key, lambda value: value is None or value not in values)
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError(SelectorError.VALUES_FORBIDDEN, key, operator)
        exists = operator == "Exists"
        return Requirement(key, lambda value: (value is not None) == exists)
    raise SelectorError(SelectorError.UNKNOWN_OPERATOR, key, operator)


class Selector:
    """A validated label selector. An empty selector matches everything.

        selector = Selector({"matchLabels": {"app": "web"}})
        assert selector.matches({"app": "web"})
    """

    def __init__(self, label_selector: Mapping[str, Any]):
        """Validates `label_selector` (a LabelSelector as JSON); raises SelectorError."""
        match_labels = label_selector.get("matchLabels") or {}
        self.requirements = [
            requirement(key, "In", [value]) for key, value in sorted(match_labels.items())
        ]
        for expr in label_selector.get("matchExpressions") or []:
            self.requirements.append(
                requirement(expr.get("key") or "", expr.get("operator") or "", expr.get("values") or [])
            )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy every requirement."""
        return all(r.matches(labels) for r in self.requirements)
