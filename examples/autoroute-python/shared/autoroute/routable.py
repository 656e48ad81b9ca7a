"""Which Deployments an AutoRoute routes to: the Syncing and Ready workers' shared rule.

The host selects them (operator.yaml: `selectorFrom: spec.deploymentSelector`): every
Deployment in the `deployments` input is in the route's namespace and matches its selector."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .resource import Deployment


@dataclass
class RoutableDeployment:
    """A Deployment that gets a Service and a VirtualService."""

    name: str
    #: The first port of the first container that declares one.
    port: int
    #: The Deployment's `spec.selector.matchLabels`: the Service's selector.
    pod_labels: dict[str, str]


def deployment_names(deployments: list[Deployment]) -> list[str]:
    """The sorted names of the selected Deployments, with or without a container port:
    `status.syncedDeployments`."""
    return sorted(d.name for d in deployments if d.name is not None)


def routable_deployments(deployments: list[Deployment]) -> list[RoutableDeployment]:
    """The selected Deployments that have a container port, sorted by name: those get a
    Service and a VirtualService."""
    routable = []
    for d in deployments:
        port = first_container_port(d)
        if d.name is not None and port is not None:
            routable.append(RoutableDeployment(name=d.name, port=port, pod_labels=d.pod_labels))
    return sorted(routable, key=lambda r: r.name)


def first_container_port(deployment: Deployment) -> Optional[int]:
    """The first port of the first container that declares one (port 0 counts as none)."""
    ports = next((p for p in deployment.container_ports if p), None)
    if ports is None or ports[0] <= 0:
        return None
    return ports[0]
