// The Metacontroller hook adapter: an unchanged hook function (request JSON in, response JSON
// out) run as a phase and as a finalizer worker — the same cases as the Python SDK's.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ErrorKind } from '@wasmpilot/guest';
import { finalizeWorker, syncWorker } from '@wasmpilot/guest/metacontroller';
import { FinalizeTest, SyncTest } from '@wasmpilot/guest/testing';

// A hook as Metacontroller users write them: copies the related ConfigMap into each target
// namespace, counts the children it saw.
function copySettings(request) {
  const sources = Object.values(request.related['ConfigMap.v1']);
  const seen = request.children['ConfigMap.v1'];
  const children = sources.length
    ? request.parent.spec.targetNamespaces.map((ns) => ({
        apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: ns }, data: sources[0].data,
      }))
    : [];
  return {
    status: { expected_copies: children.length, actual_copies: Object.keys(seen).length, keys: Object.keys(seen).sort() },
    children,
    resyncAfterSeconds: 30,
  };
}

const PROPAGATION = { apiVersion: 'examples.io/v1', kind: 'Propagation', metadata: { name: 'p' }, spec: { targetNamespaces: ['a', 'b'] } };
const SOURCE = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: 'src' }, data: { k: 'v' } };
const copy = (ns) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: ns }, data: { k: 'v' } });

test('an unchanged sync hook decides the phase', () => {
  const Worker = syncWorker(copySettings);
  const report = new SyncTest(PROPAGATION).phase('Sync')
    .input('children/ConfigMap.v1', [copy('a')])
    .input('related/ConfigMap.v1', [SOURCE])
    .run(new Worker());
  assert.equal(report.nextPhase, 'Sync');
  assert.deepEqual(report.outputs, [copy('a'), copy('b')]);
  assert.deepEqual(report.status, { expected_copies: 2, actual_copies: 1, keys: ['a/settings'] });
  assert.equal(report.requeueAfterMs, 30_000);
});

test('every declared kind is in the request, even empty, keyed as the version says', () => {
  const seen = [];
  const hook = (request) => { seen.push(request); return {}; };
  const namespaced = { apiVersion: 'examples.io/v1', kind: 'L', metadata: { name: 'l', namespace: 'team' } };
  for (const [version, key] of [['v1', 'settings'], ['v2', 'src/settings']]) {
    const Worker = syncWorker(hook, version);
    new SyncTest(namespaced).phase('Sync').input('children/Secret.v1', []).input('related/ConfigMap.v1', [SOURCE]).run(new Worker());
    const request = seen.at(-1);
    assert.deepEqual(request.children, { 'Secret.v1': {} });
    assert.deepEqual(Object.keys(request.related['ConfigMap.v1']), [key]);
    assert.equal(request.finalizing, false);
    assert.equal(request.controller.kind, 'CompositeController');
  }
});

test('a failing hook is retried and a malformed answer is fatal', () => {
  const Broken = syncWorker(() => { throw new TypeError('no spec'); });
  const failed = new SyncTest(PROPAGATION).phase('Sync').fail(new Broken());
  assert.equal(failed.error.kind, ErrorKind.RETRYABLE);
  assert.match(failed.error.message, /TypeError: no spec/);
  for (const [answer, words] of [[[], /not a response/], [{ children: {} }, /not a list/], [{ resyncAfterSeconds: 'soon' }, /not a number/]]) {
    const Worker = syncWorker(() => answer);
    const bad = new SyncTest(PROPAGATION).phase('Sync').fail(new Worker());
    assert.equal(bad.error.kind, ErrorKind.FATAL);
    assert.match(bad.error.message, words);
  }
});

test('an unchanged finalize hook holds the deletion until finalized', () => {
  const Worker = finalizeWorker((request) => {
    assert.equal(request.finalizing, true);
    const left = Object.keys(request.children['ConfigMap.v1']).length;
    return { status: { left }, finalized: left === 0 };
  });
  const busy = new FinalizeTest(PROPAGATION).input('children/ConfigMap.v1', [copy('a')]).run(new Worker());
  assert.equal(busy.done, false);
  assert.deepEqual(busy.status, { left: 1 });
  const done = new FinalizeTest(PROPAGATION).input('children/ConfigMap.v1', []).run(new Worker());
  assert.equal(done.done, true);
});
