// Run workers natively under `node --test`, through the same code as the component export.
//
// A `SyncTest` builds the request the host would send (the resource and each input serialized
// to JSON strings, a fixed clock), hands it to the function the component's
// `phase-worker.sync` export calls, and parses the JSON that comes back into a report to
// assert on. Log lines are kept instead of going to the host.
//
//     const report = new SyncTest(route).phase('Syncing')
//       .input('deployments', objectsFromYaml(readFileSync(path, 'utf8')))
//       .run(new Syncing());
//     assert.equal(report.nextPhase, 'Ready');
//
// For an input the host selects by a selector the resource holds (`selectorFrom`),
// `inputSelected` keeps only the objects the host would hand over.
import { parseAllDocuments } from 'yaml';

import { WorkerError } from './errors.js';
import { runFinalize, runSync } from './export.js';
import { toJson } from './json.js';
import { withSandboxGlobals } from './sandbox-globals.js';
import { LabelSelector, SelectorError } from './selector.js';

/** The clock a test request carries unless `SyncTest.now` sets another. */
export const DEFAULT_NOW = '2025-01-01T00:00:00Z';

/** The operator name a test request carries unless `SyncTest.operator` sets another. */
export const DEFAULT_OPERATOR = 'test-operator';

/** A run that ended in a WorkerError, with the log lines written before it. */
export class FailedRun extends Error {
  constructor(error, logs) {
    super([error.toString(), ...logs.map((record) => `  log: ${record}`)].join('\n'));
    this.name = 'FailedRun';
    this.error = error;
    this.logs = logs;
  }
}

/** What a phase worker returned, parsed back from the JSON the host would receive. */
export class SyncReport {
  constructor(result, logs) {
    this.nextPhase = result.nextPhase;
    /** The status patch (host-owned fields already dropped), or undefined. */
    this.status = parseBack(result.statusInfo);
    /** The objects the host would apply, in the order the worker returned them. */
    this.outputs = result.outputs.map((o) => JSON.parse(o));
    /** Milliseconds, or undefined. */
    this.requeueAfterMs = optionalNumber(result.requeueAfterMs);
    this.logs = logs;
  }

  /** The outputs whose `kind` is `kind`. */
  outputsOfKind(kind) {
    return this.outputs.filter((o) => o.kind === kind);
  }

  /** The output of `kind` named `name`. */
  output(kind, name) {
    return this.outputsOfKind(kind).find((o) => o.metadata?.name === name);
  }

  /** Whether a log line's message contains `text`. */
  logged(text) {
    return this.logs.some((record) => record.message.includes(text));
  }
}

/** A phase worker run to set up: resource, inputs, phase, clock. The phase defaults to the
 * resource's `.status.phase`, or `""` if it has none. */
export class SyncTest {
  #operator = DEFAULT_OPERATOR;
  #phase;
  #resource;
  #inputs = [];
  #now = DEFAULT_NOW;

  constructor(resource) {
    const phase = resource?.status?.phase;
    this.#phase = typeof phase === 'string' ? phase : '';
    this.#resource = toJson(resource);
  }

  operator(name) {
    this.#operator = name;
    return this;
  }

  /** The phase being run, as the host would pass it. */
  phase(name) {
    this.#phase = name;
    return this;
  }

  /** The host's clock, RFC 3339. Not validated here: a bad value reaches the worker's export
   * as it would from a broken host. */
  now(rfc3339) {
    this.#now = rfc3339;
    return this;
  }

  /** Adds objects (e.g. from `objectsFromYaml`) to input `name`, declaring it if new. */
  input(name, objects) {
    this.#slot(name).push(...[...objects].map(toJson));
    return this;
  }

  /** Adds to input `name` the objects the host would hand over for an input declared with
   * `selectorFrom: <selectorField>` (e.g. `spec.deploymentSelector`); see `selectedBy`. The
   * other objects are left out, as the host leaves them out. */
  inputSelected(name, selectorField, objects) {
    return this.input(name, selectedBy(JSON.parse(this.#resource), selectorField, objects));
  }

  /** Declares input `name` with no objects (as when nothing matches in the cluster). */
  emptyInput(name) {
    this.#slot(name);
    return this;
  }

  /** Adds objects to input `name` as raw JSON strings, passed on unchecked (to test how a
   * worker handles objects that do not parse). */
  inputJson(name, objects) {
    this.#slot(name).push(...objects);
    return this;
  }

  #slot(name) {
    let slot = this.#inputs.find(([n]) => n === name);
    if (!slot) {
      slot = [name, []];
      this.#inputs.push(slot);
    }
    return slot[1];
  }

  /** The request the host would send (the WIT `sync-request` record). */
  request() {
    return {
      operator: this.#operator,
      phase: this.#phase,
      resource: this.#resource,
      inputs: this.#inputs.map(([name, objects]) => ({ name, objects: [...objects] })),
      now: this.#now,
    };
  }

  /** Runs `worker` through the component export's code path. Throws a FailedRun with the
   * worker's WorkerError and the log lines written before it. */
  run(worker) {
    const { result, error, logs } = withSandboxGlobals(() => runSync(worker, this.request()));
    if (error) throw new FailedRun(error, logs);
    return new SyncReport(result, logs);
  }

  /** Runs `worker` expecting a WorkerError; returns the FailedRun. Throws if it decided. */
  fail(worker) {
    const { result, error, logs } = withSandboxGlobals(() => runSync(worker, this.request()));
    if (!error) throw new Error(`expected a WorkerError, the worker decided ${JSON.stringify(result)}`);
    return new FailedRun(error, logs);
  }
}

/** A finalizer worker run to set up; see `SyncTest`. */
export class FinalizeTest {
  #operator = DEFAULT_OPERATOR;
  #resource;
  #now = DEFAULT_NOW;
  #inputs = [];

  constructor(resource) {
    this.#resource = toJson(resource);
  }

  /** Adds objects to the finalizer's input `name` (`spec.finalizer.inputs`), declaring it if
   * new; see `SyncTest.input`. */
  input(name, objects) {
    this.#slot(name).push(...[...objects].map(toJson));
    return this;
  }

  /** As `SyncTest.inputSelected`, for the finalizer's input `name`. */
  inputSelected(name, selectorField, objects) {
    return this.input(name, selectedBy(JSON.parse(this.#resource), selectorField, objects));
  }

  /** Declares the finalizer's input `name` with no objects. */
  emptyInput(name) {
    this.#slot(name);
    return this;
  }

  #slot(name) {
    let slot = this.#inputs.find(([n]) => n === name);
    if (!slot) {
      slot = [name, []];
      this.#inputs.push(slot);
    }
    return slot[1];
  }

  operator(name) {
    this.#operator = name;
    return this;
  }

  now(rfc3339) {
    this.#now = rfc3339;
    return this;
  }

  /** Runs `worker` through the component export's code path; throws a FailedRun on an error.
   * Returns `{ done, status, requeueAfterMs, logs }`. */
  run(worker) {
    const request = { operator: this.#operator, resource: this.#resource, now: this.#now };
    const inputs = this.#inputs.map(([name, objects]) => ({ name, objects: [...objects] }));
    const { result, error, logs } = withSandboxGlobals(() => runFinalize(worker, request, inputs));
    if (error) throw new FailedRun(error, logs);
    return {
      done: result.done,
      status: parseBack(result.statusInfo),
      requeueAfterMs: optionalNumber(result.requeueAfterMs),
      logs,
    };
  }
}

/** The `objects` the host hands a worker for an input declared with
 * `selectorFrom: <selectorField>`: those in the resource's namespace whose labels match the
 * label selector at that field of the resource, in the order given.
 *
 * Throws a SelectorError where the host would report `InvalidSelector` instead of running the
 * worker: no selector at `selectorField`, or an invalid one. */
export function selectedBy(resource, selectorField, objects) {
  const selectorJson = fieldAt(resource, selectorField);
  if (selectorJson === undefined || selectorJson === null) throw new SelectorError(selectorField, 'is not set');
  const selector = LabelSelector.fromJSON(selectorJson, selectorField);
  const namespace = fieldAt(resource, 'metadata.namespace');
  const inNamespace = (object) => {
    const found = fieldAt(object, 'metadata.namespace');
    return namespace === undefined || found === undefined || found === namespace;
  };
  return [...objects].filter((o) => inNamespace(o) && selector.matches(fieldAt(o, 'metadata.labels')));
}

/** The value at a dotted field path (`spec.deploymentSelector`), undefined where there is none. */
function fieldAt(value, path) {
  const has = (found, key) => found !== null && typeof found === 'object' && !Array.isArray(found) && Object.hasOwn(found, key);
  return path.split('.').reduce((found, key) => (has(found, key) ? (found[key] ?? undefined) : undefined), value);
}

/** Parses a multi-document YAML string (`---` separated, e.g. a fixture file) into objects.
 * Empty documents are skipped and the items of a `kind: List` are returned one by one.
 * Throws a fatal WorkerError naming the document that does not parse. */
export function objectsFromYaml(yamlText) {
  const objects = [];
  parseAllDocuments(yamlText).forEach((document, index) => {
    if (document.errors.length) {
      throw WorkerError.fatal(`YAML document #${index}: ${document.errors[0].message}`);
    }
    const value = document.toJS();
    if (value === null || value === undefined) return;
    if (value.kind === 'List') objects.push(...(value.items ?? []));
    else objects.push(value);
  });
  return objects;
}

/** The SDK wrote this JSON itself; not parsing back is a bug in the SDK. */
function parseBack(jsonText) {
  return jsonText === undefined ? undefined : JSON.parse(jsonText);
}

function optionalNumber(ms) {
  return ms === undefined ? undefined : Number(ms);
}
