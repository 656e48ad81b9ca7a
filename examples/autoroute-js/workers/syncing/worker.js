// AutoRoute's Syncing phase: the Service, VirtualService and Gateway that route ingress
// traffic to every selected Deployment, then `Ready`.
import { exportPhase, Outcome, PhaseWorker, WorkerError } from '@wasmpilot/guest';

import {
  AutoRoute,
  Deployment,
  deploymentNames,
  desiredRoutes,
  hostname,
  routableDeployments,
} from '../../shared/index.js';

/** Builds the outputs for the routable Deployments: per Deployment a Service and a
 * VirtualService `<deployment>.<route>`, plus one Gateway `<route>` for hosts `*.<route>` on
 * the Istio ingress gateway. */
export class Syncing extends PhaseWorker {
  static resourceType = AutoRoute;

  sync(ctx, route, inputs) {
    // Only the Deployments the route selects: the host applies spec.deploymentSelector.
    const deployments = inputs.list('deployments', Deployment);
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
    const outcome = Outcome.next('Ready').output(routes.gateway);
    routes.services.forEach((service, index) => outcome.output(service).output(routes.virtualServices[index]));

    ctx.info('ensuring the gateway, services and virtual services', {
      gateway: route.name,
      services: routable.length,
      virtualServices: routable.length,
    });
    return outcome.status({ syncedDeployments: deploymentNames(deployments) });
  }
}

export const phaseWorker = exportPhase(Syncing);
