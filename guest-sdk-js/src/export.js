// The worker base classes, the one function each export runs, and the component exports.
//
// `runSync` and `runFinalize` take and return the WIT records (JSON strings inside), so the
// component export and `@wasmpilot/guest/testing` run the same code.
import { hostFinalizerInputs } from '#finalizer-inputs';
import '#sandbox-globals';
import { Context } from './context.js';
import { ErrorKind, WorkerError } from './errors.js';
import { identity, Inputs, parseAs, typeName } from './inputs.js';
import { describeThrown, serializeFor } from './json.js';
import { precompiled } from './patterns.js';

/** The phase name a finalizer worker's `Context.phase` reports. */
export const FINALIZER_PHASE = 'finalizer';

/** Decides one phase of a resource. Export it from the component's module with
 * `export const phaseWorker = exportPhase(MyWorker)`; the class must construct without arguments.
 *
 *     class Initializing extends PhaseWorker {
 *       sync(ctx, resource, inputs) {
 *         ctx.info('starting');
 *         return Outcome.next('Syncing');
 *       }
 *     }
 *     export const phaseWorker = exportPhase(Initializing);
 */
export class PhaseWorker {
  /** What the resource is parsed into: a class with a static `fromJSON(value)` (what it throws
   * becomes a fatal "the resource (…) is not a valid <class>: …"), or undefined for plain JSON. */
  static resourceType = undefined;

  /** Decides the phase: returns an `Outcome`. Throw `WorkerError.retryable(…)` to be retried
   * with backoff, `WorkerError.fatal(…)` to stop until the resource or an input changes. */
  sync(ctx, resource, inputs) {
    throw new Error(`${this.constructor.name} does not implement sync(ctx, resource, inputs)`);
  }
}

/** Cleans up when a resource carrying the operator's finalizer is deleted. Export it with
 * `export const finalizerWorker = exportFinalizer(MyFinalizer)` (world `finalizer`). */
export class FinalizerWorker {
  /** As `PhaseWorker.resourceType`. */
  static resourceType = undefined;

  /** Cleans up: returns `Finalized.done()` to let the deletion proceed. `inputs`: the
   * finalizer's declared inputs (`spec.finalizer.inputs`), selected as for a phase. Errors as
   * for `PhaseWorker.sync`. */
  finalize(ctx, resource, inputs) {
    throw new Error(`${this.constructor.name} does not implement finalize(ctx, resource, inputs)`);
  }
}

/** Runs a phase worker on a request: parse, decide, serialize. Returns `{ result }` or
 * `{ error }` (a WorkerError), with the log records kept natively (none in a component). */
export function runSync(worker, request) {
  let now;
  try {
    now = parseNow(request.now);
  } catch (error) {
    return { error: asWorkerError(error), logs: [] };
  }
  const ctx = new Context(request.operator, request.phase, now);
  try {
    const resource = parseResource(worker.constructor.resourceType, request.resource);
    const inputs = new Inputs(request.inputs.map(({ name, objects }) => [name, objects]));
    const outcome = worker.sync(ctx, resource, inputs);
    const result = {
      nextPhase: outcome.nextPhase,
      statusInfo: statusJson(outcome.statusPatch),
      outputs: outcome.outputJson,
      requeueAfterMs: optionalMillis(outcome.requeueAfterMs),
    };
    return { result, logs: ctx.takeLogs() };
  } catch (error) {
    return { error: asWorkerError(error), logs: ctx.takeLogs() };
  }
}

/** Runs a finalizer worker on a request and the finalizer's inputs (WIT `named-objects`
 * records); see `runSync`. */
export function runFinalize(worker, request, inputs = []) {
  let now;
  try {
    now = parseNow(request.now);
  } catch (error) {
    return { error: asWorkerError(error), logs: [] };
  }
  const ctx = new Context(request.operator, FINALIZER_PHASE, now);
  try {
    const resource = parseResource(worker.constructor.resourceType, request.resource);
    const handed = new Inputs(inputs.map(({ name, objects }) => [name, objects]));
    const finalized = worker.finalize(ctx, resource, handed);
    const result = {
      done: finalized.isDone,
      statusInfo: statusJson(finalized.statusPatch),
      requeueAfterMs: optionalMillis(finalized.requeueAfterMs),
    };
    return { result, logs: ctx.takeLogs() };
  } catch (error) {
    return { error: asWorkerError(error), logs: ctx.takeLogs() };
  }
}

/** The `phase-worker` export componentize-js calls: `export const phaseWorker = exportPhase(W)`.
 * Each call runs a `new W()`. */
export function exportPhase(workerClass) {
  return {
    sync(request) {
      const { result, error } = reportingBugs(() => runSync(new workerClass(), request));
      if (error) throw wireError(error);
      return result;
    },
  };
}

/** The `finalizer-worker` export: `export const finalizerWorker = exportFinalizer(W)`. */
export function exportFinalizer(workerClass) {
  return {
    finalize(request) {
      // Imported by the finalizer world only: bundles for it resolve `#finalizer-inputs` to
      // the host's import (deploy/local/guest-toolchains/bundle-js.mjs), others to none.
      const inputs = hostFinalizerInputs ? hostFinalizerInputs() : [];
      const { result, error } = reportingBugs(() => runFinalize(new workerClass(), request, inputs));
      if (error) throw wireError(error);
      return result;
    },
  };
}

/** Runs `call`; what it throws is a bug in the worker (a WorkerError is returned, not thrown),
 * which traps the component: the engine writes the error's message and where it was thrown to
 * stderr, which the host puts in the worker's Condition, after the line written here naming its
 * class. A thrown value that is no Error is thrown as one, naming the value. */
function reportingBugs(call) {
  try {
    return call();
  } catch (error) {
    if (!(error instanceof Error)) throw new Error(`the worker threw ${describeThrown(error)}`);
    console.error(`the worker threw ${error.name}:`);
    throw error;
  }
}

/** What an export throws for a WIT `result` error: the bindings send its `payload`, the
 * `worker-error` variant. */
function wireError(error) {
  const wire = new Error(error.message);
  wire.payload = { tag: error.kind === ErrorKind.RETRYABLE ? 'retryable' : 'fatal', val: error.message };
  return wire;
}

/** A worker's WorkerError passes through; anything else thrown is a bug in the worker, and
 * is rethrown (the component traps, as a Rust worker's panic does). */
function asWorkerError(error) {
  if (error instanceof WorkerError) return error;
  throw error;
}

const RFC_3339 = precompiled(
  /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/,
  '1970-01-01T00:00:00Z',
);

function parseNow(now) {
  const parsed = new Date(now);
  if (!RFC_3339.test(now) || Number.isNaN(parsed.getTime())) {
    throw WorkerError.fatal(`the host's clock \`${now}\` is not an RFC 3339 timestamp`);
  }
  return parsed;
}

function parseResource(type, resourceJson) {
  try {
    return parseAs(type, resourceJson);
  } catch (err) {
    let id;
    try {
      id = identity(JSON.parse(resourceJson));
    } catch {
      id = undefined;
    }
    throw WorkerError.fatal(`the resource${id ? ` (${id})` : ''} is not a valid ${typeName(type)}: ${err.message}`);
  }
}

function statusJson(status) {
  if (status === undefined || Object.keys(status).length === 0) return undefined;
  return serializeFor('the status', status);
}

/** Milliseconds as the WIT `u64` (a BigInt in the bindings), or undefined. */
function optionalMillis(ms) {
  return ms === undefined ? undefined : BigInt(Math.max(0, Math.floor(ms)));
}
