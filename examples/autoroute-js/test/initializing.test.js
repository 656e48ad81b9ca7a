// The Initializing worker, natively (as examples/autoroute/workers/initializing's tests).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SyncTest } from '@wasmpilot/guest/testing';

import { Initializing } from '../workers/initializing/worker.js';

test('moves to Syncing', () => {
  const route = {
    apiVersion: 'examples.io/v1',
    kind: 'AutoRoute',
    metadata: { name: 'example', namespace: 'default' },
    spec: { deploymentSelector: {} },
  };
  const report = new SyncTest(route).run(new Initializing());
  assert.equal(report.nextPhase, 'Syncing');
  assert.equal(report.status, undefined);
  assert.deepEqual(report.outputs, []);
  assert.equal(report.logs[0].field('route'), 'example');
});

test('a route without spec is fatal', () => {
  const failed = new SyncTest({ apiVersion: 'examples.io/v1', kind: 'AutoRoute', metadata: { name: 'x' } }).fail(
    new Initializing(),
  );
  assert.ok(failed.error.isFatal);
  assert.equal(
    failed.error.message,
    'the resource (examples.io/v1 AutoRoute x) is not a valid AutoRoute: missing field `spec`',
  );
});
