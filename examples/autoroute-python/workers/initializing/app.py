"""AutoRoute's Initializing phase: mark the route as picked up and move on to Syncing."""

import wasmpilot_guest as guest
from autoroute import AutoRoute
from phases import InitializingInputs, InitializingOutcome, InitializingWorker


class Initializing(InitializingWorker[AutoRoute]):
    """Moves a new AutoRoute to `Syncing`, telling the user that processing has started."""

    resource_type = AutoRoute

    def decide(self, ctx: guest.Context, route: AutoRoute, inputs: InitializingInputs) -> InitializingOutcome:
        ctx.info("new AutoRoute, starting to sync", route=route.name or "")
        return InitializingOutcome.syncing()


PhaseWorker = guest.export_phase(Initializing)
