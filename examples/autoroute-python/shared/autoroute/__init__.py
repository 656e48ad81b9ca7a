"""The AutoRoute custom resource, and what the Syncing and Ready workers share: which of the
selected Deployments get a route, and the routes (Service, VirtualService, Gateway) themselves.
A port of examples/autoroute/types (Rust); the two must decide the same."""

from .resource import AutoRoute, Deployment
from .routable import RoutableDeployment, deployment_names, routable_deployments
from .routes import Routes, desired_routes, hostname, route_differences

__all__ = [
    "AutoRoute",
    "Deployment",
    "RoutableDeployment",
    "Routes",
    "deployment_names",
    "desired_routes",
    "hostname",
    "routable_deployments",
    "route_differences",
]
