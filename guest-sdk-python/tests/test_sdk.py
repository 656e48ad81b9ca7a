"""The SDK's own tests: a worker run natively through the component export's code path."""

from datetime import timedelta

import pytest

import wasmpilot_guest as guest
from wasmpilot_guest import _wire
from wasmpilot_guest.inputs import Inputs, describe_object
from wasmpilot_guest.testing import FailedRun, FinalizeTest, SyncTest, objects_from_yaml

DEPLOYMENTS = """
apiVersion: apps/v1
kind: Deployment
metadata: { name: a, namespace: default }
spec: { selector: {}, template: {} }
---
---
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: { name: b, namespace: default }
  spec: { selector: {}, template: {} }
"""


class Echo(guest.PhaseWorker):
    def sync(self, ctx, resource, inputs):
        deployments = inputs.list("deployments")
        ctx.info("echo", phase=ctx.phase, count=len(deployments), first=True)
        if resource.get("spec", {}).get("fail"):
            raise guest.WorkerError.retryable("asked to fail")
        return (
            guest.Outcome.next("Done")
            .status({"now": ctx.now.isoformat(), "phase": "ignored"})
            .outputs_from(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": d["metadata"]["name"]}}
                for d in deployments
            )
            .requeue_after(timedelta(seconds=7))
        )


class Named:
    """A resource type: `from_json` errors become a fatal error naming the resource."""

    def __init__(self, name):
        self.name = name

    @classmethod
    def from_json(cls, value):
        if "spec" not in value:
            raise KeyError("missing field `spec`")
        return cls(value["metadata"]["name"])


class Typed(guest.PhaseWorker):
    resource_type = Named

    def sync(self, ctx, resource, inputs):
        return guest.Outcome.next(resource.name)


class Cleanup(guest.FinalizerWorker):
    def finalize(self, ctx, resource):
        ctx.warn("cleaning", phase=ctx.phase)
        return guest.Finalized.pending(timedelta(milliseconds=1500)).status({"step": 1})


def test_runs_a_phase_worker_end_to_end():
    deployments = objects_from_yaml(DEPLOYMENTS)
    assert len(deployments) == 2
    report = (
        SyncTest({"status": {"phase": "Working"}})
        .input("deployments", deployments)
        .now("2025-06-01T12:00:00Z")
        .run(Echo())
    )
    assert report.next_phase == "Done"
    assert report.status == {"now": "2025-06-01T12:00:00+00:00"}
    assert len(report.outputs_of_kind("ConfigMap")) == 2
    assert report.output("ConfigMap", "b") is not None
    assert report.requeue_after == timedelta(seconds=7)
    assert report.logs[0].field("phase") == "Working"
    assert report.logs[0].field("count") == "2"
    assert report.logs[0].field("first") == "true"
    assert report.logged("echo")


def test_errors_keep_their_kind_and_logs():
    failed = SyncTest({"spec": {"fail": True}}).empty_input("deployments").fail(Echo())
    assert failed.error.is_retryable
    assert len(failed.logs) == 1


def test_a_missing_input_or_bad_clock_is_fatal():
    failed = SyncTest({}).fail(Echo())
    assert failed.error == guest.WorkerError.fatal(
        "unknown input `deployments`: this worker declares none "
        "(see its `inputs` in the WasmOperator: the phase's, or spec.finalizer.inputs "
        "for the finalizer)"
    )
    failed = SyncTest({}).empty_input("deployments").now("yesterday").fail(Echo())
    assert "RFC 3339" in failed.error.message
    failed = SyncTest({}).empty_input("deployments").now("2025-01-01T00:00:00").fail(Echo())
    assert "no UTC offset" in failed.error.message


def test_a_resource_of_the_wrong_shape_is_fatal():
    failed = SyncTest(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"}}
    ).fail(Typed())
    assert failed.error == guest.WorkerError.fatal(
        "the resource (apps/v1 Deployment ns/web) is not a valid Named: missing field `spec`"
    )
    assert SyncTest({"metadata": {"name": "x"}, "spec": {}}).run(Typed()).next_phase == "x"


def test_runs_a_finalizer():
    report = FinalizeTest({}).run(Cleanup())
    assert not report.done
    assert report.requeue_after == timedelta(milliseconds=1500)
    assert report.status == {"step": 1}
    assert report.logs[0].field("phase") == "finalizer"


class CountBackups(guest.FinalizerWorker):
    def finalize(self, ctx, resource, inputs):
        backups = inputs.list("backups")
        if not backups:
            return guest.Finalized.pending(timedelta(seconds=10))
        return guest.Finalized.done().status({"backups": [b["metadata"]["name"] for b in backups]})


def test_a_finalizer_reads_its_declared_inputs():
    backup = {"apiVersion": "backup.example.io/v1", "kind": "Backup", "metadata": {"name": "b1"}}
    report = FinalizeTest({}).input("backups", [backup]).run(CountBackups())
    assert report.done
    assert report.status == {"backups": ["b1"]}
    waiting = FinalizeTest({}).empty_input("backups").run(CountBackups())
    assert not waiting.done
    assert waiting.requeue_after == timedelta(seconds=10)
    # An input the finalizer does not declare: the same fatal error as for a phase.
    with pytest.raises(FailedRun) as failed:
        FinalizeTest({}).run(CountBackups())
    assert "unknown input `backups`" in str(failed.value.error)


def test_the_exported_classes_speak_the_wire_records():
    exported = guest.export_phase(Echo)()
    request = SyncTest({}).empty_input("deployments").request()
    result = exported.sync(request)
    assert result == _wire.SyncResult(
        next_phase="Done",
        status_info='{"now":"2025-01-01T00:00:00+00:00"}',
        outputs=[],
        requeue_after_ms=7000,
    )
    with pytest.raises(_wire.Err) as raised:
        exported.sync(SyncTest({}).request())
    assert isinstance(raised.value.value, _wire.WorkerError_Fatal)
    assert raised.value.value.value.startswith("unknown input `deployments`")
    finalizer = guest.export_finalizer(Cleanup)()
    finished = finalizer.finalize(_wire.FinalizeRequest(operator="o", resource="{}", now="2025-01-01T00:00:00Z"))
    assert finished == _wire.FinalizeResult(done=False, status_info='{"step":1}', requeue_after_ms=1500)


def test_unknown_input_names_the_known_ones():
    inputs = Inputs([("deployments", []), ("services", [])])
    with pytest.raises(guest.WorkerError) as raised:
        inputs.list("pods")
    assert raised.value.is_fatal
    assert "unknown input `pods`" in raised.value.message
    assert "`deployments`, `services`" in raised.value.message
    assert inputs.names() == ["deployments", "services"]


def test_a_bad_object_names_input_and_object():
    bad = '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns"}}'
    with pytest.raises(guest.WorkerError) as raised:
        Inputs([("deployments", [bad])]).list("deployments", Named)
    assert raised.value.message.startswith(
        "input `deployments`: object #0 (apps/v1 Deployment ns/web) is not a valid Named"
    )
    with pytest.raises(guest.WorkerError) as raised:
        Inputs([("deployments", ["nope"])]).list("deployments")
    assert "#0 (not JSON) is not a valid JSON value" in raised.value.message
    assert describe_object(1, "{}") == "#1"


def test_samples_parse():
    inputs = Inputs([("latency", ['{"labels":{"pod":"a"},"value":0.5,"timestamp":1700000000}', '{"value":null,"timestamp":1}'])])
    samples = inputs.samples("latency")
    assert samples[0] == guest.Sample(timestamp=1700000000.0, value=0.5, labels={"pod": "a"})
    assert samples[1].value is None


def test_outputs_are_checked():
    with pytest.raises(guest.WorkerError) as raised:
        guest.Outcome.next("Ready").output({"apiVersion": "v1", "kind": "Service", "metadata": {}})
    assert raised.value.message == "output #0 (Service) has no metadata.name"
    with pytest.raises(guest.WorkerError) as raised:
        guest.Outcome.next("Ready").outputs_from([{"metadata": {"name": "x"}}])
    assert raised.value.message == "output #0 (x) has no apiVersion, no kind"
    with pytest.raises(guest.WorkerError) as raised:
        guest.Outcome.next("Ready").output([1])
    assert raised.value.message == "output #0 must be a Kubernetes object, not an array"


def test_an_outputs_name_must_be_a_non_empty_string():
    for metadata in ({"name": ""}, {"name": 3}, ["web"], None):
        with pytest.raises(guest.WorkerError) as raised:
            guest.Outcome.next("Ready").output({"apiVersion": "v1", "kind": "Service", "metadata": metadata})
        assert raised.value.message == "output #0 (Service) has no metadata.name"


def test_an_output_is_the_object_as_it_was_added():
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": {"b": "2", "a": "1"}}}
    outcome = guest.Outcome.next("Ready").output(service)
    service["metadata"]["name"] = "changed"
    service["metadata"]["labels"]["c"] = "3"
    assert outcome.output_count == 1
    assert outcome.output_json == [
        '{"apiVersion":"v1","kind":"Service","metadata":{"labels":{"a":"1","b":"2"},"name":"web"}}'
    ]
    # `outputs` parses a fresh copy at each read: changing one changes neither the next read
    # nor the decision.
    outcome.outputs[0]["metadata"]["name"] = "also changed"
    assert outcome.outputs[0]["metadata"]["name"] == "web"

    class Fixed(guest.PhaseWorker):
        def sync(self, ctx, resource, inputs):
            return outcome

    assert guest.export_phase(Fixed)().sync(SyncTest({}).request()).outputs == outcome.output_json
    with pytest.raises(guest.WorkerError) as raised:
        guest.Outcome.next("Ready").output({"apiVersion": "v1", "kind": "S", "metadata": {"name": "n", "x": {1, 2}}})
    assert raised.value.message.startswith("output #0 does not serialize to JSON: ")


def test_status_drops_host_fields_and_merges():
    outcome = guest.Outcome.next("Ready").status({"phase": "X", "conditions": [], "a": 1}).status({"b": 2})
    assert outcome.status_patch == {"a": 1, "b": 2}
    with pytest.raises(guest.WorkerError) as raised:
        guest.Outcome.next("Ready").status(3)
    assert "not a number" in raised.value.message


def test_errors_display_and_context():
    assert str(guest.WorkerError.fatal("x")) == "fatal: x"
    err = guest.WorkerError.retryable("timeout").context("listing")
    assert err.is_retryable and err.message == "listing: timeout"


def test_host_status_is_readable():
    host = guest.HostStatus.of(
        {"status": {"phase": "Ready", "observedGeneration": 3, "history": [{"from": "A", "to": "B", "time": "t", "inputHash": "sha256:x"}]}}
    )
    assert host.phase == "Ready" and host.observed_generation == 3
    assert host.history[0].to_phase == "B" and host.history[0].input_hash == "sha256:x"
    assert guest.HostStatus.of({}) == guest.HostStatus()


def test_bad_yaml_names_the_document():
    with pytest.raises(guest.WorkerError) as raised:
        objects_from_yaml("a: 1\n---\n[")
    assert raised.value.message.startswith("YAML document #1"), raised.value


def test_failed_run_shows_the_logs():
    failed = SyncTest({"spec": {"fail": True}}).empty_input("deployments").fail(Echo())
    assert isinstance(failed, FailedRun)
    assert str(failed).startswith("retryable: asked to fail\n  log: Info echo phase=")
