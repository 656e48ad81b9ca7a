// The {{phase}} worker, natively: no Wasm, no cluster.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SyncTest } from '@wasmpilot/guest/testing';

import { {{ident}} } from '../workers/{{kebab}}/worker.js';

test('moves to {{next}}', () => {
  const resource = {
    apiVersion: '{{api_version}}',
    kind: '{{kind}}',
    metadata: { name: 'example', namespace: 'default' },
    spec: {},
  };
  const report = new SyncTest(resource).run(new {{ident}}());
  assert.equal(report.nextPhase, '{{next}}');
  assert.deepEqual(report.outputs, []);
});
