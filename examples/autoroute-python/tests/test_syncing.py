"""The Syncing worker, natively (as examples/autoroute/workers/syncing's tests)."""

from fixtures import SELECTOR, deployments, load_app, routes
from wasmpilot_guest.testing import SyncTest

Syncing = load_app("syncing").Syncing


def run(route, objects):
    """Syncing `route` given the `objects` the host selects for it."""
    return SyncTest(route).phase("Syncing").input_selected("deployments", SELECTOR, objects).run(Syncing())


def names(objects):
    return [o["metadata"]["name"] for o in objects]


def test_routes_every_matching_deployment_with_a_port():
    report = run(routes()[0], deployments())
    assert report.next_phase == "Ready"
    assert report.status == {"syncedDeployments": ["api", "canary", "web", "worker"]}
    assert names(report.outputs_of_kind("Service")) == ["api", "canary", "web"]
    assert names(report.outputs_of_kind("VirtualService")) == ["api.example", "canary.example", "web.example"]
    assert names(report.outputs_of_kind("Gateway")) == ["example"]
    assert [o["kind"] for o in report.outputs] == ["Gateway"] + ["Service", "VirtualService"] * 3
    assert all(o["metadata"]["namespace"] == "default" for o in report.outputs)
    assert report.requeue_after is None


def test_service_uses_the_first_port_and_the_pod_selector():
    report = run(routes()[0], deployments())
    api = report.output("Service", "api")
    assert api == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "api", "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": 9090, "protocol": "TCP"}], "selector": {"app": "api"}},
    }
    assert report.output("Service", "web")["spec"]["ports"][0]["port"] == 8080


def test_virtual_service_and_gateway_shapes():
    report = run(routes()[0], deployments())
    assert report.output("VirtualService", "web.example") == {
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "VirtualService",
        "metadata": {"name": "web.example", "namespace": "default"},
        "spec": {
            "hosts": ["web.example"],
            "gateways": ["example"],
            "http": [
                {
                    "match": [{"uri": {"prefix": "/"}}],
                    "route": [{"destination": {"host": "web", "port": {"number": 8080}}}],
                }
            ],
        },
    }
    assert report.output("Gateway", "example")["spec"] == {
        "selector": {"istio": "ingressgateway"},
        "servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["*.example"]}],
    }


def test_match_expressions_narrow_the_selection():
    report = run(routes()[1], deployments())
    assert report.status == {"syncedDeployments": ["api", "web"]}
    assert names(report.outputs_of_kind("VirtualService")) == ["api.stable", "web.stable"]


def test_no_deployments_still_makes_the_gateway():
    report = run(routes()[0], [])
    assert report.status == {"syncedDeployments": []}
    assert names(report.outputs) == ["example"]


def test_logs_what_it_routes():
    report = run(routes()[0], deployments())
    routed = [r.field("hostname") for r in report.logs if r.message == "routing deployment"]
    assert routed == ["api.example", "canary.example", "web.example"]
    selected = report.logs[0]
    assert selected.message == "selected deployments"
    assert selected.fields == [("route", "example"), ("selected", "4"), ("routable", "3")]


def test_an_empty_selector_routes_the_whole_namespace():
    everything = dict(routes()[0], spec={"deploymentSelector": {}})
    report = run(everything, deployments())
    assert report.status == {"syncedDeployments": ["api", "canary", "unrelated", "web", "worker"]}
    assert names(report.outputs_of_kind("Service")) == ["api", "canary", "unrelated", "web"]


def test_undeclared_input_is_fatal():
    failed = SyncTest(routes()[0]).fail(Syncing())
    assert "unknown input `deployments`" in failed.error.message


def test_a_deployment_that_does_not_parse_is_fatal():
    bad = (
        '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"bad","namespace":"default"},'
        '"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":"many"}]}]}}}}'
    )
    failed = SyncTest(routes()[0]).input_json("deployments", [bad]).fail(Syncing())
    assert failed.error.is_fatal
    assert "input `deployments`: object #0 (apps/v1 Deployment default/bad) is not a valid Deployment" in (
        failed.error.message
    )
