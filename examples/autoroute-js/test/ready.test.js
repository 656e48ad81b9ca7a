// The Ready worker, natively (as examples/autoroute/workers/ready's tests).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { selectedBy, SyncTest } from '@wasmpilot/guest/testing';

import { AutoRoute, Deployment, desiredRoutes, routableDeployments } from '../shared/index.js';
import { Ready } from '../workers/ready/worker.js';
import { deployments, route, routes, SELECTOR } from './fixtures.js';

/** The routes Syncing applied for `resource` over `objects`, as Ready observes them. */
function routesOf(resource, objects) {
  const parsed = AutoRoute.fromJSON(resource);
  const selected = selectedBy(resource, SELECTOR, objects).map((d) => Deployment.fromJSON(d));
  const desired = desiredRoutes(parsed.name, parsed.namespace, routableDeployments(selected));
  return [desired.services, desired.virtualServices, [desired.gateway]];
}

/** Ready for `resource`, given the `objects` the host selects for it and the route's own
 * Services, VirtualServices and Gateways. */
const observing = (resource, objects, services, virtualServices, gateways) =>
  new SyncTest(resource)
    .inputSelected('deployments', SELECTOR, objects)
    .input('services', services)
    .input('virtualservices', virtualServices)
    .input('gateways', gateways);

const run = (resource, objects) => observing(resource, objects, ...routesOf(resource, objects)).run(new Ready());

test('stays Ready when in sync', () => {
  const report = run(route(0, ['api', 'canary', 'web', 'worker']), deployments());
  assert.equal(report.nextPhase, 'Ready');
  assert.equal(report.status, undefined);
  assert.deepEqual(report.outputs, []);
});

test('the order of syncedDeployments does not matter', () => {
  assert.equal(run(route(0, ['web', 'api', 'canary', 'worker']), deployments()).nextPhase, 'Ready');
});

test('a new matching deployment means Syncing', () => {
  const report = run(route(0, ['api', 'web', 'worker']), deployments());
  assert.equal(report.nextPhase, 'Syncing');
  const log = report.logs.find((r) => r.message.includes('changed'));
  assert.equal(log.field('added'), 'canary');
  assert.equal(log.field('removed'), '');
});

test('a deleted deployment means Syncing', () => {
  const withoutWeb = deployments().filter((d) => !(d.metadata.name === 'web' && d.metadata.namespace === 'default'));
  assert.equal(run(route(0, ['api', 'canary', 'web', 'worker']), withoutWeb).nextPhase, 'Syncing');
});

test('every selected deployment counts, with or without a port', () => {
  // Route 1 selects api and web: the host leaves out the canary, `worker` (no track),
  // `unrelated` (other labels) and staging/web (another namespace).
  assert.equal(run(route(1, ['api', 'web']), deployments()).nextPhase, 'Ready');
  // Route 0 selects `worker` too, which has no port: missing from the record.
  assert.equal(run(route(0, ['api', 'canary', 'web']), deployments()).nextPhase, 'Syncing');
});

test('no status yet with matches means Syncing', () => {
  assert.equal(run(routes()[0], deployments()).nextPhase, 'Syncing');
  assert.equal(run(routes()[0], []).nextPhase, 'Ready');
});

test('a hand-edited route means Syncing', () => {
  const resource = route(0, ['api', 'canary', 'web', 'worker']);
  const [services, virtualServices, gateways] = routesOf(resource, deployments());
  services[0].spec.ports[0].port = 9999;
  const report = observing(resource, deployments(), services, virtualServices, gateways).run(new Ready());
  assert.equal(report.nextPhase, 'Syncing');
  const log = report.logs.find((r) => r.message.includes('routes differ'));
  assert.equal(
    log.field('differences'),
    'Service api: ports are [{"name":"http","port":9999,"protocol":"TCP"}] (want [{"name":"http","port":9090,"protocol":"TCP"}])',
  );
});

test('API server defaults are not differences', () => {
  const resource = route(0, ['api', 'canary', 'web', 'worker']);
  const [services, virtualServices, gateways] = routesOf(resource, deployments());
  for (const service of services) {
    service.spec.ports[0].targetPort = 8080;
    service.spec.clusterIP = '10.0.0.1';
    delete service.spec.ports[0].protocol;
  }
  assert.equal(observing(resource, deployments(), services, virtualServices, gateways).run(new Ready()).nextPhase, 'Ready');
});

test('a missing Gateway and an unrouted object mean Syncing', () => {
  const resource = route(0, ['api', 'canary', 'web', 'worker']);
  const [services, virtualServices] = routesOf(resource, deployments());
  const stale = { ...virtualServices[0], metadata: { name: 'old.example', namespace: 'default' } };
  const report = observing(resource, deployments(), services, [...virtualServices, stale], []).run(new Ready());
  assert.equal(report.nextPhase, 'Syncing');
  assert.equal(
    report.logs.find((r) => r.message.includes('routes differ')).field('differences'),
    'Gateway example is missing; VirtualService old.example is no longer routed',
  );
});
