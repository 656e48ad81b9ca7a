"""{{kind}}'s {{phase}} phase: {{summary}}."""

from typing import Any

import wasmpilot_guest as guest
from phases import {{class}}Inputs, {{class}}Outcome, {{class}}Worker


class {{ident}}({{class}}Worker[dict[str, Any]]):
    """Scaffolded: {{summary}}. Replace with the phase's logic.

    `decide` gets the resource (a dict; set `resource_type` to a class with `from_json` to parse
    it) and the inputs operator.yaml declares for {{phase}}; it returns a `{{class}}Outcome`,
    which takes only the outputs and next phases declared there (shared/phases.py, written by
    `wasmpilot generate .`; `mypy --strict` refuses any other).
    """

    def decide(
        self, ctx: guest.Context, resource: dict[str, Any], inputs: {{class}}Inputs
    ) -> {{class}}Outcome:
        name = resource.get("metadata", {}).get("name", "")
        ctx.info("{{phase}}: {{log_message}}", resource=name)
        return {{class}}Outcome.{{next_call}}


PhaseWorker = guest.export_phase({{ident}})
