"""AutoRoute's Syncing phase: the Service, VirtualService and Gateway that route ingress
traffic to every selected Deployment, then `Ready`."""

import wasmpilot_guest as guest
from autoroute import AutoRoute, Deployment, deployment_names, desired_routes, hostname, routable_deployments
from phases import SyncingInputs, SyncingOutcome, SyncingWorker


class Syncing(SyncingWorker[AutoRoute]):
    """Builds the outputs for the routable Deployments: per Deployment a Service and a
    VirtualService `<deployment>.<route>`, plus one Gateway `<route>` for hosts `*.<route>` on
    the Istio ingress gateway."""

    resource_type = AutoRoute

    def decide(self, ctx: guest.Context, route: AutoRoute, inputs: SyncingInputs) -> SyncingOutcome:
        # Only the Deployments the route selects: the host applies spec.deploymentSelector.
        deployments = inputs.deployments(Deployment)
        if route.name is None:
            raise guest.WorkerError.fatal("the AutoRoute has no metadata.name")
        routable = routable_deployments(deployments)
        ctx.info(
            "selected deployments",
            route=route.name,
            selected=len(deployments),
            routable=len(routable),
        )

        routes = desired_routes(route.name, route.namespace, routable)
        for deployment in routable:
            ctx.info(
                "routing deployment",
                deployment=deployment.name,
                hostname=hostname(deployment, route.name),
                port=deployment.port,
            )
        outcome = SyncingOutcome.ready().gateway(routes.gateway)
        for service, virtual_service in zip(routes.services, routes.virtual_services):
            outcome.service(service).virtual_service(virtual_service)

        ctx.info(
            "ensuring the gateway, services and virtual services",
            gateway=route.name,
            services=len(routable),
            virtualServices=len(routable),
        )
        return outcome.status({"syncedDeployments": deployment_names(deployments)})


PhaseWorker = guest.export_phase(Syncing)
