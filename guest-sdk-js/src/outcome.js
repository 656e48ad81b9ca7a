// What a worker decided: the next phase, a status patch, objects to apply, when to run again.
import { WorkerError } from './errors.js';
import { jsonType, serializeFor } from './json.js';

/** The `.status` fields the host writes itself; removed from a worker's status patch so a
 * worker cannot fight the host over them (see `HostStatus`). */
export const HOST_STATUS_FIELDS = Object.freeze(['phase', 'observedGeneration', 'conditions', 'moduleDigest']);

/** What a phase worker decided.
 *
 *     return Outcome.next('Ready')
 *       .status({ syncedDeployments: ['web'] })
 *       .output(service)
 *       .requeueAfter(60_000);
 */
export class Outcome {
  /** The objects to apply, each serialized when it was added (what the host gets). */
  #outputJson = [];

  constructor(nextPhase) {
    this.nextPhase = nextPhase;
    /** The status patch, or undefined. */
    this.statusPatch = undefined;
    /** Milliseconds, or undefined. */
    this.requeueAfterMs = undefined;
  }

  /** The objects to apply, as JSON values: a fresh copy of what was added, parsed again. */
  get outputs() {
    return this.#outputJson.map((text) => JSON.parse(text));
  }

  /** The objects to apply as the JSON text the host gets, one string each. */
  get outputJson() {
    return [...this.#outputJson];
  }

  /** How many objects were added. */
  get outputCount() {
    return this.#outputJson.length;
  }

  /** Move to `phase` (which may be the current one) with no status change and no outputs. */
  static next(phase) {
    return new Outcome(phase);
  }

  /** Merge `status` into the resource's `.status` (JSON merge patch: null removes a field).
   * The fields the host owns (`phase`, `observedGeneration`, `conditions`, `moduleDigest`)
   * are dropped. Throws a fatal WorkerError if `status` is not an object. Calling it again
   * merges into the earlier patch. */
  status(status) {
    this.statusPatch = { ...(this.statusPatch ?? {}), ...statusPatch(status) };
    return this;
  }

  /** Add one object for the host to server-side apply, owned by the resource. The host must be
   * told about its kind in the phase's `outputs`. Throws a fatal WorkerError if it is not an
   * object with `apiVersion`, `kind` and `metadata.name`. */
  output(object) {
    this.#outputJson.push(outputJson(object, this.#outputJson.length));
    return this;
  }

  /** Add several objects; see `output`. */
  outputsFrom(objects) {
    for (const object of objects) this.output(object);
    return this;
  }

  /** Run this resource again after `ms` milliseconds (instead of the operator's resync interval). */
  requeueAfter(ms) {
    this.requeueAfterMs = ms;
    return this;
  }
}

/** What a finalizer worker decided.
 *
 *     const stillBusy = Finalized.pending(10_000).status({ cleanup: 'waiting' });
 *     const finished = Finalized.done();
 */
export class Finalized {
  constructor(done, requeueAfterMs) {
    this.isDone = done;
    this.statusPatch = undefined;
    this.requeueAfterMs = requeueAfterMs;
  }

  /** Cleanup is finished: the host removes its finalizer and the deletion proceeds. */
  static done() {
    return new Finalized(true, undefined);
  }

  /** Cleanup is not finished: run the finalizer again after `ms` milliseconds. */
  static pending(ms) {
    return new Finalized(false, ms);
  }

  /** Merge `status` into `.status` while the resource is terminating; see `Outcome.status`
   * (a second call replaces the first, as in the Rust SDK). */
  status(status) {
    this.statusPatch = statusPatch(status);
    return this;
  }
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function statusPatch(status) {
  if (!isObject(status)) {
    throw WorkerError.fatal(`the status must serialize to a JSON object, not ${jsonType(status)}`);
  }
  return Object.fromEntries(Object.entries(status).filter(([key]) => !HOST_STATUS_FIELDS.includes(key)));
}

/** Whether `value` is a non-empty string. */
function isText(value) {
  return typeof value === 'string' && value !== '';
}

/** The error for an output without `apiVersion`, `kind` or `metadata.name` (each a non-empty
 * string), naming what it has. */
function missingIdentity(object, index) {
  const text = (value, key) => (isObject(value) && isText(value[key]) ? value[key] : undefined);
  const kind = text(object, 'kind');
  const name = text(object.metadata, 'name');
  const missing = [
    ['apiVersion', text(object, 'apiVersion')],
    ['kind', kind],
    ['metadata.name', name],
  ]
    .filter(([, value]) => value === undefined)
    .map(([fieldName]) => fieldName);
  const what = [kind, name].filter((p) => p !== undefined).join(' ');
  return WorkerError.fatal(`output #${index}${what ? ` (${what})` : ''} has no ${missing.join(', no ')}`);
}

/** `object` checked as a Kubernetes object and serialized: the text is the decision, so later
 * changes to `object` do not change it (one serialization, no copy parsed back). */
function outputJson(object, index) {
  if (!isObject(object)) {
    throw WorkerError.fatal(`output #${index} must be a Kubernetes object, not ${jsonType(object)}`);
  }
  const name = isObject(object.metadata) ? object.metadata.name : undefined;
  if (!(isText(object.apiVersion) && isText(object.kind) && isText(name))) throw missingIdentity(object, index);
  return serializeFor(`output #${index}`, object);
}
