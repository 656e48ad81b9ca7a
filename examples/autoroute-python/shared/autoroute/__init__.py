"""The AutoRoute custom resource, and what the Syncing and Ready workers share: the rule for
which Deployments get a route, and the routes (Service, VirtualService, Gateway) themselves.
A port of examples/autoroute/types (Rust); the two must decide the same."""

from .resource import AutoRoute, Deployment
from .routable import RoutableDeployment, deployment_names, matching_deployments, routable_deployments
from .routes import Routes, desired_routes, hostname, route_differences
from .selector import Selector, SelectorError

__all__ = [
    "AutoRoute",
    "Deployment",
    "RoutableDeployment",
    "Routes",
    "Selector",
    "SelectorError",
    "deployment_names",
    "desired_routes",
    "hostname",
    "matching_deployments",
    "routable_deployments",
    "route_differences",
]
