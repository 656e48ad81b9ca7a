"""The Listing worker, natively: what it writes for the ConfigMaps the host selected."""

from app import Listing
from wasmpilot_guest.testing import SyncTest

LIST = {
    "apiVersion": "examples.metacontroller.io/v1alpha1",
    "kind": "ConfigMapList",
    "metadata": {"name": "team-settings", "namespace": "apps"},
    "spec": {"sourceLabels": {"team": "a"}},
}


def cm(namespace, name):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


def test_lists_the_selected_configmaps_sorted_one_per_line():
    report = SyncTest(LIST).phase("Listing").input("configmaps", [cm("z", "b"), cm("a", "c"), cm("z", "a")]).run(Listing())
    assert report.next_phase == "Listing"
    assert report.status == {"count": 3}
    assert report.outputs == [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "team-settings-list", "namespace": "apps"},
            "data": {"configmaps": "a/c\nz/a\nz/b"},
        }
    ]


def test_nothing_selected_is_an_empty_list():
    report = SyncTest(LIST).phase("Listing").input("configmaps", []).run(Listing())
    assert report.status == {"count": 0}
    assert report.output("ConfigMap", "team-settings-list")["data"] == {"configmaps": ""}
