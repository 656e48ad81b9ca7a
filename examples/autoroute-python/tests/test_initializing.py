"""The Initializing worker, natively (as examples/autoroute/workers/initializing's tests)."""

from fixtures import load_app
from wasmpilot_guest.testing import SyncTest

Initializing = load_app("initializing").Initializing


def test_moves_to_syncing():
    route = {
        "apiVersion": "examples.io/v1",
        "kind": "AutoRoute",
        "metadata": {"name": "example", "namespace": "default"},
        "spec": {"deploymentSelector": {}},
    }
    report = SyncTest(route).run(Initializing())
    assert report.next_phase == "Syncing"
    assert report.status is None
    assert report.outputs == []
    assert report.logs[0].field("route") == "example"


def test_a_route_without_spec_is_fatal():
    route = {"apiVersion": "examples.io/v1", "kind": "AutoRoute", "metadata": {"name": "x"}}
    failed = SyncTest(route).fail(Initializing())
    assert failed.error.is_fatal
    assert failed.error.message == (
        "the resource (examples.io/v1 AutoRoute x) is not a valid AutoRoute: missing field `spec`"
    )
