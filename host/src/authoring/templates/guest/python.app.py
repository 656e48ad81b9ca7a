"""{{kind}}'s {{phase}} phase: {{summary}}."""

import wasmpilot_guest as guest


class {{ident}}(guest.PhaseWorker):
    """Scaffolded: {{summary}}. Replace with the phase's logic."""

    def sync(self, ctx: guest.Context, resource, inputs: guest.Inputs) -> guest.Outcome:
        name = resource.get("metadata", {}).get("name", "")
        ctx.info("{{phase}}: moving on", resource=name)
        return guest.Outcome.next("{{next}}")


PhaseWorker = guest.export_phase({{ident}})
