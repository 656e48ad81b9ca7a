// AutoRoute's Ready phase: stay Ready while `status.syncedDeployments` are the Deployments the
// route selects and its routes (Services, VirtualServices, Gateway) are as Syncing made them; go
// back to Syncing when either differs (a new or removed Deployment, or a route edited by hand).
import { compareText, exportPhase, Outcome, PhaseWorker } from '@wasmpilot/guest';

import {
  AutoRoute,
  Deployment,
  deploymentNames,
  desiredRoutes,
  routableDeployments,
  routeDifferences,
} from '../../shared/index.js';

/** Compares `status.syncedDeployments` with the Deployments the route selects now, and the
 * route's own objects (inputs `services`, `virtualservices`, `gateways`, declared `owned`)
 * with the ones Syncing would apply. */
export class Ready extends PhaseWorker {
  static resourceType = AutoRoute;

  sync(ctx, route, inputs) {
    // Only the Deployments the route selects: the host applies spec.deploymentSelector.
    const deployments = inputs.list('deployments', Deployment);
    const routable = routableDeployments(deployments);
    const actual = deploymentNames(deployments);
    const synced = [...route.syncedDeployments].sort(compareText);

    if (synced.length !== actual.length || synced.some((name, i) => name !== actual[i])) {
      ctx.info('routed deployments changed, syncing again', {
        added: actual.filter((d) => !synced.includes(d)).join(','),
        removed: synced.filter((d) => !actual.includes(d)).join(','),
      });
      return Outcome.next('Syncing');
    }

    const desired = desiredRoutes(route.name ?? '', route.namespace, routable);
    const differences = routeDifferences(
      desired,
      inputs.list('services'),
      inputs.list('virtualservices'),
      inputs.list('gateways'),
    );
    if (differences.length === 0) {
      ctx.debug('routes are up to date', { deployments: actual.length });
      return Outcome.next('Ready');
    }
    ctx.info('routes differ from what Syncing applies, syncing again', { differences: differences.join('; ') });
    return Outcome.next('Syncing');
  }
}

export const phaseWorker = exportPhase(Ready);
