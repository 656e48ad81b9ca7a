"""The shared decision, natively."""

from configdata import ConfigData
from wasmpilot_guest.testing import SyncTest


def demo(spec):
    return {"apiVersion": "ctl.example.com/v1", "kind": "RecreateDemo", "metadata": {"name": "x", "namespace": "n"}, "spec": spec}


def test_writes_config_data_and_reports_it():
    report = SyncTest(demo({"configData": "v7"})).phase("Configured").run(ConfigData())
    assert report.output("ConfigMap", "x-data")["data"] == {"value": "v7"}
    assert report.status == {"observedConfigData": "v7"}


def test_defaults_to_initial():
    report = SyncTest(demo({})).phase("Configured").run(ConfigData())
    assert report.output("ConfigMap", "x-data")["data"] == {"value": "initial"}
