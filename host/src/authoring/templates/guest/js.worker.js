// {{kind}}'s {{phase}} phase: {{summary}}.
import { exportPhase, Outcome, PhaseWorker } from '@wasmpilot/guest';

/** Scaffolded: {{summary}}. Replace with the phase's logic. */
export class {{ident}} extends PhaseWorker {
  sync(ctx, resource) {
    ctx.info('{{phase}}: moving on', { resource: resource?.metadata?.name ?? '' });
    return Outcome.next('{{next}}');
  }
}

export const phaseWorker = exportPhase({{ident}});
