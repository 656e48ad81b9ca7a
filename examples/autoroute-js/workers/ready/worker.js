// AutoRoute's Ready phase: stay Ready while `status.syncedDeployments` are the Deployments the
// route selects and its routes (Services, VirtualServices, Gateway) are as Syncing made them; go
// back to Syncing when either differs (a new or removed Deployment, or a route edited by hand).
import { exportPhase, sortText } from '@wasmpilot/guest';

import {
  AutoRoute,
  Deployment,
  deploymentNames,
  desiredRoutes,
  routableDeployments,
  routeDifferences,
} from '../../shared/index.js';
import { ReadyOutcome, ReadyWorker } from '../../shared/phases.js';

/** Compares `status.syncedDeployments` with the Deployments the route selects now, and the
 * route's own objects (inputs `services`, `virtualservices`, `gateways`, declared `owned`)
 * with the ones Syncing would apply.
 * @extends {ReadyWorker<AutoRoute>} */
export class Ready extends ReadyWorker {
  static resourceType = AutoRoute;

  /**
   * @param {import('@wasmpilot/guest').Context} ctx
   * @param {AutoRoute} route
   * @param {import('../../shared/phases.js').ReadyInputs} inputs
   */
  decide(ctx, route, inputs) {
    // Only the Deployments the route selects: the host applies spec.deploymentSelector.
    const deployments = inputs.deployments(Deployment);
    const routable = routableDeployments(deployments);
    const actual = deploymentNames(deployments);
    const synced = sortText([...route.syncedDeployments]);

    if (synced.length !== actual.length || synced.some((name, i) => name !== actual[i])) {
      ctx.info('routed deployments changed, syncing again', {
        added: actual.filter((d) => !synced.includes(d)).join(','),
        removed: synced.filter((d) => !actual.includes(d)).join(','),
      });
      return ReadyOutcome.syncing();
    }

    const desired = desiredRoutes(route.name ?? '', route.namespace, routable);
    const differences = routeDifferences(
      desired,
      inputs.services(),
      inputs.virtualservices(),
      inputs.gateways(),
    );
    if (differences.length === 0) {
      ctx.debug('routes are up to date', { deployments: actual.length });
      return ReadyOutcome.stay();
    }
    ctx.info('routes differ from what Syncing applies, syncing again', { differences: differences.join('; ') });
    return ReadyOutcome.syncing();
  }
}

export const phaseWorker = exportPhase(Ready);
