"""The propagation worker, natively: both phases."""

from app import Propagation
from wasmpilot_guest.testing import SyncTest

PROPAGATION = {
    "apiVersion": "examples.metacontroller.io/v1alpha1",
    "kind": "ConfigMapPropagation",
    "metadata": {"name": "p", "labels": {"version": "v1"}},
    "spec": {"sourceName": "settings", "sourceNamespace": "src", "targetNamespaces": ["b", "a", "src"]},
}
SOURCE = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "src"}, "data": {"k": "v"}}


def copy(ns, data=None):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns}, "data": data or {"k": "v"}}


def test_propagating_copies_into_every_target_but_the_source_namespace():
    report = SyncTest(PROPAGATION).phase("Propagating").input("source", [SOURCE]).run(Propagation())
    assert report.next_phase == "Propagated"
    assert report.outputs == [copy("a"), copy("b")]
    assert report.status == {"expected_copies": 3}


def test_a_missing_source_leaves_no_copies():
    report = SyncTest(PROPAGATION).phase("Propagating").input("source", []).run(Propagation())
    assert report.outputs == []


def test_propagated_counts_the_copies_and_goes_back_when_one_is_missing_or_stale():
    def run(copies):
        return SyncTest(PROPAGATION).phase("Propagated").input("source", [SOURCE]).input("copies", copies).run(Propagation())

    done = run([copy("a"), copy("b")])
    assert (done.next_phase, done.status) == ("Propagated", {"expected_copies": 3, "actual_copies": 2})
    assert run([copy("a")]).next_phase == "Propagating"
    assert run([copy("a"), copy("b", {"k": "old"})]).next_phase == "Propagating"
