"""The one decision both operators of this example make: the ConfigMap `<name>-data` holding
`spec.configData` (default "initial"), and that value as status.observedConfigData. How an
existing ConfigMap changes is each operator's `updateStrategy`, not the worker's."""

from typing import Any

import wasmpilot_guest as guest


class ConfigData(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Outcome:
        value = (resource.get("spec") or {}).get("configData") or "initial"
        meta = resource["metadata"]
        config = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{meta['name']}-data", "namespace": meta["namespace"]},
            "data": {"value": value},
        }
        return guest.Outcome.next(ctx.phase).output(config).status({"observedConfigData": value})
