"""SecretPropagation's only phase: a copy of the source Secret (its type and data) in every
namespace the host selected, but the source's own and those being deleted; none when the
source is gone."""

from typing import Any

import wasmpilot_guest as guest


class Propagation(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Outcome:
        outcome = guest.Outcome.next(ctx.phase).status({"working": "fine"})
        sources = inputs.list("source")
        if not sources:
            ctx.info("no source secret: no copies")
            return outcome
        source = sources[0]
        name, home = source["metadata"]["name"], source["metadata"]["namespace"]
        targets = sorted(
            ns["metadata"]["name"]
            for ns in inputs.list("namespaces")
            if ns["metadata"]["name"] != home and ns.get("status", {}).get("phase") != "Terminating"
        )
        copied = {key: source[key] for key in ("type", "data") if key in source}
        ctx.info("propagating", copies=len(targets))
        return outcome.outputs_from(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, **copied}
            for ns in targets
        )


PhaseWorker = guest.export_phase(Propagation)
