"""The propagation worker, natively."""

from app import Propagation
from wasmpilot_guest.testing import SyncTest

GLOBAL = {
    "apiVersion": "examples.metacontroller.io/v1alpha1",
    "kind": "GlobalConfigMap",
    "metadata": {"name": "g"},
    "spec": {"sourceName": "settings", "sourceNamespace": "src"},
}
SOURCE = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "src"}, "data": {"k": "v"}}


def namespace(name, phase="Active"):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "status": {"phase": phase}}


def test_copies_into_every_namespace_but_the_source_and_terminating_ones():
    namespaces = [namespace("b"), namespace("src"), namespace("a"), namespace("gone", "Terminating")]
    report = SyncTest(GLOBAL).phase("Propagating").input("source", [SOURCE]).input("namespaces", namespaces).run(Propagation())
    assert report.status == {"working": "fine"}
    assert [(o["metadata"]["namespace"], o["data"]) for o in report.outputs] == [("a", {"k": "v"}), ("b", {"k": "v"})]


def test_no_source_no_copies():
    report = SyncTest(GLOBAL).phase("Propagating").input("source", []).input("namespaces", [namespace("a")]).run(Propagation())
    assert report.outputs == []
