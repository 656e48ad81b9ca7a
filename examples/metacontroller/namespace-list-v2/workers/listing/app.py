"""NamespaceList's only phase: the ConfigMap `<name>-list` holding the names of the Namespaces
the host selected for this list (sorted, one per line), and their number."""

from typing import Any

import wasmpilot_guest as guest


class Listing(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Outcome:
        names = sorted(ns["metadata"]["name"] for ns in inputs.list("namespaces"))
        meta = resource["metadata"]
        listing = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{meta['name']}-list", "namespace": meta["namespace"]},
            "data": {"namespaces": "\n".join(names)},
        }
        ctx.info("listing namespaces", count=len(names))
        return guest.Outcome.next(ctx.phase).output(listing).status({"count": len(names)})


PhaseWorker = guest.export_phase(Listing)
