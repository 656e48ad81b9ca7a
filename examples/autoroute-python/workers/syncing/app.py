"""AutoRoute's Syncing phase: the Service, VirtualService and Gateway that route ingress
traffic to every selected Deployment, then `Ready`."""

import wasmpilot_guest as guest
from autoroute import (
    AutoRoute,
    Deployment,
    SelectorError,
    deployment_names,
    desired_routes,
    hostname,
    matching_deployments,
    routable_deployments,
)


class Syncing(guest.PhaseWorker):
    """Builds the outputs for the routable Deployments: per Deployment a Service and a
    VirtualService `<deployment>.<route>`, plus one Gateway `<route>` for hosts `*.<route>` on
    the Istio ingress gateway."""

    resource_type = AutoRoute

    def sync(self, ctx: guest.Context, route: AutoRoute, inputs: guest.Inputs) -> guest.Outcome:
        deployments = inputs.list("deployments", Deployment)
        if route.name is None:
            raise guest.WorkerError.fatal("the AutoRoute has no metadata.name")
        try:
            matching = matching_deployments(route, deployments)
            routable = routable_deployments(route, deployments)
        except SelectorError as err:
            raise guest.WorkerError.fatal(f"spec.deploymentSelector is invalid: {err}") from err
        ctx.info(
            "selected deployments",
            route=route.name,
            seen=len(deployments),
            matching=len(matching),
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
        outcome = guest.Outcome.next("Ready").output(routes.gateway)
        for service, virtual_service in zip(routes.services, routes.virtual_services):
            outcome.output(service).output(virtual_service)

        ctx.info(
            "ensuring the gateway, services and virtual services",
            gateway=route.name,
            services=len(routable),
            virtualServices=len(routable),
        )
        return outcome.status({"syncedDeployments": deployment_names(matching)})


PhaseWorker = guest.export_phase(Syncing)
