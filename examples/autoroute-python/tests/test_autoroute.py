"""The shared route logic (as examples/autoroute/types' tests): selectors, routable
Deployments, differences between desired and observed routes."""

import pytest

from autoroute import Deployment, Selector, SelectorError, desired_routes, route_differences
from autoroute.routable import RoutableDeployment, first_container_port
from autoroute.selector import debug_quoted


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


def test_selector_expressions():
    s = Selector({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]})
    assert s.matches({"app": "web"})
    assert not s.matches({"app": "web", "env": "dev"})
    assert Selector({"matchExpressions": [{"key": "canary", "operator": "Exists"}]}).matches({"canary": ""})
    assert Selector({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}).matches({})
    assert Selector({}).matches({"a": "b"})


@pytest.mark.parametrize(
    "expr, message",
    [
        ({"key": "env", "operator": "Equals", "values": ["x"]},
         'matchExpressions key "env": unknown operator "Equals" (expected In, NotIn, Exists or DoesNotExist)'),
        ({"key": "env", "operator": "In"}, 'matchExpressions key "env": operator In needs at least one value'),
        ({"key": "env", "operator": "Exists", "values": ["x"]}, 'matchExpressions key "env": operator Exists takes no values'),
        ({"key": "env", "operator": "in", "values": ["x"]},
         'matchExpressions key "env": unknown operator "in" (expected In, NotIn, Exists or DoesNotExist)'),
    ],
)
def test_invalid_selectors(expr, message):
    with pytest.raises(SelectorError) as raised:
        Selector({"matchExpressions": [expr]})
    assert str(raised.value) == message


def test_keys_are_quoted_as_rust_debug_does():
    assert debug_quoted('a"b\\c\nd\x01é') == '"a\\"b\\\\c\\nd\\u{1}é"'


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
