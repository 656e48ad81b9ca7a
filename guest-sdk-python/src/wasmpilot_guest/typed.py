"""What every generated typed API shares, so `wasmpilot generate` writes only what an operator
declares (as the Rust SDK's `phase_api!`): the inputs view, the outcome builder and the worker
base class a phase's generated `<Phase>Inputs`, `<Phase>Outcome` and `<Phase>Worker` extend,
and `ObjectMeta` for the Kubernetes kinds it types.

A typed worker implements `decide` (not `sync`) against its phase's generated classes; `mypy
--strict` then refuses an output kind or a next phase the phase does not declare:

    from phases import SyncingInputs, SyncingOutcome, SyncingWorker

    class Syncing(SyncingWorker[AutoRoute]):
        def decide(self, ctx: Context, route: AutoRoute, inputs: SyncingInputs) -> SyncingOutcome:
            return SyncingOutcome.ready().service(service)

    PhaseWorker = export_phase(Syncing)
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar, Generic, Self, TypedDict, TypeVar, final

from .context import Context
from .errors import WorkerError
from .export import PhaseWorker
from .inputs import Inputs
from .outcome import Outcome


class ObjectMeta(TypedDict, total=False):
    """A Kubernetes object's `metadata`, as far as workers read or write it."""

    name: str
    namespace: str
    generateName: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    finalizers: Sequence[str]
    ownerReferences: Sequence[Mapping[str, Any]]
    managedFields: Sequence[Mapping[str, Any]]


class InputsView:
    """The typed view of a phase's inputs; the generated `<Phase>Inputs` add one accessor per
    declared input and metric query."""

    def __init__(self, inputs: Inputs) -> None:
        #: The untyped inputs, for what the accessors do not cover.
        self.untyped = inputs


class PhaseOutcome:
    """What a phase decided, built through its generated `<Phase>Outcome`: one class method per
    phase it may move to (and `next`, `stay`), one method per declared output kind."""

    #: The phase this outcome is decided in (set by the generated subclass).
    PHASE: ClassVar[str] = ""
    #: The phases it may move to (set by the generated subclass).
    ALLOWED: ClassVar[tuple[str, ...]] = ()

    def __init__(self, outcome: Outcome) -> None:
        #: The SDK's untyped decision (what `sync` returns).
        self.untyped = outcome

    @classmethod
    def _move(cls, phase: str) -> Self:
        if phase not in cls.ALLOWED:
            allowed = ", ".join(cls.ALLOWED) or "none"
            raise WorkerError.fatal(
                f"`{cls.PHASE}` may not move to `{phase}`: operator.yaml allows {allowed}"
            )
        return cls(Outcome.next(phase))

    @classmethod
    def stay(cls) -> Self:
        """Stay in this phase."""
        return cls._move(cls.PHASE)

    def status(self, status: Mapping[str, Any]) -> Self:
        """Merge `status` into the resource's `.status` (see `Outcome.status`)."""
        self.untyped.status(status)
        return self

    def requeue_after(self, delay: timedelta) -> Self:
        """Run this resource again after `delay`."""
        self.untyped.requeue_after(delay)
        return self

    @property
    def next_phase(self) -> str:
        """The phase this outcome moves to."""
        return self.untyped.next_phase

    def _output(self, api_version: str, kind: str, obj: Mapping[str, Any]) -> Self:
        """Adds `obj` as an output of `api_version` `kind`: both filled in when absent or empty,
        a fatal `WorkerError` when it names another (as the Rust SDK's `output_of_kind`)."""
        if (
            isinstance(obj, dict)
            and obj.get("apiVersion") == api_version
            and obj.get("kind") == kind
        ):
            # Already of this kind (what the generated builders get): added as it is.
            self.untyped.output(obj)
            return self
        index = self.untyped.output_count
        if not isinstance(obj, Mapping):
            self.untyped.output(obj)  # raises the SDK's error for a non-object
            return self
        filled = dict(obj)
        for field, want in (("apiVersion", api_version), ("kind", kind)):
            have = filled.get(field)
            if not isinstance(have, str) or not have:
                filled[field] = want
            elif have != want:
                raise WorkerError.fatal(
                    f"output #{index} has {field} `{have[:200]}`, but this builder takes "
                    f"{api_version} {kind}"
                )
        self.untyped.output(filled)
        return self

    def _outputs(self, api_version: str, kind: str, objects: Iterable[Mapping[str, Any]]) -> Self:
        for obj in objects:
            self._output(api_version, kind, obj)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.untyped!r})"


R = TypeVar("R")
InputsT = TypeVar("InputsT", bound=InputsView)
OutcomeT = TypeVar("OutcomeT", bound=PhaseOutcome)


class TypedPhaseWorker(PhaseWorker, Generic[R, InputsT, OutcomeT]):
    """A phase worker written against its phase's generated inputs and outcome: the generated
    `<Phase>Worker` fixes `InputsT` and `OutcomeT`; a worker subclasses it with its resource type `R`
    (`SyncingWorker[AutoRoute]`) and implements `decide`. Export and test it as any
    `PhaseWorker` (`export_phase`, `SyncTest.run`)."""

    #: The generated `<Phase>Inputs` handed to `decide`.
    inputs_view: ClassVar[type[InputsView]] = InputsView

    @abc.abstractmethod
    def decide(self, ctx: Context, resource: R, inputs: InputsT) -> OutcomeT:
        """Decides the phase through its typed outcome. Errors as for `PhaseWorker.sync`."""

    @final
    def sync(self, ctx: Context, resource: Any, inputs: Inputs) -> Outcome:
        """Runs `decide` with the typed inputs and returns its untyped outcome."""
        view: Any = type(self).inputs_view(inputs)
        outcome: Any = self.decide(ctx, resource, view)
        if not isinstance(outcome, PhaseOutcome):
            raise WorkerError.fatal(
                f"{type(self).__name__}.decide returned {type(outcome).__name__}, not its "
                "phase's generated outcome"
            )
        return outcome.untyped
