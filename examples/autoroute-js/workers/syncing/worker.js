// AutoRoute's Syncing phase: the Service, VirtualService and Gateway that route ingress
// traffic to every selected Deployment, then `Ready`.
import { exportPhase, Outcome, PhaseWorker, WorkerError } from '@wasmpilot/guest';

import {
  AutoRoute,
  Deployment,
  deploymentNames,
  desiredRoutes,
  hostname,
  matchingDeployments,
  routableDeployments,
  SelectorError,
} from '../../shared/index.js';

/** Builds the outputs for the routable Deployments: per Deployment a Service and a
 * VirtualService `<deployment>.<route>`, plus one Gateway `<route>` for hosts `*.<route>` on
 * the Istio ingress gateway. */
export class Syncing extends PhaseWorker {
  static resourceType = AutoRoute;

  sync(ctx, route, inputs) {
    const deployments = inputs.list('deployments', Deployment);
    if (route.name === undefined) throw WorkerError.fatal('the AutoRoute has no metadata.name');
    let matching;
    let routable;
    try {
      matching = matchingDeployments(route, deployments);
      routable = routableDeployments(route, deployments);
    } catch (err) {
      if (err instanceof SelectorError) throw WorkerError.fatal(`spec.deploymentSelector is invalid: ${err.message}`);
      throw err;
    }
    ctx.info('selected deployments', {
      route: route.name,
      seen: deployments.length,
      matching: matching.length,
      routable: routable.length,
    });

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
    return outcome.status({ syncedDeployments: deploymentNames(matching) });
  }
}

export const phaseWorker = exportPhase(Syncing);
