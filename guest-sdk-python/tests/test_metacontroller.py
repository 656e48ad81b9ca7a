"""The Metacontroller hook adapter: an unchanged hook function (request JSON in, response JSON
out) run as a phase and as a finalizer worker."""

from datetime import timedelta

import wasmpilot_guest.metacontroller as metacontroller
from wasmpilot_guest.testing import FailedRun, FinalizeTest, SyncTest


def copy_settings(request):
    """A hook as Metacontroller users write them: copies the related ConfigMap into each target
    namespace, counts the children it saw."""
    parent = request["parent"]
    sources = list(request["related"]["ConfigMap.v1"].values())
    seen = request["children"]["ConfigMap.v1"]
    children = []
    if sources:
        for ns in parent["spec"]["targetNamespaces"]:
            children.append({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "settings", "namespace": ns}, "data": sources[0]["data"]})
    return {"status": {"expected_copies": len(children), "actual_copies": len(seen), "keys": sorted(seen)},
            "children": children, "resyncAfterSeconds": 30}


PROPAGATION = {"apiVersion": "examples.io/v1", "kind": "Propagation", "metadata": {"name": "p"},
               "spec": {"targetNamespaces": ["a", "b"]}}
SOURCE = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "src"}, "data": {"k": "v"}}


def copy(ns):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns}, "data": {"k": "v"}}


def test_an_unchanged_sync_hook_decides_the_phase():
    worker = metacontroller.sync_worker(copy_settings)()
    report = (
        SyncTest(PROPAGATION).phase("Sync")
        .input("children/ConfigMap.v1", [copy("a")])
        .input("related/ConfigMap.v1", [SOURCE])
        .run(worker)
    )
    assert report.next_phase == "Sync"
    assert report.outputs == [copy("a"), copy("b")]
    # A cluster-scoped parent's namespaced children are keyed namespace/name (v1).
    assert report.status == {"expected_copies": 2, "actual_copies": 1, "keys": ["a/settings"]}
    assert report.requeue_after == timedelta(seconds=30)


def test_every_declared_kind_is_in_the_request_even_empty_and_keys_follow_the_version():
    seen = []

    def hook(request):
        seen.append(request)
        return {}

    namespaced = {"apiVersion": "examples.io/v1", "kind": "L", "metadata": {"name": "l", "namespace": "team"}}
    for version, key in [("v1", "settings"), ("v2", "src/settings")]:
        SyncTest(namespaced).phase("Sync").input("children/Secret.v1", []).input("related/ConfigMap.v1", [SOURCE]).run(
            metacontroller.sync_worker(hook, version)()
        )
        request = seen[-1]
        assert request["children"] == {"Secret.v1": {}}
        assert list(request["related"]["ConfigMap.v1"]) == [key]
        assert request["finalizing"] is False
        assert request["parent"] == namespaced
        assert request["controller"]["kind"] == "CompositeController"


def test_a_failing_hook_is_retried_and_a_malformed_answer_is_fatal():
    def broken(request):
        raise KeyError("spec")

    failed = SyncTest(PROPAGATION).phase("Sync").fail(metacontroller.sync_worker(broken)())
    assert isinstance(failed, FailedRun)
    assert failed.error.kind.name.lower() == "retryable"
    assert "KeyError" in failed.error.message
    for answer, words in [([], "not a response"), ({"children": {}}, "not a list"), ({"resyncAfterSeconds": "soon"}, "not a number")]:
        failed = SyncTest(PROPAGATION).phase("Sync").fail(metacontroller.sync_worker(lambda r, a=answer: a)())
        assert failed.error.kind.name.lower() == "fatal"
        assert words in failed.error.message


def test_an_unchanged_finalize_hook_holds_the_deletion_until_finalized():
    def finalize(request):
        assert request["finalizing"] is True
        left = request["children"]["ConfigMap.v1"]
        return {"status": {"left": len(left)}, "finalized": not left}

    worker = metacontroller.finalize_worker(finalize)()
    busy = FinalizeTest(PROPAGATION).input("children/ConfigMap.v1", [copy("a")]).run(worker)
    assert (busy.done, busy.status) == (False, {"left": 1})
    done = FinalizeTest(PROPAGATION).input("children/ConfigMap.v1", []).run(worker)
    assert done.done
