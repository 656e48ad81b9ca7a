// AutoRoute's Syncing phase: the Service, VirtualService and Gateway that route ingress
// traffic to every selected Deployment, then `Ready`.
import { exportPhase, WorkerError } from '@wasmpilot/guest';

import {
  AutoRoute,
  Deployment,
  deploymentNames,
  desiredRoutes,
  hostname,
  routableDeployments,
} from '../../shared/index.js';
import { SyncingOutcome, SyncingWorker } from '../../shared/phases.js';

/** Builds the outputs for the routable Deployments: per Deployment a Service and a
 * VirtualService `<deployment>.<route>`, plus one Gateway `<route>` for hosts `*.<route>` on
 * the Istio ingress gateway.
 * @extends {SyncingWorker<AutoRoute>} */
export class Syncing extends SyncingWorker {
  static resourceType = AutoRoute;

  /**
   * @param {import('@wasmpilot/guest').Context} ctx
   * @param {AutoRoute} route
   * @param {import('../../shared/phases.js').SyncingInputs} inputs
   */
  decide(ctx, route, inputs) {
    // Only the Deployments the route selects: the host applies spec.deploymentSelector.
    const deployments = inputs.deployments(Deployment);
    if (route.name === undefined) throw WorkerError.fatal('the AutoRoute has no metadata.name');
    const routable = routableDeployments(deployments);
    ctx.info('selected deployments', { route: route.name, selected: deployments.length, routable: routable.length });

    const routes = desiredRoutes(route.name, route.namespace, routable);
    for (const deployment of routable) {
      ctx.info('routing deployment', {
        deployment: deployment.name,
        hostname: hostname(deployment, route.name),
        port: deployment.port,
      });
    }
    const outcome = SyncingOutcome.ready().gateway(routes.gateway);
    routes.services.forEach((service, index) => outcome.service(service).virtualService(routes.virtualServices[index]));

    ctx.info('ensuring the gateway, services and virtual services', {
      gateway: route.name,
      services: routable.length,
      virtualServices: routable.length,
    });
    return outcome.status({ syncedDeployments: deploymentNames(deployments) });
  }
}

export const phaseWorker = exportPhase(Syncing);
