"""AutoRoute's Ready phase: stay Ready while `status.syncedDeployments` are the Deployments the
route selects and its routes (Services, VirtualServices, Gateway) are as Syncing made them; go
back to Syncing when either differs (a new or removed Deployment, or a route edited by hand)."""

import wasmpilot_guest as guest
from autoroute import (
    AutoRoute,
    Deployment,
    deployment_names,
    desired_routes,
    routable_deployments,
    route_differences,
)
from phases import ReadyInputs, ReadyOutcome, ReadyWorker


class Ready(ReadyWorker[AutoRoute]):
    """Compares `status.syncedDeployments` with the Deployments the route selects now, and the
    route's own objects (inputs `services`, `virtualservices`, `gateways`, declared `owned`)
    with the ones Syncing would apply."""

    resource_type = AutoRoute

    def decide(self, ctx: guest.Context, route: AutoRoute, inputs: ReadyInputs) -> ReadyOutcome:
        # Only the Deployments the route selects: the host applies spec.deploymentSelector.
        deployments = inputs.deployments(Deployment)
        routable = routable_deployments(deployments)
        actual = deployment_names(deployments)
        synced = sorted(route.synced_deployments)

        if synced != actual:
            added = [d for d in actual if d not in synced]
            removed = [d for d in synced if d not in actual]
            ctx.info(
                "routed deployments changed, syncing again",
                added=",".join(added),
                removed=",".join(removed),
            )
            return ReadyOutcome.syncing()

        desired = desired_routes(route.name or "", route.namespace, routable)
        differences = route_differences(
            desired,
            inputs.services(),
            inputs.virtualservices(),
            inputs.gateways(),
        )
        if not differences:
            ctx.debug("routes are up to date", deployments=len(actual))
            return ReadyOutcome.stay()
        ctx.info(
            "routes differ from what Syncing applies, syncing again",
            differences="; ".join(differences),
        )
        return ReadyOutcome.syncing()


PhaseWorker = guest.export_phase(Ready)
