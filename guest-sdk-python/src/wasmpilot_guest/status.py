"""The `.status` fields the host writes on every resource it manages, for workers to read.

Any of them a worker sends back in a status patch is dropped (see `Outcome.status`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass
class Transition:
    """One phase transition as the host recorded it: which code decided it, and from what."""

    from_phase: str
    to_phase: str
    #: When the host wrote it (RFC 3339).
    time: str
    #: The resource's `.metadata.generation` the worker saw.
    generation: Optional[int] = None
    #: The component that decided (`sha256:…`); None when the host itself moved the resource
    #: (a spec change after a final phase).
    module: Optional[str] = None
    #: The sha256 of the exact request the worker received (`sha256:…`): replaying that
    #: request against `module` gives the same decision.
    input_hash: Optional[str] = None
    #: Outputs applied and pruned by this decision.
    applied: int = 0
    pruned: int = 0

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "Transition":
        return cls(
            from_phase=value.get("from", ""),
            to_phase=value.get("to", ""),
            time=value.get("time", ""),
            generation=value.get("generation"),
            module=value.get("module"),
            input_hash=value.get("inputHash"),
            applied=value.get("applied", 0),
            pruned=value.get("pruned", 0),
        )


@dataclass
class HostStatus:
    """The `.status` fields the wasmpilot host writes.

        host = HostStatus.of(resource)
        if host.history: last = host.history[-1].to_phase
    """

    #: The current phase, set by the host from the worker's decision.
    phase: Optional[str] = None
    #: The `.metadata.generation` the host last ran a worker for.
    observed_generation: Optional[int] = None
    #: Conditions set by the host (`Synced`), as JSON objects.
    conditions: list[dict[str, Any]] = field(default_factory=list)
    #: The digest (`sha256:…`) of the component that decided the current phase.
    module_digest: Optional[str] = None
    #: The last phase transitions, oldest first (the WasmOperator's `historyLimit`, default 10).
    history: list[Transition] = field(default_factory=list)

    @classmethod
    def of(cls, resource: Mapping[str, Any]) -> "HostStatus":
        """The host-written fields of a resource's `.status` (defaults where there are none)."""
        status = resource.get("status") or {}
        return cls(
            phase=status.get("phase"),
            observed_generation=status.get("observedGeneration"),
            conditions=list(status.get("conditions") or []),
            module_digest=status.get("moduleDigest"),
            history=[Transition.from_json(t) for t in status.get("history") or []],
        )
