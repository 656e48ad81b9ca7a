// The shared route logic (as examples/autoroute/types' tests): which of the selected
// Deployments are routed and recorded, differences between desired and observed routes.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  Deployment,
  deploymentNames,
  desiredRoutes,
  firstContainerPort,
  routableDeployments,
  routeDifferences,
} from '../shared/index.js';

const deployment = (name, containers) =>
  Deployment.fromJSON({
    metadata: { name, namespace: 'default', labels: { app: 'web' } },
    spec: { selector: { matchLabels: { pod: name } }, template: { spec: { containers } } },
  });

test('the first port of the first container with ports', () => {
  const d = deployment('a', [
    { name: 'sidecar' },
    { name: 'main', ports: [] },
    { name: 'app', ports: [{ containerPort: 8080 }, { containerPort: 9000 }] },
    { name: 'other', ports: [{ containerPort: 7000 }] },
  ]);
  assert.equal(firstContainerPort(d), 8080);
  assert.equal(firstContainerPort(deployment('a', [{ name: 'main' }])), undefined);
  assert.equal(firstContainerPort(deployment('a', [{ name: 'main', ports: [{ containerPort: 0 }] }])), undefined);
});

test('routes the deployments with a port and names them all, sorted', () => {
  const port = [{ name: 'c', ports: [{ containerPort: 80 }] }];
  const selected = [deployment('zeta', port), deployment('alpha', port), deployment('no-port', [{ name: 'c' }])];
  const routable = routableDeployments(selected);
  assert.deepEqual(routable.map((r) => r.name), ['alpha', 'zeta']);
  assert.deepEqual(routable[0], { name: 'alpha', port: 80, podLabels: { pod: 'alpha' } });
  assert.deepEqual(deploymentNames(selected), ['alpha', 'no-port', 'zeta']);
});

const webRoutes = () => desiredRoutes('r', 'ns', [{ name: 'web', port: 8080, podLabels: { app: 'web' } }]);

test('hand edits are differences', () => {
  const desired = webRoutes();
  const services = [{ ...desired.services[0], spec: { ports: [{ name: 'http', port: 9999 }], selector: { app: 'web' } } }];
  const virtualServices = [{ ...desired.virtualServices[0], spec: { hosts: ['evil.r'] } }];
  const gateway = { ...desired.gateway, spec: { ...desired.gateway.spec, servers: [] } };
  const differences = routeDifferences(desired, services, virtualServices, [gateway]);
  assert.deepEqual(differences.map((d) => d.split(':')[0]), ['Gateway r', 'Service web', 'VirtualService web.r']);
});

test('long values are cut', () => {
  const desired = webRoutes();
  const virtualServices = [{ ...desired.virtualServices[0], spec: { hosts: ['h'.repeat(300)] } }];
  const [difference] = routeDifferences(desired, desired.services, virtualServices, [desired.gateway]);
  const got = difference.split('spec is ')[1].split(' (want')[0];
  assert.equal([...got].length, 201);
  assert.ok(got.endsWith('…'));
});

test('a malformed Deployment is named where it is wrong', () => {
  const message = (containers, selector = { matchLabels: { pod: 'a' } }) => {
    const spec = { selector, template: { spec: { containers } } };
    try {
      Deployment.fromJSON({ metadata: { name: 'a' }, spec });
    } catch (err) {
      assert.ok(err instanceof TypeError);
      return err.message;
    }
    return assert.fail('parsed');
  };
  const where = 'spec.template.spec.containers[0]';
  assert.equal(message(['x']), `${where}: expected an object, not a string`);
  assert.equal(message([{ ports: 0 }]), `${where}.ports: expected an array, not a number`);
  assert.equal(message([{ ports: [{ containerPort: 1 }, null] }]), `${where}.ports[1]: expected an object, not null`);
  assert.equal(message([{ ports: [{ containerPort: true }] }]), `${where}.ports[0].containerPort: expected a 32-bit integer, not true`);
  assert.equal(message([{ ports: [{ containerPort: 2 ** 31 }] }]), `${where}.ports[0].containerPort: expected a 32-bit integer, not 2147483648`);
  assert.equal(message([], { matchLabels: { pod: 1 } }), 'spec.selector.matchLabels.pod: expected a string, not a number');
  assert.equal(message([], { matchExpressions: [{ key: 1 }] }), 'spec.selector.matchExpressions[0].key: expected a string, not a number');
});
