"""The Rust example's test fixtures (examples/autoroute/workers/testdata) and the phase workers
loaded from their app.py files (each is a module named `app`, so they are loaded by path)."""

import copy
import importlib.util
from pathlib import Path

from wasmpilot_guest.testing import objects_from_yaml

EXAMPLE = Path(__file__).resolve().parent.parent
TESTDATA = EXAMPLE.parent / "autoroute" / "workers" / "testdata"

#: Where the host reads a route's selector for input `deployments` (`selectorFrom` in operator.yaml).
SELECTOR = "spec.deploymentSelector"


def routes() -> list[dict]:
    return objects_from_yaml((TESTDATA / "routes.yaml").read_text())


def deployments() -> list[dict]:
    return objects_from_yaml((TESTDATA / "deployments.yaml").read_text())


def route(index: int, synced: list[str]) -> dict:
    """Route `index` of routes.yaml, Ready, with `status.syncedDeployments` = `synced`."""
    found = copy.deepcopy(routes()[index])
    found["status"] = {"phase": "Ready", "syncedDeployments": synced}
    return found


def load_app(phase: str):
    """The `app` module of workers/<phase>."""
    spec = importlib.util.spec_from_file_location(f"{phase}_app", EXAMPLE / "workers" / phase / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
