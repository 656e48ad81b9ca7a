// Which Deployments an AutoRoute routes to: the Syncing and Ready workers' shared rule.
import { compareText } from '@wasmpilot/guest';

import { Selector } from './selector.js';

/** The Deployments in the route's namespace whose labels match `spec.deploymentSelector`, with
 * or without a container port, sorted by name: what `status.syncedDeployments` records.
 * Throws a SelectorError if the route's selector is invalid (checked even without Deployments). */
export function matchingDeployments(route, deployments) {
  const selector = new Selector(route.deploymentSelector);
  return deployments
    .filter((d) => d.namespace === route.namespace && selector.matches(d.labels) && d.name !== undefined)
    .sort((a, b) => compareText(a.name, b.name));
}

/** The names of `matchingDeployments`: `status.syncedDeployments`. */
export function deploymentNames(matching) {
  return matching.map((d) => d.name);
}

/** The matching Deployments that have a container port, as `{ name, port, podLabels }`: those
 * get a Service and a VirtualService. Sorted by name. Throws as `matchingDeployments`. */
export function routableDeployments(route, deployments) {
  return matchingDeployments(route, deployments).flatMap((d) => {
    const port = firstContainerPort(d);
    return port === undefined ? [] : [{ name: d.name, port, podLabels: d.podLabels }];
  });
}

/** The first port of the first container that declares one (port 0 counts as none). */
export function firstContainerPort(deployment) {
  const ports = deployment.containerPorts.find((p) => p.length > 0);
  return ports === undefined || ports[0] <= 0 ? undefined : ports[0];
}
