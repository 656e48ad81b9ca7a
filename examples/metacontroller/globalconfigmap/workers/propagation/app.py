"""GlobalConfigMap's only phase: a copy of the source ConfigMap (its data and binaryData) in
every namespace the host hands over, but the source's own and those being deleted; none when
the source is gone."""

from typing import Any

import wasmpilot_guest as guest


class Propagation(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Outcome:
        outcome = guest.Outcome.next(ctx.phase).status({"working": "fine"})
        sources = inputs.list("source")
        if not sources:
            ctx.info("no source configmap: no copies")
            return outcome
        source = sources[0]
        name, home = source["metadata"]["name"], source["metadata"]["namespace"]
        targets = sorted(
            ns["metadata"]["name"]
            for ns in inputs.list("namespaces")
            if ns["metadata"]["name"] != home and ns.get("status", {}).get("phase") != "Terminating"
        )
        copied = {key: source[key] for key in ("data", "binaryData") if key in source}
        ctx.info("propagating", copies=len(targets))
        return outcome.outputs_from(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, **copied}
            for ns in targets
        )


PhaseWorker = guest.export_phase(Propagation)
