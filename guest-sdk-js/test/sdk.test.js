// The SDK's own tests: a worker run natively through the component export's code path.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  compareText,
  sortByText,
  sortText,
  describeThrown,
  exportFinalizer,
  exportPhase,
  Finalized,
  FinalizerWorker,
  HostStatus,
  Inputs,
  jsonSize,
  Outcome,
  PhaseWorker,
  precompiled,
  Sample,
  toJson,
  WorkerError,
} from '@wasmpilot/guest';
import { FinalizeTest, objectsFromYaml, SyncTest } from '@wasmpilot/guest/testing';

const DEPLOYMENTS = `
apiVersion: apps/v1
kind: Deployment
metadata: { name: a, namespace: default }
spec: { selector: {}, template: {} }
---
---
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: { name: b, namespace: default }
  spec: { selector: {}, template: {} }
`;

class Echo extends PhaseWorker {
  sync(ctx, resource, inputs) {
    const deployments = inputs.list('deployments');
    ctx.info('echo', { phase: ctx.phase, count: deployments.length, first: true });
    if (resource.spec?.fail) throw WorkerError.retryable('asked to fail');
    return Outcome.next('Done')
      .status({ now: ctx.now.toISOString(), phase: 'ignored' })
      .outputsFrom(deployments.map((d) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: d.metadata.name } })))
      .requeueAfter(7000);
  }
}

class Named {
  constructor(name) {
    this.name = name;
  }

  static fromJSON(value) {
    if (!('spec' in value)) throw new TypeError('missing field `spec`');
    return new Named(value.metadata.name);
  }
}

class Typed extends PhaseWorker {
  static resourceType = Named;

  sync(ctx, resource) {
    return Outcome.next(resource.name);
  }
}

class Cleanup extends FinalizerWorker {
  finalize(ctx) {
    ctx.warn('cleaning', { phase: ctx.phase });
    return Finalized.pending(1500).status({ step: 1 });
  }
}

test('runs a phase worker end to end', () => {
  const deployments = objectsFromYaml(DEPLOYMENTS);
  assert.equal(deployments.length, 2);
  const report = new SyncTest({ status: { phase: 'Working' } })
    .input('deployments', deployments)
    .now('2025-06-01T12:00:00Z')
    .run(new Echo());
  assert.equal(report.nextPhase, 'Done');
  assert.deepEqual(report.status, { now: '2025-06-01T12:00:00.000Z' });
  assert.equal(report.outputsOfKind('ConfigMap').length, 2);
  assert.ok(report.output('ConfigMap', 'b'));
  assert.equal(report.requeueAfterMs, 7000);
  assert.equal(report.logs[0].field('phase'), 'Working');
  assert.equal(report.logs[0].field('count'), '2');
  assert.equal(report.logs[0].field('first'), 'true');
  assert.ok(report.logged('echo'));
});

test('errors keep their kind and logs', () => {
  const failed = new SyncTest({ spec: { fail: true } }).emptyInput('deployments').fail(new Echo());
  assert.ok(failed.error.isRetryable);
  assert.equal(failed.logs.length, 1);
  assert.match(failed.message, /^retryable: asked to fail\n {2}log: Info echo phase=/);
});

test('a missing input or a bad clock is fatal', () => {
  let failed = new SyncTest({}).fail(new Echo());
  assert.equal(
    failed.error.message,
    "unknown input `deployments`: this worker declares none (see its `inputs` in the WasmOperator: the phase's, or spec.finalizer.inputs for the finalizer)",
  );
  assert.ok(failed.error.isFatal);
  failed = new SyncTest({}).emptyInput('deployments').now('yesterday').fail(new Echo());
  assert.match(failed.error.message, /RFC 3339/);
  failed = new SyncTest({}).emptyInput('deployments').now('2025-01-01T00:00:00').fail(new Echo());
  assert.match(failed.error.message, /RFC 3339/);
});

test('a resource of the wrong shape is fatal', () => {
  const failed = new SyncTest({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'ns' },
  }).fail(new Typed());
  assert.equal(
    failed.error.message,
    'the resource (apps/v1 Deployment ns/web) is not a valid Named: missing field `spec`',
  );
  assert.equal(new SyncTest({ metadata: { name: 'x' }, spec: {} }).run(new Typed()).nextPhase, 'x');
});

test('runs a finalizer', () => {
  const report = new FinalizeTest({}).run(new Cleanup());
  assert.equal(report.done, false);
  assert.equal(report.requeueAfterMs, 1500);
  assert.deepEqual(report.status, { step: 1 });
  assert.equal(report.logs[0].field('phase'), 'finalizer');
});

class CountBackups extends FinalizerWorker {
  finalize(ctx, resource, inputs) {
    const backups = inputs.list('backups');
    if (backups.length === 0) return Finalized.pending(10_000);
    return Finalized.done().status({ backups: backups.map((b) => b.metadata.name) });
  }
}

test('a finalizer reads its declared inputs', () => {
  const backup = { apiVersion: 'backup.example.io/v1', kind: 'Backup', metadata: { name: 'b1' } };
  const report = new FinalizeTest({}).input('backups', [backup]).run(new CountBackups());
  assert.equal(report.done, true);
  assert.deepEqual(report.status, { backups: ['b1'] });
  const waiting = new FinalizeTest({}).emptyInput('backups').run(new CountBackups());
  assert.equal(waiting.done, false);
  assert.equal(waiting.requeueAfterMs, 10_000);
  // An input the finalizer does not declare: the same fatal error as for a phase.
  assert.throws(() => new FinalizeTest({}).run(new CountBackups()), /unknown input `backups`/);
});

test('the exports speak the wire records', () => {
  const exported = exportPhase(Echo);
  const result = exported.sync(new SyncTest({}).emptyInput('deployments').request());
  assert.deepEqual(result, {
    nextPhase: 'Done',
    statusInfo: '{"now":"2025-01-01T00:00:00.000Z"}',
    outputs: [],
    requeueAfterMs: 7000n,
  });
  assert.throws(
    () => exported.sync(new SyncTest({}).request()),
    (err) => err.payload.tag === 'fatal' && err.payload.val.startsWith('unknown input `deployments`'),
  );
  const finished = exportFinalizer(Cleanup).finalize({ operator: 'o', resource: '{}', now: '2025-01-01T00:00:00Z' });
  assert.deepEqual(finished, { done: false, statusInfo: '{"step":1}', requeueAfterMs: 1500n });
});

test('a worker bug traps, its class written to stderr first; a thrown value is thrown as an Error', (t) => {
  class Buggy extends PhaseWorker {
    sync() {
      return null.nextPhase;
    }
  }
  const written = [];
  t.mock.method(console, 'error', (line) => written.push(line));
  assert.throws(() => exportPhase(Buggy).sync(new SyncTest({}).request()), (err) => err instanceof TypeError && /sdk\.test\.js/.test(err.stack));
  // The engine writes the message and the stack after this line.
  assert.deepEqual(written, ['the worker threw TypeError:']);
  written.length = 0;
  class Throwing extends PhaseWorker {
    sync() {
      throw 'no route';
    }
  }
  assert.throws(() => exportPhase(Throwing).sync(new SyncTest({}).request()), (err) => err instanceof Error && err.message === 'the worker threw no route');
  assert.deepEqual(written, []);
  // A WorkerError is the worker's answer, not a bug: nothing written.
  assert.throws(() => exportPhase(Echo).sync(new SyncTest({}).request()), (err) => err.payload.tag === 'fatal');
  assert.equal(written.length, 0);
});

test('unknown inputs name the known ones; bad objects name input and object', () => {
  const inputs = new Inputs([
    ['deployments', ['nope']],
    ['services', []],
  ]);
  assert.throws(() => inputs.list('pods'), /unknown input `pods`: this worker declares `deployments`, `services`/);
  assert.throws(() => inputs.list('deployments'), /input `deployments`: object #0 \(not JSON\) is not a valid JSON value/);
  const bad = new Inputs([['d', ['{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns"}}']]]);
  assert.throws(() => bad.list('d', Named), /object #0 \(apps\/v1 Deployment ns\/web\) is not a valid Named: missing field `spec`/);
  assert.deepEqual(inputs.names(), ['deployments', 'services']);
});

test('samples parse', () => {
  const inputs = new Inputs([['latency', ['{"labels":{"pod":"a"},"value":0.5,"timestamp":1700000000}', '{"value":null,"timestamp":1}']]]);
  const [first, second] = inputs.samples('latency');
  assert.deepEqual(first, new Sample(1700000000, 0.5, { pod: 'a' }));
  assert.equal(second.value, null);
});

test('outputs are checked', () => {
  assert.throws(
    () => Outcome.next('Ready').output({ apiVersion: 'v1', kind: 'Service', metadata: {} }),
    { message: 'output #0 (Service) has no metadata.name' },
  );
  assert.throws(() => Outcome.next('Ready').outputsFrom([{ metadata: { name: 'x' } }]), {
    message: 'output #0 (x) has no apiVersion, no kind',
  });
  assert.throws(() => Outcome.next('Ready').output([1]), { message: 'output #0 must be a Kubernetes object, not an array' });
});

test('an output is the object as it was added: serialized once, later changes do not count', () => {
  const service = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', labels: { b: '2', a: '1' } } };
  const outcome = Outcome.next('Ready').output(service);
  service.metadata.name = 'changed';
  service.metadata.labels.c = '3';
  assert.equal(outcome.outputCount, 1);
  assert.deepEqual(outcome.outputJson, ['{"apiVersion":"v1","kind":"Service","metadata":{"labels":{"a":"1","b":"2"},"name":"web"}}']);
  // `outputs` parses a fresh copy at each read: changing one changes neither the next read nor the decision.
  outcome.outputs[0].metadata.name = 'also changed';
  assert.equal(outcome.outputs[0].metadata.name, 'web');
  const result = exportPhase(class extends PhaseWorker { sync() { return outcome; } }).sync(new SyncTest({}).request());
  assert.deepEqual(result.outputs, outcome.outputJson);
  assert.throws(() => Outcome.next('Ready').output({ apiVersion: 'v1', kind: 'S', metadata: { name: 'n', x: 1n } }), {
    message: 'output #0 does not serialize to JSON: a BigInt (1) is not JSON',
  });
});

test('status drops host fields and merges', () => {
  const outcome = Outcome.next('Ready').status({ phase: 'X', conditions: [], a: 1 }).status({ b: 2 });
  assert.deepEqual(outcome.statusPatch, { a: 1, b: 2 });
  assert.throws(() => Outcome.next('Ready').status(3), /not a number/);
});

test('errors display their kind and take context', () => {
  assert.equal(String(WorkerError.fatal('x')), 'fatal: x');
  const err = WorkerError.retryable('timeout').context('listing');
  assert.ok(err.isRetryable);
  assert.equal(err.message, 'listing: timeout');
});

test('host status is readable', () => {
  const host = HostStatus.of({
    status: { phase: 'Ready', observedGeneration: 3, history: [{ from: 'A', to: 'B', time: 't', inputHash: 'sha256:x' }] },
  });
  assert.equal(host.phase, 'Ready');
  assert.equal(host.observedGeneration, 3);
  assert.equal(host.history[0].to, 'B');
  assert.equal(host.history[0].inputHash, 'sha256:x');
  assert.deepEqual(HostStatus.of({}).history, []);
});

test('JSON is written as serde_json writes it: compact, keys sorted by code point', () => {
  assert.equal(toJson({ b: 1, a: [{ d: null, c: 'é' }], '\u{1F600}': 0, '\uFFFF': 1 }), '{"a":[{"c":"é","d":null}],"b":1,"\uFFFF":1,"\u{1F600}":0}');
  assert.throws(() => toJson({ n: NaN }), TypeError);
  // As JSON.stringify sees values: toJSON applied, undefined and functions left out of objects
  // and written as null in arrays; one key or none needs no sort.
  assert.equal(
    toJson({ at: new Date(0), gone: undefined, f: () => 1, list: [undefined, () => 1, 1], one: { z: 1 }, none: {} }),
    '{"at":"1970-01-01T00:00:00.000Z","list":[null,null,1],"none":{},"one":{"z":1}}',
  );
  assert.throws(() => toJson(undefined), TypeError);
});

test('an object already in order is written as it is; one out of order anywhere is sorted', () => {
  // In UTF-16 order but not in code point order (a surrogate pair sorts before U+FFFF there).
  assert.equal(toJson({ '\u{1F600}': 0, '\uFFFF': 1 }), '{"\uFFFF":1,"\u{1F600}":0}');
  // Sorted at the top, unsorted or holding what JSON leaves out further down: each level fixed,
  // the caller's object untouched.
  const value = { a: 1, b: { d: 1, c: [{ y: 1, x: undefined }] }, c: [1, undefined, { q: 1, p: 2 }], d: 'x' };
  const before = JSON.stringify(value);
  assert.equal(toJson(value), '{"a":1,"b":{"c":[{"y":1}],"d":1},"c":[1,null,{"p":2,"q":1}],"d":"x"}');
  assert.equal(JSON.stringify(value), before);
  // A member that is left out, at the end of an object in order, and toJSON on a nested object.
  assert.equal(toJson({ a: { toJSON: () => ({ z: 1, y: 2 }) }, b: () => 1 }), '{"a":{"y":2,"z":1}}');
  assert.throws(() => toJson({ a: 1, b: { c: Infinity } }), TypeError);
});

test('integer-like keys are ordered as text, as serde_json orders a map', () => {
  assert.equal(toJson({ b: 1, 10: 'x', 2: 'y', a: { 1: 1, '01': 2 } }), '{"10":"x","2":"y","a":{"01":2,"1":1},"b":1}');
});

test('only own members are written: class instances and __proto__ keys', () => {
  class Named {
    constructor() {
      this.own = 1;
    }

    get name() {
      return 'from the prototype';
    }
  }
  // `name` is a key elsewhere in the value; JSON.stringify writes only own members.
  assert.equal(toJson({ metadata: { name: 'web' }, item: new Named() }), '{"item":{"own":1},"metadata":{"name":"web"}}');
  const parsed = JSON.parse('{"data":{"__proto__":"x","a":1},"other":{}}');
  assert.equal(toJson(parsed), '{"data":{"__proto__":"x","a":1},"other":{}}');
});

test('JSON is the same bytes whichever way it is written: objects rebuilt in order or written by the walk', () => {
  // Objects with integer-like keys are written by the walk; compare both ways with a reference
  // serializer on random values.
  let seed = 7;
  const random = (n) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const keys = ['a', 'b', 'B', '10', '2', 'é', '\uFFFF', '\u{1F600}', 'name', 'z'];
  const make = (depth) => {
    const pick = random(depth > 3 ? 4 : 7);
    if (pick === 0) return random(1000) - 500;
    if (pick === 1) return keys[random(keys.length)];
    if (pick === 2) return random(2) === 0;
    if (pick === 3) return null;
    if (pick === 4) return Array.from({ length: random(4) }, () => make(depth + 1));
    const object = {};
    for (let i = random(5); i > 0; i--) object[keys[random(keys.length)]] = make(depth + 1);
    return object;
  };
  const reference = (value) => {
    if (Array.isArray(value)) return `[${value.map(reference).join(',')}]`;
    if (value === null || typeof value !== 'object') return JSON.stringify(value);
    const ordered = Object.keys(value).sort(compareText);
    return `{${ordered.map((k) => `${JSON.stringify(k)}:${reference(value[k])}`).join(',')}}`;
  };
  for (let i = 0; i < 300; i++) {
    const value = make(0);
    assert.equal(toJson(value), reference(value));
  }
  const wide = Array.from({ length: 600 }, (_, i) => ({ [`k${i}`]: { [`j${i}`]: i, 2: 'two', 10: 'ten' } }));
  assert.equal(toJson(wide), reference(wide));
});

test('sortText and sortByText sort by code point, as sort(compareText) does, and keep ties in order', () => {
  const texts = ['b', '\uFFFF', '\u{1F600}', 'a', '', 'B', '\ud800', 'ab', '10', '2'];
  assert.deepEqual(sortText([...texts]), [...texts].sort(compareText));
  assert.deepEqual(sortText(['svc-2', 'svc-10', 'api']), ['api', 'svc-10', 'svc-2']);
  const items = texts.map((name, index) => ({ name, index }));
  const bySort = [...items].sort((x, y) => compareText(x.name, y.name));
  assert.deepEqual(sortByText([...items], (item) => item.name), bySort);
  // Without surrogates the engine's comparison orders them; ties keep their order.
  const plain = [{ k: 'b', i: 0 }, { k: 'a', i: 1 }, { k: 'b', i: 2 }, { k: 'a', i: 3 }];
  const sorted = sortByText(plain, (item) => item.k);
  assert.equal(sorted, plain);
  assert.deepEqual(sorted.map((item) => item.i), [1, 3, 0, 2]);
});

test('compareText orders by code point, as comparing code point arrays does', () => {
  const byCodePoints = (a, b) => {
    const [l, r] = [[...a], [...b]];
    for (let i = 0; i < Math.min(l.length, r.length); i++) {
      const d = l[i].codePointAt(0) - r[i].codePointAt(0);
      if (d !== 0) return d;
    }
    return l.length - r.length;
  };
  const texts = ['', 'a', 'ab', 'b', 'é', '\uD7FF', '\uE000', '\uFFFF', '\u{10000}', '\u{1F600}', '\u{1F600}a',
    'a\u{1F600}', 'a\uFFFF', '\uD800', '\uDC00', '\uD800a', 'x\uDBFF\uDFFF', 'x\uFFFE', 'spec', 'spec.a'];
  for (const a of texts) {
    for (const b of texts) {
      assert.equal(Math.sign(compareText(a, b)), Math.sign(byCodePoints(a, b)), `${escape(a)} vs ${escape(b)}`);
    }
  }
});

test('bad YAML names the document', () => {
  assert.throws(() => objectsFromYaml('a: 1\n---\n['), { message: /^YAML document #1/ });
});

test('a value JSON cannot hold is named, as in the Rust SDK', () => {
  class Big extends PhaseWorker {
    sync() {
      return Outcome.next('Done').status({ n: 10n });
    }
  }
  assert.throws(
    () => exportPhase(Big).sync(new SyncTest({}).request()),
    (err) => err.payload.tag === 'fatal' && err.payload.val === 'the status does not serialize to JSON: a BigInt (10) is not JSON',
  );
});

test('what the engine throws while serializing is kept, with the size of what it could not write', () => {
  // An engine out of memory throws a plain string (SpiderMonkey: `out of memory`), not an Error;
  // here a toJSON that throws one stands in for the engine, once, as an allocation failure would.
  let failed = false;
  const huge = {
    toJSON() {
      if (!failed) {
        failed = true;
        throw 'out of memory';
      }
      return { blob: 'x'.repeat(300000), note: 'é"\n' };
    },
  };
  class Hoarder extends PhaseWorker {
    sync() {
      return Outcome.next('Done').status({ huge });
    }
  }
  const expected = JSON.stringify({ huge: { blob: 'x'.repeat(300000), note: 'é"\n' } });
  const bytes = new TextEncoder().encode(expected).length;
  assert.throws(
    () => exportPhase(Hoarder).sync(new SyncTest({}).request()),
    (err) => {
      assert.equal(err.payload.tag, 'fatal');
      assert.equal(err.payload.val, `the status (${bytes} bytes of JSON) could not be serialized: out of memory`);
      return true;
    },
  );
  failed = false;
  class Lister extends PhaseWorker {
    sync() {
      return Outcome.next('Done').output({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' }, data: huge });
    }
  }
  assert.throws(
    () => exportPhase(Lister).sync(new SyncTest({}).request()),
    (err) => err.payload.val.startsWith('output #0 (') && err.payload.val.endsWith(' bytes of JSON) could not be serialized: out of memory'),
  );
});

test('JSON sizes are counted as the text would be written', () => {
  const values = [
    { a: [1, -0, 2.5e-7, null, undefined, () => 1, true, false, 'tab\there', '\u0001', '\u{1F600}', '\uD800'] },
    { nested: { deep: [[], {}, ''] }, skipped: undefined, fn() {}, date: new Date(0) },
    'plain',
    ['é', 'ü€', '"\\/'],
    // Longer than one slice read at a time, with a surrogate pair across each cut.
    `${'a'.repeat(65535)}\u{1F600}${'b'.repeat(65534)}\u{1F600}"`,
  ];
  for (const value of values) {
    assert.equal(jsonSize(value), new TextEncoder().encode(JSON.stringify(value)).length, JSON.stringify(value));
  }
});

test('a thrown value is described whatever it is', () => {
  assert.equal(describeThrown(new RangeError('Invalid string length')), 'RangeError: Invalid string length');
  assert.equal(describeThrown('out of memory'), 'out of memory');
  assert.equal(describeThrown(undefined), 'undefined');
  assert.equal(describeThrown(Object.create(null)), 'a thrown object');
});

test('fetch throws an error a worker can catch, saying workers have no network', () => {
  class Fetcher extends PhaseWorker {
    sync() {
      try {
        fetch('http://169.254.169.254/');
        return Outcome.next('Reached');
      } catch (err) {
        return Outcome.next('Refused').status({ error: `${err.name}: ${err.message}` });
      }
    }
  }
  const report = new SyncTest({}).run(new Fetcher());
  assert.equal(report.nextPhase, 'Refused');
  assert.match(report.status.error, /^TypeError: fetch\(\) is not available in a wasmpilot worker: workers have no network/);
  assert.equal(typeof globalThis.fetch, 'function', 'the native fetch is back after the run');
  assert.doesNotThrow(() => globalThis.fetch.toString());
  assert.notEqual(globalThis.fetch.name, 'unavailable');
});

test('a precompiled pattern is the same pattern, tested on its samples, its lastIndex reset', () => {
  const word = /^[a-z]+$/;
  assert.equal(precompiled(word, 'web'), word);
  assert.ok(word.test('api') && !word.test('API'));
  const seen = [];
  const spy = /x/g;
  spy.test = (text) => {
    seen.push(text);
    return RegExp.prototype.test.call(spy, text);
  };
  precompiled(spy, 'x', 'ü x');
  assert.deepEqual(seen, ['x', 'ü x']);
  assert.equal(spy.lastIndex, 0, 'a global pattern starts from the beginning');
  precompiled(spy);
  assert.deepEqual(seen, ['x', 'ü x', ''], 'no sample: the empty text');
});
