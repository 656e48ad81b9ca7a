"""AutoRoute's Initializing phase: mark the route as picked up and move on to Syncing."""

import wasmpilot_guest as guest
from autoroute import AutoRoute


class Initializing(guest.PhaseWorker):
    """Moves a new AutoRoute to `Syncing`, telling the user that processing has started."""

    resource_type = AutoRoute

    def sync(self, ctx: guest.Context, route: AutoRoute, inputs: guest.Inputs) -> guest.Outcome:
        ctx.info("new AutoRoute, starting to sync", route=route.name or "")
        return guest.Outcome.next("Syncing")


PhaseWorker = guest.export_phase(Initializing)
