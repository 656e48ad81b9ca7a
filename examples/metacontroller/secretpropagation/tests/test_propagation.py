"""The propagation worker, natively."""

from app import Propagation
from wasmpilot_guest.testing import SyncTest

PROPAGATION = {
    "apiVersion": "examples.metacontroller.io/v1alpha1",
    "kind": "SecretPropagation",
    "metadata": {"name": "p"},
    "spec": {"sourceName": "token", "sourceNamespace": "src", "targetNamespaceLabelSelector": {"matchLabels": {"share": "yes"}}},
}
SOURCE = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "token", "namespace": "src"}, "data": {"k": "dg=="}}


def namespace(name, phase="Active"):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"share": "yes"}}, "status": {"phase": phase}}


def test_copies_into_each_selected_namespace_but_the_source_and_terminating_ones():
    report = (
        SyncTest(PROPAGATION)
        .phase("Propagating")
        .input("source", [SOURCE])
        .input_selected("namespaces", "spec.targetNamespaceLabelSelector", [namespace("b"), namespace("src"), namespace("a"), namespace("gone", "Terminating")])
        .run(Propagation())
    )
    assert report.status == {"working": "fine"}
    assert [(o["metadata"]["namespace"], o["data"], o["type"]) for o in report.outputs] == [("a", {"k": "dg=="}, "Opaque"), ("b", {"k": "dg=="}, "Opaque")]


def test_no_source_no_copies():
    report = SyncTest(PROPAGATION).phase("Propagating").input("source", []).input("namespaces", [namespace("a")]).run(Propagation())
    assert report.outputs == [] and report.status == {"working": "fine"}
