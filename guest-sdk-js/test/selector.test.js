// Label selectors: matched and refused as the host does (selection/src/label_selector.rs), in its words.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { LabelSelector, Outcome, PhaseWorker, SelectorError, WorkerError } from '@wasmpilot/guest';
import { selectedBy, SyncTest } from '@wasmpilot/guest/testing';

const FIELD = 'spec.deploymentSelector';

/** The cases the host's own tests run (selection/tests/label_selector_cases.rs), and the Python SDK's. */
const CASES = JSON.parse(readFileSync(new URL('../../selection/tests/label_selectors.json', import.meta.url), 'utf8'));

test('the shared cases select and reject as the host does', () => {
  assert.ok(CASES.matching.length >= 9);
  for (const c of CASES.matching) {
    const selector = LabelSelector.fromJSON(c.selector, CASES.field);
    for (const labels of c.selects) assert.ok(selector.matches(labels), JSON.stringify([c.selector, labels]));
    for (const labels of c.rejects) assert.ok(!selector.matches(labels), JSON.stringify([c.selector, labels]));
  }
});

test("the shared cases are refused in the host's words", () => {
  assert.ok(CASES.refused.length >= 25);
  for (const c of CASES.refused) {
    assert.throws(
      () => LabelSelector.fromJSON(c.selector, CASES.field),
      (e) => {
        assert.ok(e instanceof SelectorError, String(e));
        assert.deepEqual({ field: e.field, problem: e.problem }, { field: c.error_field, problem: c.problem });
        return true;
      },
      JSON.stringify(c.selector),
    );
  }
});

const expression = (key, operator, values) =>
  LabelSelector.fromJSON({ matchExpressions: [values === undefined ? { key, operator } : { key, operator, values }] });

test('In needs one of the values', () => {
  const s = expression('tier', 'In', ['front', 'back']);
  assert.ok(s.matches({ tier: 'front' }));
  assert.ok(s.matches({ tier: 'back', other: 'x' }));
  assert.ok(!s.matches({ tier: 'db' }));
  assert.ok(!s.matches({}));
});

test('NotIn holds without the label', () => {
  const s = expression('track', 'NotIn', ['canary']);
  assert.ok(s.matches({ track: 'stable' }));
  assert.ok(s.matches({}));
  assert.ok(s.matches(undefined));
  assert.ok(!s.matches({ track: 'canary' }));
});

test('Exists and DoesNotExist look at the key only', () => {
  assert.ok(expression('team', 'Exists').matches({ team: '' }));
  assert.ok(!expression('team', 'Exists').matches({ other: 'team' }));
  assert.ok(!expression('constructor', 'Exists').matches({}));
  assert.ok(expression('legacy', 'DoesNotExist').matches({ team: 'a' }));
  assert.ok(expression('legacy', 'DoesNotExist', []).matches(null));
  assert.ok(!expression('legacy', 'DoesNotExist').matches({ legacy: '' }));
});

test('matchLabels and matchExpressions must all hold', () => {
  const s = LabelSelector.fromJSON(
    {
      matchLabels: { app: 'web' },
      matchExpressions: [
        { key: 'track', operator: 'NotIn', values: ['canary'] },
        { key: 'tier', operator: 'In', values: ['front', 'back'] },
        { key: 'legacy', operator: 'DoesNotExist' },
        { key: 'team', operator: 'Exists' },
      ],
    },
    FIELD,
  );
  const base = { app: 'web', tier: 'front', team: 'a' };
  assert.ok(s.matches(base));
  assert.ok(s.matches({ ...base, track: 'stable' }));
  assert.ok(!s.matches({ ...base, track: 'canary' }));
  assert.ok(!s.matches({ ...base, legacy: '' }));
  assert.ok(!s.matches({ ...base, app: 'api' }));
  assert.ok(!s.matches({ app: 'web', tier: 'front' }));
  assert.ok(!s.matches(undefined));
});

test('the empty selector matches everything', () => {
  for (const empty of [{}, { matchLabels: null, matchExpressions: null }, { matchLabels: {}, matchExpressions: [] }]) {
    const s = LabelSelector.fromJSON(empty);
    assert.ok(s.matches({ any: 'thing' }));
    assert.ok(s.matches(undefined));
  }
  assert.ok(new LabelSelector().matches({ any: 'thing' }));
});

/** The SelectorError `selector` (at FIELD) is refused with, as [field, problem]. */
function refusal(selector, field = FIELD) {
  try {
    LabelSelector.fromJSON(selector, field);
  } catch (err) {
    assert.ok(err instanceof SelectorError);
    assert.equal(err.message, `${err.field}: ${err.problem}`);
    return [err.field, err.problem];
  }
  assert.fail(`${JSON.stringify(selector)} was accepted`);
}

test('invalid selectors name the field', () => {
  const at = `${FIELD}.matchExpressions`;
  const notASelector = 'is not a label selector (an object with matchLabels and/or matchExpressions)';
  const cases = [
    [[{ key: 't', operator: 'Equals', values: ['x'] }], `${at}[0].operator`, '"Equals" is not In, NotIn, Exists or DoesNotExist'],
    [[{ key: 't', operator: 'in', values: ['x'] }], `${at}[0].operator`, '"in" is not In, NotIn, Exists or DoesNotExist'],
    [[{ key: 't' }], `${at}[0].operator`, '"" is not In, NotIn, Exists or DoesNotExist'],
    [[{ key: 't', operator: 'Exists' }, { key: 't', operator: 'In' }], `${at}[1].values`, 'must not be empty for operator In'],
    [[{ key: 't', operator: 'NotIn', values: [] }], `${at}[0].values`, 'must not be empty for operator NotIn'],
    [[{ key: 't', operator: 'Exists', values: ['x'] }], `${at}[0].values`, 'must be empty for operator Exists'],
    [[{ key: 't', operator: 'DoesNotExist', values: ['x'] }], `${at}[0].values`, 'must be empty for operator DoesNotExist'],
    [[{ operator: 'Exists' }], `${at}[0].key`, 'must not be empty'],
  ];
  for (const [matchExpressions, field, problem] of cases) {
    assert.deepEqual(refusal({ matchExpressions }), [field, problem]);
  }
  assert.deepEqual(refusal('app=web'), [FIELD, notASelector]);
  assert.deepEqual(refusal(null), [FIELD, notASelector]);
  assert.deepEqual(refusal([]), [FIELD, notASelector]);
});

test('malformed parts are reported as the host parses them', () => {
  const cases = [
    [{ matchLabels: { a: 1 } }, 'matchLabels', 'invalid type: integer `1`, expected a string'],
    [{ matchLabels: { b: 'x', a: null } }, 'matchLabels', 'invalid type: null, expected a string'],
    [{ matchLabels: ['a'] }, 'matchLabels', 'invalid type: sequence, expected a map'],
    [{ matchExpressions: { key: 'a' } }, 'matchExpressions', 'invalid type: map, expected a sequence'],
    [{ matchExpressions: ['a'] }, 'matchExpressions', 'invalid type: string "a", expected LabelSelectorRequirement'],
    [{ matchExpressions: [{ key: true }] }, 'matchExpressions', 'invalid type: boolean `true`, expected a string'],
    [
      { matchExpressions: [{ key: 'a', operator: 'In', values: [1.5] }] },
      'matchExpressions',
      'invalid type: floating point `1.5`, expected a string',
    ],
  ];
  for (const [selector, field, problem] of cases) {
    assert.deepEqual(refusal(selector, 'selector'), [`selector.${field}`, problem]);
  }
});

test('every entry is parsed before any is checked', () => {
  const [field] = refusal({ matchExpressions: [{ key: 'a', operator: 'Equals' }, { key: 7 }] }, 'selector');
  assert.equal(field, 'selector.matchExpressions');
});

test('strings are quoted as Rust debug-formats them', () => {
  assert.deepEqual(refusal({ matchExpressions: [{ key: 't', operator: 'a"b\\c\nd\x01é', values: ['x'] }] }), [
    `${FIELD}.matchExpressions[0].operator`,
    '"a\\"b\\\\c\\nd\\u{1}é" is not In, NotIn, Exists or DoesNotExist',
  ]);
});

/** Selects its ConfigMaps itself, by the selector in `spec.pick`. */
class Picking extends PhaseWorker {
  sync(ctx, resource, inputs) {
    let selector;
    try {
      selector = LabelSelector.fromJSON(resource.spec.pick, 'spec.pick');
    } catch (err) {
      if (err instanceof SelectorError) throw WorkerError.fatal(err.message);
      throw err;
    }
    const picked = inputs
      .list('configmaps')
      .filter((c) => selector.matches(c.metadata.labels))
      .map((c) => c.metadata.name);
    return Outcome.next('Done').status({ picked });
  }
}

const configmap = (name, labels, namespace) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, ...(namespace && { namespace }), ...(labels && { labels }) },
});

test('a worker selecting by itself', () => {
  const configmaps = [configmap('a', { pick: 'yes' }), configmap('b', { pick: 'no' }), configmap('c')];
  const report = new SyncTest({ spec: { pick: { matchLabels: { pick: 'yes' } } } })
    .input('configmaps', configmaps)
    .run(new Picking());
  assert.deepEqual(report.status, { picked: ['a'] });
  const failed = new SyncTest({ spec: {} }).input('configmaps', configmaps).fail(new Picking());
  assert.ok(failed.error.isFatal);
  assert.equal(
    failed.error.message,
    'spec.pick: is not a label selector (an object with matchLabels and/or matchExpressions)',
  );
});

/** Takes every ConfigMap it is given, as a worker whose input the host selects. */
class TakingAll extends PhaseWorker {
  sync(ctx, resource, inputs) {
    return Outcome.next('Done').status({ given: inputs.list('configmaps').map((c) => c.metadata.name) });
  }
}

test('tests get what the host selects', () => {
  const resource = { metadata: { name: 'r', namespace: 'default' }, spec: { pick: { matchLabels: { pick: 'yes' } } } };
  const configmaps = [
    configmap('a', { pick: 'yes' }, 'default'),
    configmap('b', { pick: 'no' }, 'default'),
    configmap('c', undefined, 'default'),
    configmap('elsewhere', { pick: 'yes' }, 'prod'),
  ];
  assert.deepEqual(selectedBy(resource, 'spec.pick', configmaps).map((c) => c.metadata.name), ['a']);
  const report = new SyncTest(resource).inputSelected('configmaps', 'spec.pick', configmaps).run(new TakingAll());
  assert.deepEqual(report.status, { given: ['a'] });
});

test('tests cannot select where the host would refuse', () => {
  assert.throws(() => selectedBy({ spec: {} }, 'spec.pick', []), { name: 'SelectorError', message: 'spec.pick: is not set' });
  assert.throws(
    () =>
      new SyncTest({ spec: { pick: { matchExpressions: [{ key: 'a', operator: 'In' }] } } }).inputSelected('c', 'spec.pick', []),
    { name: 'SelectorError', message: 'spec.pick.matchExpressions[0].values: must not be empty for operator In' },
  );
});
