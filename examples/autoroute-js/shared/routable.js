// Which of the selected Deployments an AutoRoute routes to, and the names it records: the
// Syncing and Ready workers' shared rule.
//
// The host selects them (operator.yaml: `selectorFrom: spec.deploymentSelector`): every
// Deployment in the `deployments` input is in the route's namespace and matches its selector.
import { sortByText, sortText } from '@wasmpilot/guest';

/** The sorted names of the selected Deployments, with or without a container port:
 * `status.syncedDeployments`. */
export function deploymentNames(deployments) {
  return sortText(deployments.map((d) => d.name).filter((name) => name !== undefined));
}

/** The selected Deployments that have a container port, as `{ name, port, podLabels }`: those
 * get a Service and a VirtualService. Sorted by name. */
export function routableDeployments(deployments) {
  const routable = deployments.flatMap((d) => {
    const port = firstContainerPort(d);
    return d.name === undefined || port === undefined ? [] : [{ name: d.name, port, podLabels: d.podLabels }];
  });
  return sortByText(routable, (r) => r.name);
}

/** The first port of the first container that declares one (port 0 counts as none). */
export function firstContainerPort(deployment) {
  const ports = deployment.containerPorts.find((p) => p.length > 0);
  return ports === undefined || ports[0] <= 0 ? undefined : ports[0];
}
