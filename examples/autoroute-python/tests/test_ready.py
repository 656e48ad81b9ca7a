"""The Ready worker, natively (as examples/autoroute/workers/ready's tests)."""

from autoroute import AutoRoute, Deployment, desired_routes, routable_deployments
from fixtures import SELECTOR, deployments, load_app, route, routes
from wasmpilot_guest.testing import SyncTest, selected_by

Ready = load_app("ready").Ready


def routes_of(resource, objects):
    """The routes Syncing applied for `resource` over `objects`, as Ready observes them."""
    parsed = AutoRoute.from_json(resource)
    selected = [Deployment.from_json(d) for d in selected_by(resource, SELECTOR, objects)]
    desired = desired_routes(parsed.name, parsed.namespace, routable_deployments(selected))
    return desired.services, desired.virtual_services, [desired.gateway]


def run_observing(resource, objects, services, virtual_services, gateways):
    """Ready for `resource`, given the `objects` the host selects for it and the route's own
    Services, VirtualServices and Gateways."""
    return (
        SyncTest(resource)
        .input_selected("deployments", SELECTOR, objects)
        .input("services", services)
        .input("virtualservices", virtual_services)
        .input("gateways", gateways)
    )


def run(resource, objects):
    return run_observing(resource, objects, *routes_of(resource, objects)).run(Ready())


def test_stays_ready_when_in_sync():
    report = run(route(0, ["api", "canary", "web", "worker"]), deployments())
    assert report.next_phase == "Ready"
    assert report.status is None
    assert report.outputs == []


def test_order_of_synced_deployments_does_not_matter():
    assert run(route(0, ["web", "api", "canary", "worker"]), deployments()).next_phase == "Ready"


def test_a_new_matching_deployment_means_syncing():
    report = run(route(0, ["api", "web", "worker"]), deployments())
    assert report.next_phase == "Syncing"
    log = next(r for r in report.logs if "changed" in r.message)
    assert log.field("added") == "canary"
    assert log.field("removed") == ""


def test_a_deleted_deployment_means_syncing():
    without_web = [
        d for d in deployments() if not (d["metadata"]["name"] == "web" and d["metadata"]["namespace"] == "default")
    ]
    assert run(route(0, ["api", "canary", "web", "worker"]), without_web).next_phase == "Syncing"


def test_every_selected_deployment_counts_with_or_without_a_port():
    # Route 1 selects api and web: the host leaves out the canary, `worker` (no track),
    # `unrelated` (other labels) and staging/web (another namespace).
    assert run(route(1, ["api", "web"]), deployments()).next_phase == "Ready"
    # Route 0 selects `worker` too, which has no port: missing from the record.
    assert run(route(0, ["api", "canary", "web"]), deployments()).next_phase == "Syncing"


def test_no_status_yet_with_matches_means_syncing():
    resource = routes()[0]
    assert run(resource, deployments()).next_phase == "Syncing"
    assert run(resource, []).next_phase == "Ready"


def test_a_hand_edited_route_means_syncing():
    resource = route(0, ["api", "canary", "web", "worker"])
    services, virtual_services, gateways = routes_of(resource, deployments())
    services[0]["spec"]["ports"][0]["port"] = 9999
    report = run_observing(resource, deployments(), services, virtual_services, gateways).run(Ready())
    assert report.next_phase == "Syncing"
    log = next(r for r in report.logs if "routes differ" in r.message)
    assert log.field("differences") == (
        'Service api: ports are [{"name":"http","port":9999,"protocol":"TCP"}] '
        '(want [{"name":"http","port":9090,"protocol":"TCP"}])'
    )


def test_api_server_defaults_are_not_differences():
    resource = route(0, ["api", "canary", "web", "worker"])
    services, virtual_services, gateways = routes_of(resource, deployments())
    for service in services:
        service["spec"]["ports"][0]["targetPort"] = 8080
        service["spec"]["clusterIP"] = "10.0.0.1"
        del service["spec"]["ports"][0]["protocol"]
    report = run_observing(resource, deployments(), services, virtual_services, gateways).run(Ready())
    assert report.next_phase == "Ready"


def test_a_missing_gateway_and_an_unrouted_object_mean_syncing():
    resource = route(0, ["api", "canary", "web", "worker"])
    services, virtual_services, _ = routes_of(resource, deployments())
    stale = dict(virtual_services[0], metadata={"name": "old.example", "namespace": "default"})
    report = run_observing(resource, deployments(), services, virtual_services + [stale], []).run(Ready())
    assert report.next_phase == "Syncing"
    log = next(r for r in report.logs if "routes differ" in r.message)
    assert log.field("differences") == "Gateway example is missing; VirtualService old.example is no longer routed"
