"""ConfigMapPropagation's two phases, one worker: Propagating applies a copy of the source
ConfigMap in every target namespace; Propagated counts the copies in place and goes back to
Propagating when one is missing or stale."""

from typing import Any, Optional

import wasmpilot_guest as guest


def copies_wanted(resource: dict[str, Any], source: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of `source` (its name, data and binaryData) in each target namespace but its own;
    none when the source is gone."""
    if source is None:
        return []
    meta = source["metadata"]
    targets = sorted(set(resource["spec"].get("targetNamespaces") or []) - {meta["namespace"]})
    copied = {key: source[key] for key in ("data", "binaryData") if key in source}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": meta["name"], "namespace": ns}, **copied}
        for ns in targets
    ]


def same_content(copy: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(copy.get(key) == wanted.get(key) for key in ("data", "binaryData"))


class Propagation(guest.PhaseWorker):
    def sync(self, ctx: guest.Context, resource: Any, inputs: guest.Inputs) -> guest.Outcome:
        sources = inputs.list("source")
        wanted = copies_wanted(resource, sources[0] if sources else None)
        expected = len(resource["spec"].get("targetNamespaces") or [])
        if ctx.phase == "Propagating":
            ctx.info("propagating", copies=len(wanted), source_found=bool(sources))
            return guest.Outcome.next("Propagated").outputs_from(wanted).status({"expected_copies": expected})
        copies = {c["metadata"]["namespace"]: c for c in inputs.list("copies")}
        in_place = [w for w in wanted if w["metadata"]["namespace"] in copies]
        stale = len(in_place) < len(wanted) or len(copies) > len(wanted) or any(
            not same_content(copies[w["metadata"]["namespace"]], w) for w in in_place
        )
        status = {"expected_copies": expected, "actual_copies": len(copies)}
        return guest.Outcome.next("Propagating" if stale else "Propagated").status(status)


PhaseWorker = guest.export_phase(Propagation)
