"""The {{phase}} worker, natively: no Wasm, no cluster."""

import importlib.util
from pathlib import Path

from wasmpilot_guest.testing import SyncTest

_APP = Path(__file__).resolve().parent.parent / "workers" / "{{kebab}}" / "app.py"
_SPEC = importlib.util.spec_from_file_location("{{snake}}_app", _APP)
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)


def test_moves_to_{{next_snake}}():
    resource = {
        "apiVersion": "{{api_version}}",
        "kind": "{{kind}}",
        "metadata": {"name": "example", "namespace": "default"},
        "spec": {},
    }
    report = SyncTest(resource).run(_MODULE.{{ident}}())
    assert report.next_phase == "{{next}}"
    assert report.outputs == []
