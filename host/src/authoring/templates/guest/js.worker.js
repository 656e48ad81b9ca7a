// {{kind}}'s {{phase}} phase: {{summary}}.
import { exportPhase } from '@wasmpilot/guest';

import { {{class}}Outcome, {{class}}Worker } from '../../shared/phases.js';

/**
 * Scaffolded: {{summary}}. Replace with the phase's logic.
 *
 * `decide` gets the resource (set `static resourceType` to a class with `fromJSON` to parse it)
 * and the inputs operator.yaml declares for {{phase}}; it returns a `{{class}}Outcome`, which
 * takes only the outputs and next phases declared there (shared/phases.d.ts, written by
 * `wasmpilot generate .`; `tsc --noEmit` refuses any other).
 * @extends {{{class}}Worker<Record<string, any>>}
 */
export class {{ident}} extends {{class}}Worker {
  /**
   * @param {import('@wasmpilot/guest').Context} ctx
   * @param {Record<string, any>} resource
   * @param {import('../../shared/phases.js').{{class}}Inputs} inputs
   * @returns {{{class}}Outcome}
   */
  decide(ctx, resource, inputs) {
    ctx.info('{{phase}}: {{log_message}}', { resource: resource?.metadata?.name ?? '' });
    return {{class}}Outcome.{{next_call}};
  }
}

export const phaseWorker = exportPhase({{ident}});
