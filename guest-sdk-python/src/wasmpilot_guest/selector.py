"""Kubernetes label selectors (`matchLabels` AND `matchExpressions`) for workers that match
objects themselves. Checked and matched as the host does for an input's selector
(selection/src/label_selector.rs), and an invalid one is reported in the host's words, naming the field.

    selector = LabelSelector.from_json(route["spec"]["deploymentSelector"], "spec.deploymentSelector")
    web = [d for d in deployments if selector.matches(d["metadata"].get("labels"))]

An input that declares `selectorFrom` (or `matchLabels` / `matchExpressions`) in the
WasmOperator is already selected by the host; a worker needs this only to select by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

#: The `matchExpressions` operators Kubernetes knows.
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(ValueError):
    """A selector Kubernetes would not accept: `"{field}: {problem}"`, e.g.
    `spec.deploymentSelector.matchExpressions[0].operator: "Equals" is not In, NotIn, Exists or
    DoesNotExist`. A ValueError, so a `from_json` that parses a selector may let it through."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        #: Where the problem is, e.g. `spec.deploymentSelector.matchExpressions[0].values`.
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Requirement:
    """One requirement on a label: `matchLabels` entries are `In` with one value."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


class LabelSelector:
    """A checked label selector: every requirement must hold. The empty selector matches
    everything.

        LabelSelector.from_json({"matchLabels": {"app": "web"}}).matches({"app": "web"})  # True
    """

    def __init__(self, requirements: tuple[Requirement, ...] = ()):
        """The selector of `requirements` (already checked); `from_json` builds them from JSON."""
        self.requirements = requirements

    @classmethod
    def from_json(cls, value: Any, field: str = "selector") -> "LabelSelector":
        """Parses a LabelSelector as JSON (`{matchLabels, matchExpressions}`, either absent or
        null) found at `field` (e.g. `"spec.deploymentSelector"`), which errors name.

        Raises SelectorError, as the host: a value that is not an object; `matchLabels` that
        is not an object of strings; `matchExpressions` that is not an array of objects with
        string `key`, `operator` and `values`; an empty key; a key or value Kubernetes does not
        accept as a label's; an unknown operator; `In` or `NotIn` without values; `Exists` or
        `DoesNotExist` with values."""
        if not isinstance(value, dict):
            raise SelectorError(
                field, "is not a label selector (an object with matchLabels and/or matchExpressions)"
            )
        match_labels = parse_match_labels(value.get("matchLabels"), f"{field}.matchLabels")
        expressions = parse_match_expressions(value.get("matchExpressions"), f"{field}.matchExpressions")
        requirements = []
        for key, text in sorted(match_labels.items()):
            why = label_key_problem(key)
            if why:
                raise SelectorError(f"{field}.matchLabels", f"{debug_quoted(key)} is not a valid label key: {why}")
            why = label_value_problem(text)
            if why:
                raise SelectorError(
                    f"{field}.matchLabels",
                    f"{debug_quoted(text)} (key {debug_quoted(key)}) is not a valid label value: {why}",
                )
            requirements.append(Requirement(key, "In", (text,)))
        for index, (key, operator, values) in enumerate(expressions):
            requirements.append(checked(key, operator, values, f"{field}.matchExpressions[{index}]"))
        return cls(tuple(requirements))

    def matches(self, labels: Optional[Mapping[str, str]]) -> bool:
        """Whether an object with `labels` (None: it has none) is selected."""
        found = labels or {}
        return all(r.holds(found) for r in self.requirements)

    def __repr__(self) -> str:
        return f"LabelSelector({list(self.requirements)!r})"


def checked(key: str, operator: str, values: list[str], at: str) -> Requirement:
    """A `matchExpressions` entry at `at`, if Kubernetes accepts it; else SelectorError."""
    if not key:
        raise SelectorError(f"{at}.key", "must not be empty")
    why = label_key_problem(key)
    if why:
        raise SelectorError(f"{at}.key", f"{debug_quoted(key)} is not a valid label key: {why}")
    for index, text in enumerate(values):
        why = label_value_problem(text)
        if why:
            raise SelectorError(f"{at}.values[{index}]", f"{debug_quoted(text)} is not a valid label value: {why}")
    if operator in ("In", "NotIn") and not values:
        raise SelectorError(f"{at}.values", f"must not be empty for operator {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"{at}.values", f"must be empty for operator {operator}")
    if operator not in OPERATORS:
        raise SelectorError(f"{at}.operator", f"{debug_quoted(operator)} is not In, NotIn, Exists or DoesNotExist")
    return Requirement(key, operator, tuple(values))


NAME_CHARACTERS = "consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character"


def label_key_problem(key: str) -> Optional[str]:
    """Why `key` cannot be a label key (Kubernetes' qualified name: an optional DNS subdomain
    prefix and `/`, then a name), if it cannot; the host's words."""
    parts = key.split("/")
    if len(parts) > 2:
        return "at most one '/', between a DNS subdomain prefix and the name (e.g. example.com/name)"
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "the prefix before '/' must not be empty"
        if not is_dns_subdomain(prefix):
            return "the prefix before '/' must be a lowercase DNS subdomain (e.g. example.com)"
        if len(prefix) > 253:
            return "the prefix before '/' must be no more than 253 characters"
    else:
        name = key
    if not name:
        return "the name must not be empty"
    problem = name_problem(name)
    if problem == "characters":
        return f"the name must {NAME_CHARACTERS}"
    if problem == "length":
        return "the name must be no more than 63 characters"
    return None


def label_value_problem(value: str) -> Optional[str]:
    """Why `value` cannot be a label value (empty, or a name of at most 63 characters), if it
    cannot; the host's words."""
    problem = name_problem(value) if value else None
    if problem == "characters":
        return f"it must be empty or {NAME_CHARACTERS}"
    if problem == "length":
        return "it must be no more than 63 characters"
    return None


def is_alphanumeric(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def name_problem(text: str) -> Optional[str]:
    """`"characters"` unless `text` is `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, then
    `"length"` if longer than 63 (characters first, so the length is of ASCII text)."""
    if not (
        all(is_alphanumeric(ch) or ch in "-_." for ch in text)
        and is_alphanumeric(text[0])
        and is_alphanumeric(text[-1])
    ):
        return "characters"
    return "length" if len(text) > 63 else None


def is_dns_subdomain(text: str) -> bool:
    """A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`."""
    return all(
        label
        and all((ch.isascii() and (ch.islower() or ch.isdigit())) or ch == "-" for ch in label)
        and label[0] != "-"
        and label[-1] != "-"
        for label in text.split(".")
    )


def parse_match_labels(value: Any, field: str) -> dict[str, str]:
    """`matchLabels` (absent or null: none). Checked in key order, as the host's serde does."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SelectorError(field, invalid_type(value, "a map"))
    for key in sorted(value):
        if not isinstance(value[key], str):
            raise SelectorError(field, invalid_type(value[key], "a string"))
    return value


def parse_match_expressions(value: Any, field: str) -> list[tuple[str, str, list[str]]]:
    """`matchExpressions` (absent or null: none) as (key, operator, values), the types checked
    for every entry before any entry's meaning (as the host parses, then checks). A missing or
    null `key`, `operator` or `values` is empty, as in the host's Kubernetes types."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SelectorError(field, invalid_type(value, "a sequence"))
    parsed = []
    for entry in value:
        if not isinstance(entry, dict):
            raise SelectorError(field, invalid_type(entry, "LabelSelectorRequirement"))
        key = optional_text(entry.get("key"), field)
        operator = optional_text(entry.get("operator"), field)
        values = entry.get("values")
        if values is None:
            values = []
        elif not isinstance(values, list):
            raise SelectorError(field, invalid_type(values, "a sequence"))
        for text in values:
            if not isinstance(text, str):
                raise SelectorError(field, invalid_type(text, "a string"))
        parsed.append((key, operator, values))
    return parsed


def optional_text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SelectorError(field, invalid_type(value, "a string"))
    return value


def invalid_type(value: Any, expected: str) -> str:
    """serde's words for a JSON value of the wrong type: `invalid type: integer `1`, expected a string`."""
    if value is None:
        unexpected = "null"
    elif isinstance(value, bool):
        unexpected = f"boolean `{'true' if value else 'false'}`"
    elif isinstance(value, int):
        unexpected = f"integer `{value}`"
    elif isinstance(value, float):
        unexpected = f"floating point `{value!r}`"
    elif isinstance(value, str):
        unexpected = f"string {debug_quoted(value)}"
    elif isinstance(value, list):
        unexpected = "sequence"
    else:
        unexpected = "map"
    return f"invalid type: {unexpected}, expected {expected}"


def debug_quoted(text: str) -> str:
    """`text` quoted as Rust's `{:?}` writes a string (quotes, backslashes and C0/C1 control
    characters escaped), so messages read as the host's."""
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}
    quoted = "".join(
        escapes.get(ch) or (f"\\u{{{ord(ch):x}}}" if is_control(ch) else ch) for ch in text
    )
    return f'"{quoted}"'


def is_control(ch: str) -> bool:
    """Whether `ch` is a C0 or C1 control character (or DEL)."""
    return ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F
