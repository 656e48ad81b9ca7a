"""Write the business logic of a wasmpilot operator in Python, built into a WebAssembly
component with componentize-py against `wit/operator.wit`.

A worker decides one phase of a custom resource: it receives the resource, the phase's
declared inputs and the host's clock, and returns the next phase, a status patch, the
Kubernetes objects the host should apply, and when to run again. It never talks to the API
server itself.

    # app.py — componentize-py -d wit/operator.wit -w phase componentize app -o syncing.wasm
    import wasmpilot_guest as guest

    class Syncing(guest.PhaseWorker):
        def sync(self, ctx, route, inputs):
            deployments = inputs.list("deployments")
            ctx.info("deployments seen", count=len(deployments))
            return guest.Outcome.next("Ready")

    PhaseWorker = guest.export_phase(Syncing)

Test natively with `wasmpilot_guest.testing`, which runs a worker through the same code path
as the component export.
"""

from .context import Context, LogLevel, LogRecord
from .errors import ErrorKind, WorkerError
from .export import FinalizerWorker, PhaseWorker, export_finalizer, export_phase
from .inputs import Inputs, Sample
from .outcome import Finalized, Outcome
from .selector import LabelSelector, SelectorError
from .status import HostStatus, Transition

__all__ = [
    "Context",
    "ErrorKind",
    "Finalized",
    "FinalizerWorker",
    "HostStatus",
    "Inputs",
    "LabelSelector",
    "LogLevel",
    "LogRecord",
    "Outcome",
    "PhaseWorker",
    "Sample",
    "SelectorError",
    "Transition",
    "WorkerError",
    "export_finalizer",
    "export_phase",
]
