// The Syncing worker, natively (as examples/autoroute/workers/syncing's tests).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SyncTest } from '@wasmpilot/guest/testing';

import { Syncing } from '../workers/syncing/worker.js';
import { deployments, routes, SELECTOR } from './fixtures.js';

/** Syncing `route` given the `objects` the host selects for it. */
const run = (route, objects) =>
  new SyncTest(route).phase('Syncing').inputSelected('deployments', SELECTOR, objects).run(new Syncing());
const names = (objects) => objects.map((o) => o.metadata.name);

test('routes every matching deployment with a port', () => {
  const report = run(routes()[0], deployments());
  assert.equal(report.nextPhase, 'Ready');
  assert.deepEqual(report.status, { syncedDeployments: ['api', 'canary', 'web', 'worker'] });
  assert.deepEqual(names(report.outputsOfKind('Service')), ['api', 'canary', 'web']);
  assert.deepEqual(names(report.outputsOfKind('VirtualService')), ['api.example', 'canary.example', 'web.example']);
  assert.deepEqual(names(report.outputsOfKind('Gateway')), ['example']);
  assert.deepEqual(
    report.outputs.map((o) => o.kind),
    ['Gateway', 'Service', 'VirtualService', 'Service', 'VirtualService', 'Service', 'VirtualService'],
  );
  assert.ok(report.outputs.every((o) => o.metadata.namespace === 'default'));
  assert.equal(report.requeueAfterMs, undefined);
});

test('the Service uses the first port and the pod selector', () => {
  const report = run(routes()[0], deployments());
  assert.deepEqual(report.output('Service', 'api'), {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'api', namespace: 'default' },
    spec: { ports: [{ name: 'http', port: 9090, protocol: 'TCP' }], selector: { app: 'api' } },
  });
  assert.equal(report.output('Service', 'web').spec.ports[0].port, 8080);
});

test('VirtualService and Gateway shapes', () => {
  const report = run(routes()[0], deployments());
  assert.deepEqual(report.output('VirtualService', 'web.example').spec, {
    hosts: ['web.example'],
    gateways: ['example'],
    http: [{ match: [{ uri: { prefix: '/' } }], route: [{ destination: { host: 'web', port: { number: 8080 } } }] }],
  });
  assert.deepEqual(report.output('Gateway', 'example').spec, {
    selector: { istio: 'ingressgateway' },
    servers: [{ port: { number: 80, name: 'http', protocol: 'HTTP' }, hosts: ['*.example'] }],
  });
});

test('matchExpressions narrow the selection', () => {
  const report = run(routes()[1], deployments());
  assert.deepEqual(report.status, { syncedDeployments: ['api', 'web'] });
  assert.deepEqual(names(report.outputsOfKind('VirtualService')), ['api.stable', 'web.stable']);
});

test('no deployments still makes the Gateway', () => {
  const report = run(routes()[0], []);
  assert.deepEqual(report.status, { syncedDeployments: [] });
  assert.deepEqual(names(report.outputs), ['example']);
});

test('logs what it routes', () => {
  const report = run(routes()[0], deployments());
  const routed = report.logs.filter((r) => r.message === 'routing deployment').map((r) => r.field('hostname'));
  assert.deepEqual(routed, ['api.example', 'canary.example', 'web.example']);
  assert.equal(report.logs[0].message, 'selected deployments');
  assert.deepEqual(report.logs[0].fields, [
    ['route', 'example'],
    ['selected', '4'],
    ['routable', '3'],
  ]);
});

test('an empty selector routes the whole namespace', () => {
  const report = run({ ...routes()[0], spec: { deploymentSelector: {} } }, deployments());
  assert.deepEqual(report.status, { syncedDeployments: ['api', 'canary', 'unrelated', 'web', 'worker'] });
  assert.deepEqual(names(report.outputsOfKind('Service')), ['api', 'canary', 'unrelated', 'web']);
});

test('an undeclared input is fatal', () => {
  assert.match(new SyncTest(routes()[0]).fail(new Syncing()).error.message, /unknown input `deployments`/);
});

test('a deployment that does not parse is fatal', () => {
  const bad =
    '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"bad","namespace":"default"},' +
    '"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":"many"}]}]}}}}';
  const failed = new SyncTest(routes()[0]).inputJson('deployments', [bad]).fail(new Syncing());
  assert.ok(failed.error.isFatal);
  assert.match(
    failed.error.message,
    /^input `deployments`: object #0 \(apps\/v1 Deployment default\/bad\) is not a valid Deployment/,
  );
});
