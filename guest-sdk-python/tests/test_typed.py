"""The runtime of the typed API `wasmpilot generate` writes (`wasmpilot_guest.typed`): a phase's
outcome builder, inputs view and worker base class, as the generated subclasses use them."""

from typing import Any

import pytest

import wasmpilot_guest as guest
from wasmpilot_guest.testing import SyncTest
from wasmpilot_guest.typed import InputsView, PhaseOutcome, TypedPhaseWorker


class SyncingInputs(InputsView):
    def deployments(self) -> list[Any]:
        return self.untyped.list("deployments")


class SyncingOutcome(PhaseOutcome):
    PHASE = "Syncing"
    ALLOWED = ("Syncing", "Ready")

    @classmethod
    def ready(cls) -> "SyncingOutcome":
        return cls._move("Ready")

    @classmethod
    def initializing(cls) -> "SyncingOutcome":  # as a worker bypassing the types would
        return cls._move("Initializing")

    def gateway(self, obj: Any) -> "SyncingOutcome":
        return self._output("example.io/v1", "Gateway", obj)


class SyncingWorker(TypedPhaseWorker[Any, SyncingInputs, SyncingOutcome]):
    inputs_view = SyncingInputs


class Syncing(SyncingWorker):
    def decide(self, ctx: guest.Context, resource: Any, inputs: SyncingInputs) -> SyncingOutcome:
        names = [d["metadata"]["name"] for d in inputs.deployments()]
        return SyncingOutcome.ready().gateway({"metadata": {"name": "g"}}).status({"seen": names})


def test_a_typed_worker_runs_as_any_phase_worker():
    report = SyncTest({"metadata": {"name": "r"}}).phase("Syncing").input(
        "deployments", [{"metadata": {"name": "web"}}]
    ).run(Syncing())
    assert report.next_phase == "Ready"
    assert report.status == {"seen": ["web"]}
    assert report.outputs == [{"apiVersion": "example.io/v1", "kind": "Gateway", "metadata": {"name": "g"}}]


def test_stay_and_the_kind_of_an_output():
    assert SyncingOutcome.stay().next_phase == "Syncing"
    with pytest.raises(guest.WorkerError, match="has kind `Service`, but this builder takes example.io/v1 Gateway"):
        SyncingOutcome.ready().gateway({"kind": "Service", "metadata": {"name": "s"}})


def test_an_undeclared_move_is_fatal_at_run_time_too():
    with pytest.raises(guest.WorkerError, match="`Syncing` may not move to `Initializing`: operator.yaml allows Syncing, Ready"):
        SyncingOutcome.initializing()


def test_decide_must_return_its_phases_outcome():
    class Untyped(SyncingWorker):
        def decide(self, ctx: guest.Context, resource: Any, inputs: SyncingInputs) -> Any:
            return guest.Outcome.next("Ready")

    failed = SyncTest({"metadata": {"name": "r"}}).phase("Syncing").empty_input("deployments").fail(Untyped())
    assert "Untyped.decide returned Outcome, not its phase's generated outcome" in str(failed)
