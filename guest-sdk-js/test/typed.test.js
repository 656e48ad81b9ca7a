// The runtime of the typed API `wasmpilot generate` writes (InputsView, PhaseOutcome,
// TypedPhaseWorker): a phase's outcome builder, inputs view and worker base class, as the
// generated subclasses in shared/phases.js use them.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { InputsView, Outcome, PhaseOutcome, TypedPhaseWorker, WorkerError } from '../src/index.js';
import { SyncTest } from '../src/testing.js';

class SyncingInputs extends InputsView {
  deployments(type) {
    return this.untyped.list('deployments', type);
  }
}

class SyncingOutcome extends PhaseOutcome {
  static phase = 'Syncing';
  static allowed = Object.freeze(['Syncing', 'Ready']);
  static ready() {
    return this.move('Ready');
  }
  static initializing() {
    return this.move('Initializing');
  }
  gateway(object) {
    return this.outputOfKind('example.io/v1', 'Gateway', object);
  }
}

class SyncingWorker extends TypedPhaseWorker {
  static inputsView = SyncingInputs;
}

class Syncing extends SyncingWorker {
  decide(ctx, resource, inputs) {
    const names = inputs.deployments().map((d) => d.metadata.name);
    return SyncingOutcome.ready().gateway({ metadata: { name: 'g' } }).status({ seen: names });
  }
}

test('a typed worker runs as any phase worker', () => {
  const report = new SyncTest({ metadata: { name: 'r' } })
    .phase('Syncing')
    .input('deployments', [{ metadata: { name: 'web' } }])
    .run(new Syncing());
  assert.equal(report.nextPhase, 'Ready');
  assert.deepEqual(report.status, { seen: ['web'] });
  assert.deepEqual(report.outputs, [{ apiVersion: 'example.io/v1', kind: 'Gateway', metadata: { name: 'g' } }]);
});

test('stay, and the kind of an output', () => {
  const stayed = SyncingOutcome.stay();
  assert.equal(stayed.nextPhase, 'Syncing');
  assert.equal(stayed.currentPhase, 'Syncing');
  assert.throws(
    () => SyncingOutcome.ready().gateway({ kind: 'Service', metadata: { name: 's' } }),
    (err) => err instanceof WorkerError && err.message.includes('has kind `Service`, but this builder takes example.io/v1 Gateway'),
  );
});

test('an undeclared move is fatal at run time too', () => {
  assert.throws(
    () => SyncingOutcome.initializing(),
    (err) => err instanceof WorkerError && err.message === '`Syncing` may not move to `Initializing`: operator.yaml allows Syncing, Ready',
  );
});

test("decide must return its phase's outcome", () => {
  class Untyped extends SyncingWorker {
    decide() {
      return Outcome.next('Ready');
    }
  }
  const failed = new SyncTest({ metadata: { name: 'r' } }).phase('Syncing').emptyInput('deployments').fail(new Untyped());
  assert.match(String(failed.error ?? failed), /Untyped\.decide returned Outcome, not its phase's generated outcome/);
});
