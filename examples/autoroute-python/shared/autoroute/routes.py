"""The objects that route to a Deployment — a Service, a VirtualService `<deployment>.<route>`
and the route's Gateway — and how to tell whether the ones in the cluster still are those.
Syncing applies `desired_routes`; Ready compares them with what it observes through
`route_differences`, so the two phases cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from phases import Service
from wasmpilot_guest.outcome import to_json
from wasmpilot_guest.typed import ObjectMeta

from .routable import RoutableDeployment

#: The Istio API version of the VirtualService and Gateway.
ISTIO_API_VERSION = "networking.istio.io/v1alpha3"


@dataclass
class Routes:
    """Everything Syncing applies for a route: its Gateway, then per routable Deployment a
    Service and a VirtualService, as JSON objects."""

    gateway: dict[str, Any]
    services: list[Service]
    virtual_services: list[dict[str, Any]]


def desired_routes(route_name: str, namespace: Optional[str], routable: list[RoutableDeployment]) -> Routes:
    """The routes of AutoRoute `route_name` in `namespace` to the `routable` Deployments."""
    return Routes(
        gateway=gateway(route_name, namespace),
        services=[service(d, namespace) for d in routable],
        virtual_services=[
            virtual_service(d, hostname(d, route_name), route_name, namespace) for d in routable
        ],
    )


def hostname(deployment: RoutableDeployment, route_name: str) -> str:
    """`<deployment>.<route>`: the host a Deployment is routed under."""
    return f"{deployment.name}.{route_name}"


def service(deployment: RoutableDeployment, namespace: Optional[str]) -> Service:
    """A Service named after the Deployment, port `http`, selecting the Deployment's pods."""
    metadata: ObjectMeta = {"name": deployment.name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            # The protocol is explicit: server-side apply on Kubernetes 1.20 rejects a port
            # without it ("associative list with keys has an element that omits key field protocol").
            "ports": [{"name": "http", "port": deployment.port, "protocol": "TCP"}],
            "selector": dict(deployment.pod_labels),
        },
    }


def virtual_service(
    deployment: RoutableDeployment, host: str, route_name: str, namespace: Optional[str]
) -> dict[str, Any]:
    """Routes host `<deployment>.<route>` on the route's Gateway to the Deployment's Service."""
    return {
        "apiVersion": ISTIO_API_VERSION,
        "kind": "VirtualService",
        "metadata": {"name": host, "namespace": namespace},
        "spec": {
            "hosts": [host],
            "gateways": [route_name],
            "http": [
                {
                    "match": [{"uri": {"prefix": "/"}}],
                    "route": [
                        {"destination": {"host": deployment.name, "port": {"number": deployment.port}}}
                    ],
                }
            ],
        },
    }


def gateway(route_name: str, namespace: Optional[str]) -> dict[str, Any]:
    """One Gateway per route on the default Istio ingress gateway, for hosts `*.<route>`."""
    return {
        "apiVersion": ISTIO_API_VERSION,
        "kind": "Gateway",
        "metadata": {"name": route_name, "namespace": namespace},
        "spec": {
            "selector": {"istio": "ingressgateway"},
            "servers": [
                {
                    "port": {"number": 80, "name": "http", "protocol": "HTTP"},
                    "hosts": [f"*.{route_name}"],
                }
            ],
        },
    }


def route_differences(
    desired: Routes, services: list[Any], virtual_services: list[Any], gateways: list[Any]
) -> list[str]:
    """How the routes observed in the cluster (the route's own Services, VirtualServices and
    Gateways) differ from `desired`, one line per difference (empty: in sync). Only what the
    operator sets counts: the Service's ports and selector, the VirtualService's and Gateway's
    spec; defaults the API server adds (a port's targetPort, the cluster IP) are not differences."""
    differences: list[str] = []
    compare("Gateway", [desired.gateway], gateways, differences, spec_difference)
    compare("Service", desired.services, services, differences, service_difference)
    compare("VirtualService", desired.virtual_services, virtual_services, differences, spec_difference)
    return differences


def field(value: Any, key: str) -> Any:
    """`value[key]`, or None when `value` is not an object or has no `key` (serde_json's `value[key]`)."""
    return value.get(key) if isinstance(value, dict) else None


def same_json(a: Any, b: Any) -> bool:
    """JSON equality as serde_json's `Value` has it: an integer never equals a float or a boolean."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def spec_difference(want: Any, got: Any) -> Optional[str]:
    """A VirtualService's or Gateway's whole spec (the operator sets all of it)."""
    if same_json(field(want, "spec"), field(got, "spec")):
        return None
    return f"spec is {compact(field(got, 'spec'))} (want {compact(field(want, 'spec'))})"


def service_difference(want: Any, got: Any) -> Optional[str]:
    """A Service's ports (name, port, protocol, and no others) and selector."""

    def ports(service: Any) -> list[list[Any]]:
        listed = field(field(service, "spec"), "ports")
        return [
            [field(p, "name"), field(p, "port"), "TCP" if field(p, "protocol") is None else field(p, "protocol")]
            for p in (listed if isinstance(listed, list) else [])
        ]

    if not same_json(ports(want), ports(got)):
        return (
            f"ports are {compact(field(field(got, 'spec'), 'ports'))} "
            f"(want {compact(field(field(want, 'spec'), 'ports'))})"
        )
    want_selector, got_selector = field(field(want, "spec"), "selector"), field(field(got, "spec"), "selector")
    if not same_json(want_selector, got_selector):
        return f"selector is {compact(got_selector)} (want {compact(want_selector)})"
    return None


def compare(
    kind: str,
    desired: list[Any],
    observed: list[Any],
    differences: list[str],
    differ: Callable[[Any, Any], Optional[str]],
) -> None:
    """Each desired object must be observed (by name) and not differ; observed objects that are
    not desired are differences too (Syncing prunes them)."""

    def name(obj: Any) -> str:
        found = field(field(obj, "metadata"), "name")
        return found if isinstance(found, str) else ""

    for want in desired:
        got = next((o for o in observed if name(o) == name(want)), None)
        if got is None:
            differences.append(f"{kind} {name(want)} is missing")
        elif (difference := differ(want, got)) is not None:
            differences.append(f"{kind} {name(want)}: {difference}")
    for got in observed:
        if not any(name(w) == name(got) for w in desired):
            differences.append(f"{kind} {name(got)} is no longer routed")


def compact(value: Any) -> str:
    """Compact JSON, cut after 200 characters."""
    text = to_json(value)
    return text[:200] + "…" if len(text) > 200 else text
