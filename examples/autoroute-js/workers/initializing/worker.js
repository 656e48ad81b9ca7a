// AutoRoute's Initializing phase: mark the route as picked up and move on to Syncing.
import { exportPhase } from '@wasmpilot/guest';

import { AutoRoute } from '../../shared/index.js';
import { InitializingOutcome, InitializingWorker } from '../../shared/phases.js';

/** Moves a new AutoRoute to `Syncing`, telling the user that processing has started.
 * @extends {InitializingWorker<AutoRoute>} */
export class Initializing extends InitializingWorker {
  static resourceType = AutoRoute;

  /** @param {import('@wasmpilot/guest').Context} ctx @param {AutoRoute} route */
  decide(ctx, route) {
    ctx.info('new AutoRoute, starting to sync', { route: route.name ?? '' });
    return InitializingOutcome.syncing();
  }
}

export const phaseWorker = exportPhase(Initializing);
