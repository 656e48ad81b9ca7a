// What every generated typed API shares, so `wasmpilot generate` writes only what an operator
// declares (as the Rust SDK's `phase_api!`): the inputs view, the outcome builder and the worker
// base class a phase's generated `<Phase>Inputs`, `<Phase>Outcome` and `<Phase>Worker` extend.
// Their types are in index.d.ts; the generated shared/phases.d.ts narrows them per phase, so
// `tsc --noEmit` (checkJs) refuses an output kind or a next phase the phase does not declare.
import { WorkerError } from './errors.js';
import { PhaseWorker } from './export.js';
import { Outcome } from './outcome.js';

/** The typed view of a phase's inputs; the generated `<Phase>Inputs` add one accessor per
 * declared input and metric query. */
export class InputsView {
  constructor(inputs) {
    /** The untyped inputs, for what the accessors do not cover. */
    this.untyped = inputs;
  }
}

/** What a phase decided, built through its generated `<Phase>Outcome`: one static method per
 * phase it may move to (and `next`, `stay`), one method per declared output kind. */
export class PhaseOutcome {
  /** The phase this outcome is decided in (set by the generated subclass). */
  static phase = '';
  /** The phases it may move to (set by the generated subclass). */
  static allowed = [];

  constructor(outcome) {
    /** The SDK's untyped decision (what `sync` returns). */
    this.untyped = outcome;
    /** The phase this outcome is decided in. */
    this.currentPhase = new.target.phase;
  }

  static move(phase) {
    if (!this.allowed.includes(phase)) {
      const allowed = this.allowed.join(', ') || 'none';
      throw WorkerError.fatal(`\`${this.phase}\` may not move to \`${phase}\`: operator.yaml allows ${allowed}`);
    }
    return new this(Outcome.next(phase));
  }

  /** Stay in this phase. */
  static stay() {
    return this.move(this.phase);
  }

  /** Merge `status` into the resource's `.status` (see `Outcome.status`). */
  status(status) {
    this.untyped.status(status);
    return this;
  }

  /** Run this resource again after `ms` milliseconds. */
  requeueAfter(ms) {
    this.untyped.requeueAfter(ms);
    return this;
  }

  /** The phase this outcome moves to. */
  get nextPhase() {
    return this.untyped.nextPhase;
  }

  /** Adds `object` as an output of `apiVersion` `kind`: both filled in when absent or empty, a
   * fatal WorkerError when it names another (as the Rust SDK's `output_of_kind`). */
  outputOfKind(apiVersion, kind, object) {
    if (object !== null && typeof object === 'object' && object.apiVersion === apiVersion && object.kind === kind) {
      // Already of this kind (what the generated builders get): added as it is.
      this.untyped.output(object);
      return this;
    }
    const index = this.untyped.outputCount;
    if (object === null || typeof object !== 'object' || Array.isArray(object)) {
      this.untyped.output(object); // throws the SDK's error for a non-object
      return this;
    }
    const filled = { ...object };
    for (const [field, want] of [
      ['apiVersion', apiVersion],
      ['kind', kind],
    ]) {
      const have = filled[field];
      if (typeof have !== 'string' || have === '') {
        filled[field] = want;
      } else if (have !== want) {
        throw WorkerError.fatal(
          `output #${index} has ${field} \`${have.slice(0, 200)}\`, but this builder takes ${apiVersion} ${kind}`,
        );
      }
    }
    this.untyped.output(filled);
    return this;
  }

  /** `outputOfKind` for each of `objects`. */
  outputsOfKind(apiVersion, kind, objects) {
    for (const object of objects) this.outputOfKind(apiVersion, kind, object);
    return this;
  }
}

/** A phase worker written against its phase's generated inputs and outcome: subclass the
 * generated `<Phase>Worker` and implement `decide(ctx, resource, inputs)`. Export and test it as
 * any `PhaseWorker` (`exportPhase`, `SyncTest.run`). */
export class TypedPhaseWorker extends PhaseWorker {
  /** The generated `<Phase>Inputs` handed to `decide`. */
  static inputsView = InputsView;

  /** Runs `decide` with the typed inputs and returns its untyped outcome. */
  sync(ctx, resource, inputs) {
    const outcome = this.decide(ctx, resource, new this.constructor.inputsView(inputs));
    if (!(outcome instanceof PhaseOutcome)) {
      const got = outcome?.constructor?.name ?? typeof outcome;
      throw WorkerError.fatal(`${this.constructor.name}.decide returned ${got}, not its phase's generated outcome`);
    }
    return outcome.untyped;
  }

  /** Decides the phase through its typed outcome. */
  decide(ctx, resource, inputs) {
    throw new Error(`${this.constructor.name} does not implement decide(ctx, resource, inputs)`);
  }
}
