"""The shared route logic (as examples/autoroute/types' tests): which of the selected
Deployments are routed and recorded, differences between desired and observed routes."""

from autoroute import Deployment, deployment_names, desired_routes, routable_deployments, route_differences
from autoroute.routable import RoutableDeployment, first_container_port


def deployment(name, containers):
    return Deployment.from_json(
        {
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"selector": {"matchLabels": {"pod": name}}, "template": {"spec": {"containers": containers}}},
        }
    )


def test_first_port_of_first_container_with_ports():
    d = deployment(
        "a",
        [
            {"name": "sidecar"},
            {"name": "main", "ports": []},
            {"name": "app", "ports": [{"containerPort": 8080}, {"containerPort": 9000}]},
            {"name": "other", "ports": [{"containerPort": 7000}]},
        ],
    )
    assert first_container_port(d) == 8080
    assert first_container_port(deployment("a", [{"name": "main"}])) is None
    assert first_container_port(deployment("a", [{"name": "main", "ports": [{"containerPort": 0}]}])) is None


def test_routes_the_deployments_with_a_port_and_names_them_all_sorted():
    port = [{"name": "c", "ports": [{"containerPort": 80}]}]
    selected = [deployment("zeta", port), deployment("alpha", port), deployment("no-port", [{"name": "c"}])]
    routable = routable_deployments(selected)
    assert [r.name for r in routable] == ["alpha", "zeta"]
    assert (routable[0].port, routable[0].pod_labels) == (80, {"pod": "alpha"})
    assert deployment_names(selected) == ["alpha", "no-port", "zeta"]


def web_routes():
    web = RoutableDeployment(name="web", port=8080, pod_labels={"app": "web"})
    return desired_routes("r", "ns", [web])


def test_hand_edits_are_differences():
    desired = web_routes()
    services = [dict(desired.services[0], spec={"ports": [{"name": "http", "port": 9999}], "selector": {"app": "web"}})]
    virtual_services = [dict(desired.virtual_services[0], spec={"hosts": ["evil.r"]})]
    gateway = dict(desired.gateway, spec=dict(desired.gateway["spec"], servers=[]))
    differences = route_differences(desired, services, virtual_services, [gateway])
    assert [d.split(":")[0] for d in differences] == ["Gateway r", "Service web", "VirtualService web.r"]


def test_a_float_port_is_a_difference_as_in_serde_json():
    desired = web_routes()
    services = [dict(desired.services[0], spec=dict(desired.services[0]["spec"], ports=[{"name": "http", "port": 8080.0}]))]
    differences = route_differences(desired, services, desired.virtual_services, [desired.gateway])
    assert differences == ['Service web: ports are [{"name":"http","port":8080.0}] (want [{"name":"http","port":8080,"protocol":"TCP"}])']


def test_long_values_are_cut():
    desired = web_routes()
    long_host = "h" * 300
    virtual_services = [dict(desired.virtual_services[0], spec={"hosts": [long_host]})]
    (difference,) = route_differences(desired, desired.services, virtual_services, [desired.gateway])
    got = difference.split("spec is ")[1].split(" (want")[0]
    assert len(got) == 201 and got.endswith("…")


def test_a_malformed_deployment_is_named_where_it_is_wrong():
    import pytest

    def parse(containers, selector=None):
        spec = {"selector": selector or {"matchLabels": {"pod": "a"}}, "template": {"spec": {"containers": containers}}}
        with pytest.raises((TypeError, KeyError)) as raised:
            Deployment.from_json({"metadata": {"name": "a"}, "spec": spec})
        return str(raised.value)

    where = "spec.template.spec.containers[0]"
    assert parse(["x"]) == f"{where}: expected an object, not a string"
    assert parse([{"ports": 0}]) == f"{where}.ports: expected an array, not a number"
    assert parse([{"ports": [{"containerPort": 1}, None]}]) == f"{where}.ports[1]: expected an object, not null"
    assert parse([{"ports": [{"containerPort": True}]}]) == f"{where}.ports[0].containerPort: expected a 32-bit integer, not True"
    assert parse([{"ports": [{"containerPort": 2**31}]}]).endswith("expected a 32-bit integer, not 2147483648")
    assert parse([], {"matchLabels": {"pod": 1}}) == "spec.selector.matchLabels.pod: expected a string, not a number"
    assert parse([], {"matchExpressions": [{"key": 1}]}) == "spec.selector.matchExpressions[0].key: expected a string, not a number"
