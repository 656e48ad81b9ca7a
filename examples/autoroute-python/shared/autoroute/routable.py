"""Which Deployments an AutoRoute routes to: the Syncing and Ready workers' shared rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .resource import AutoRoute, Deployment
from .selector import Selector


@dataclass
class RoutableDeployment:
    """A Deployment that gets a Service and a VirtualService."""

    name: str
    #: The first port of the first container that declares one.
    port: int
    #: The Deployment's `spec.selector.matchLabels`: the Service's selector.
    pod_labels: dict[str, str]


def matching_deployments(route: AutoRoute, deployments: list[Deployment]) -> list[Deployment]:
    """The Deployments in the route's namespace whose labels match `spec.deploymentSelector`,
    with or without a container port, sorted by name: what `status.syncedDeployments` records.

    Raises SelectorError if the route's selector is invalid (checked even without Deployments)."""
    selector = Selector(route.deployment_selector)
    matching = [
        d
        for d in deployments
        if d.namespace == route.namespace and selector.matches(d.labels) and d.name is not None
    ]
    return sorted(matching, key=lambda d: d.name)


def deployment_names(matching: list[Deployment]) -> list[str]:
    """The names of `matching_deployments`: `status.syncedDeployments`."""
    return [d.name for d in matching if d.name is not None]


def routable_deployments(route: AutoRoute, deployments: list[Deployment]) -> list[RoutableDeployment]:
    """The matching Deployments that have a container port: those get a Service and a
    VirtualService. Sorted by name. Raises SelectorError as `matching_deployments`."""
    routable = []
    for d in matching_deployments(route, deployments):
        port = first_container_port(d)
        if d.name is not None and port is not None:
            routable.append(RoutableDeployment(name=d.name, port=port, pod_labels=d.pod_labels))
    return routable


def first_container_port(deployment: Deployment) -> Optional[int]:
    """The first port of the first container that declares one (port 0 counts as none)."""
    ports = next((p for p in deployment.container_ports if p), None)
    if ports is None or ports[0] <= 0:
        return None
    return ports[0]
