// The Rust example's test fixtures (examples/autoroute/workers/testdata), parsed.
import { readFileSync } from 'node:fs';

import { objectsFromYaml } from '@wasmpilot/guest/testing';

const TESTDATA = new URL('../../autoroute/workers/testdata/', import.meta.url);

/** Where the host reads a route's selector for input `deployments` (`selectorFrom` in operator.yaml). */
export const SELECTOR = 'spec.deploymentSelector';

export const routes = () => objectsFromYaml(readFileSync(new URL('routes.yaml', TESTDATA), 'utf8'));
export const deployments = () => objectsFromYaml(readFileSync(new URL('deployments.yaml', TESTDATA), 'utf8'));

/** Route `index` of routes.yaml, Ready, with `status.syncedDeployments` = `synced`. */
export function route(index, synced) {
  return { ...routes()[index], status: { phase: 'Ready', syncedDeployments: synced } };
}
