"""The AutoRoute and Deployment objects the workers read, checked where the workers read them.

`from_json` raises (ValueError, TypeError, KeyError) as the Rust types' deserialization fails:
a missing `metadata`, `spec` or `spec.deploymentSelector`, or a field the workers read that has
the wrong JSON type. Fields the workers do not read are not checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from wasmpilot_guest.inputs import json_type

_I32 = range(-(2**31), 2**31)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what}: expected an object, not {json_type(value)}")
    return value


def _optional_object(parent: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    """`parent[key]` as an object, `{}` when absent or null (Kubernetes' optional fields)."""
    value = parent.get(key)
    return {} if value is None else _object(value, what)


def _optional_text(parent: dict[str, Any], key: str, what: str) -> Optional[str]:
    value = parent.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what}: expected a string, not {json_type(value)}")
    return value


def _text_map(parent: dict[str, Any], key: str, what: str) -> Optional[dict[str, str]]:
    value = parent.get(key)
    if value is None:
        return None
    for k, v in _object(value, what).items():
        if not isinstance(v, str):
            raise TypeError(f"{what}.{k}: expected a string, not {json_type(v)}")
    return dict(value)


def _text_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"{what}: expected an array, not {json_type(value)}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{what}: expected strings, not {json_type(item)}")
    return list(value)


def _list(parent: dict[str, Any], key: str, what: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{what}: expected an array, not {json_type(value)}")
    return value


def label_selector(value: Any, what: str) -> dict[str, Any]:
    """A Kubernetes LabelSelector checked: `matchLabels` strings, `matchExpressions` with
    string `key`/`operator` and string `values`. (Paths in messages are built only on error:
    this runs once per selected Deployment.)"""
    selector = _object(value, what)
    labels = selector.get("matchLabels")
    if labels is not None and not (
        type(labels) is dict and all(type(v) is str for v in labels.values())
    ):
        _text_map(selector, "matchLabels", f"{what}.matchLabels")  # raises, naming the field
    expressions = selector.get("matchExpressions")
    if expressions is not None:
        for index, expr in enumerate(_list(selector, "matchExpressions", f"{what}.matchExpressions")):
            where = f"{what}.matchExpressions[{index}]"
            _object(expr, where)
            _optional_text(expr, "key", f"{where}.key")
            _optional_text(expr, "operator", f"{where}.operator")
            if expr.get("values") is not None:
                _text_list(expr["values"], f"{where}.values")
    return selector


@dataclass
class AutoRoute:
    """Routes ingress traffic through an Istio gateway to every Deployment the selector matches."""

    name: Optional[str]
    namespace: Optional[str]
    #: `spec.deploymentSelector`: which Deployments (in the AutoRoute's namespace) to route to.
    #: The host selects by it (`selectorFrom` in operator.yaml); the workers get only those.
    deployment_selector: dict[str, Any]
    #: `status.syncedDeployments`: every Deployment the selector matched at the last sync.
    synced_deployments: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, value: Any) -> "AutoRoute":
        route = _object(value, "the AutoRoute")
        if "metadata" not in route:
            raise KeyError("missing field `metadata`")
        if "spec" not in route:
            raise KeyError("missing field `spec`")
        metadata = _object(route["metadata"], "metadata")
        spec = _object(route["spec"], "spec")
        if "deploymentSelector" not in spec:
            raise KeyError("missing field `deploymentSelector`")
        status = _optional_object(route, "status", "status")
        synced = status.get("syncedDeployments")
        return cls(
            name=_optional_text(metadata, "name", "metadata.name"),
            namespace=_optional_text(metadata, "namespace", "metadata.namespace"),
            deployment_selector=label_selector(spec["deploymentSelector"], "spec.deploymentSelector"),
            synced_deployments=[] if synced is None else _text_list(synced, "status.syncedDeployments"),
        )


@dataclass
class Deployment:
    """The fields of an apps/v1 Deployment the workers read."""

    name: Optional[str]
    #: `spec.selector.matchLabels`: the labels of the Deployment's pods.
    pod_labels: dict[str, str]
    #: Per container of the pod template, its `ports[].containerPort` (0 where absent).
    container_ports: list[list[int]]

    @classmethod
    def from_json(cls, value: Any) -> "Deployment":
        deployment = _object(value, "the Deployment")
        metadata = _optional_object(deployment, "metadata", "metadata")
        spec = _optional_object(deployment, "spec", "spec")
        selector = label_selector(_optional_object(spec, "selector", "spec.selector"), "spec.selector")
        template = _optional_object(spec, "template", "spec.template")
        pod_spec = _optional_object(template, "spec", "spec.template.spec")
        container_ports = []
        for index, container in enumerate(_list(pod_spec, "containers", "spec.template.spec.containers")):
            if type(container) is not dict:
                _object(container, f"spec.template.spec.containers[{index}]")  # raises
            listed = container.get("ports")
            if listed is not None and type(listed) is not list:
                _list(container, "ports", f"spec.template.spec.containers[{index}].ports")  # raises
            ports = []
            for port_index, port in enumerate(listed or ()):
                number = port.get("containerPort", 0) if type(port) is dict else None
                if type(number) is not int or number not in _I32:
                    raise _port_error(container, index, port_index)
                ports.append(number)
            container_ports.append(ports)
        return cls(
            name=_optional_text(metadata, "name", "metadata.name"),
            pod_labels=_text_map(selector, "matchLabels", "spec.selector.matchLabels") or {},
            container_ports=container_ports,
        )


def _port_error(container: dict[str, Any], index: int, port_index: int) -> Exception:
    """Why `ports[port_index]` of container `index` is not a port with a 32-bit `containerPort`
    (or why `ports` is not a list), as the Rust type's deserialization says it."""
    where = f"spec.template.spec.containers[{index}]"
    ports = _list(container, "ports", f"{where}.ports")  # raises when not a list
    port = _object(ports[port_index], f"{where}.ports[{port_index}]")
    number = port.get("containerPort", 0)
    return TypeError(
        f"{where}.ports[{port_index}].containerPort: expected a 32-bit integer, not {number!r}"
    )
