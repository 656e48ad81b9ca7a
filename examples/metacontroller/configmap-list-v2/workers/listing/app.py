"""ConfigMapList's only phase: the ConfigMap `<name>-list` holding the ConfigMaps the host
selected for this list (`namespace/name`, sorted, one per line), and their number."""

from typing import Any

import wasmpilot_guest as guest


def listing(resource: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """The `<name>-list` ConfigMap for `keys`, in the list's namespace."""
    meta = resource["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{meta['name']}-list", "namespace": meta["namespace"]},
        "data": {"configmaps": "\n".join(keys)},
    }


class Listing(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Outcome:
        keys = sorted(
            f"{cm['metadata']['namespace']}/{cm['metadata']['name']}"
            for cm in inputs.list("configmaps")
        )
        ctx.info("listing configmaps", count=len(keys))
        return guest.Outcome.next(ctx.phase).output(listing(resource, keys)).status({"count": len(keys)})


PhaseWorker = guest.export_phase(Listing)
