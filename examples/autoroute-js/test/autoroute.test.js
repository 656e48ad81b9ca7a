// The shared route logic (as examples/autoroute/types' tests): selectors, routable
// Deployments, differences between desired and observed routes.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { debugQuoted, Deployment, desiredRoutes, firstContainerPort, routeDifferences, Selector } from '../shared/index.js';

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

test('selector expressions', () => {
  const s = new Selector({ matchLabels: { app: 'web' }, matchExpressions: [{ key: 'env', operator: 'NotIn', values: ['dev'] }] });
  assert.ok(s.matches({ app: 'web' }));
  assert.ok(!s.matches({ app: 'web', env: 'dev' }));
  assert.ok(new Selector({ matchExpressions: [{ key: 'canary', operator: 'Exists' }] }).matches({ canary: '' }));
  assert.ok(new Selector({ matchExpressions: [{ key: 'canary', operator: 'DoesNotExist' }] }).matches({}));
  assert.ok(new Selector({}).matches({ a: 'b' }));
});

test('invalid selectors', () => {
  const cases = [
    [{ key: 'env', operator: 'Equals', values: ['x'] }, 'matchExpressions key "env": unknown operator "Equals" (expected In, NotIn, Exists or DoesNotExist)'],
    [{ key: 'env', operator: 'In' }, 'matchExpressions key "env": operator In needs at least one value'],
    [{ key: 'env', operator: 'Exists', values: ['x'] }, 'matchExpressions key "env": operator Exists takes no values'],
    [{ key: 'env', operator: 'in', values: ['x'] }, 'matchExpressions key "env": unknown operator "in" (expected In, NotIn, Exists or DoesNotExist)'],
  ];
  for (const [expr, message] of cases) {
    assert.throws(() => new Selector({ matchExpressions: [expr] }), { name: 'SelectorError', message });
  }
});

test('keys are quoted as Rust debug-formats them', () => {
  assert.equal(debugQuoted('a"b\\c\nd\x01é'), '"a\\"b\\\\c\\nd\\u{1}é"');
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
