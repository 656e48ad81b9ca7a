"""The Listing worker, natively: given the Namespaces the host selected."""

from app import Listing
from wasmpilot_guest.testing import SyncTest

LIST = {
    "apiVersion": "examples.metacontroller.io/v1alpha1",
    "kind": "NamespaceList",
    "metadata": {"name": "teams", "namespace": "ops"},
    "spec": {"labelSelector": {"matchLabels": {"kind": "team"}}},
}


def namespace(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"kind": "team"}}}


def test_lists_the_selected_namespaces_by_name():
    report = (
        SyncTest(LIST)
        .phase("Listing")
        .input_selected("namespaces", "spec.labelSelector", [namespace("b"), namespace("a")])
        .run(Listing())
    )
    assert report.status == {"count": 2}
    assert report.output("ConfigMap", "teams-list") == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "teams-list", "namespace": "ops"},
        "data": {"namespaces": "a\nb"},
    }
