// AutoRoute's Initializing phase: mark the route as picked up and move on to Syncing.
import { exportPhase, Outcome, PhaseWorker } from '@wasmpilot/guest';

import { AutoRoute } from '../../shared/index.js';

/** Moves a new AutoRoute to `Syncing`, telling the user that processing has started. */
export class Initializing extends PhaseWorker {
  static resourceType = AutoRoute;

  sync(ctx, route) {
    ctx.info('new AutoRoute, starting to sync', { route: route.name ?? '' });
    return Outcome.next('Syncing');
  }
}

export const phaseWorker = exportPhase(Initializing);
