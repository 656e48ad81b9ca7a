// The objects a phase declared as inputs, read by name and parsed on demand.
import { WorkerError } from './errors.js';
import { jsonType } from './json.js';

/** Parses `jsonText`, then with `type.fromJSON` when a type is given. Throws on bad input. */
export function parseAs(type, jsonText) {
  const value = JSON.parse(jsonText);
  return type ? type.fromJSON(value) : value;
}

/** `Deployment` for a type named so; `JSON value` without one. */
export function typeName(type) {
  return type ? type.name : 'JSON value';
}

/** The phase's declared inputs, each a list of whole Kubernetes objects as JSON.
 *
 * Objects are parsed only when asked for: into plain objects, or through a type with a
 * static `fromJSON(value)` that throws when the JSON does not fit.
 *
 *     const deployments = inputs.list('deployments');
 */
export class Inputs {
  #inputs;

  /** `inputs`: `[name, jsonStrings[]]` pairs, in declaration order. */
  constructor(inputs) {
    this.#inputs = inputs.map(([name, objects]) => [name, [...objects]]);
  }

  /** The declared input names, in declaration order. */
  names() {
    return this.#inputs.map(([name]) => name);
  }

  /** The objects of input `name` as JSON strings, or undefined if the phase declares no such input. */
  getRaw(name) {
    return this.#inputs.find(([n]) => n === name)?.[1];
  }

  /** The objects of input `name` as JSON strings. Throws a fatal WorkerError naming the
   * declared inputs if the phase declares no input `name`. */
  raw(name) {
    const objects = this.getRaw(name);
    if (objects === undefined) {
      const known = this.names().map((n) => `\`${n}\``).join(', ') || 'none';
      throw WorkerError.fatal(
        `unknown input \`${name}\`: this worker declares ${known} (see its \`inputs\` in the WasmOperator: the phase's, or spec.finalizer.inputs for the finalizer)`,
      );
    }
    return objects;
  }

  /** Parses every object of input `name` (through `type.fromJSON` if given). Throws a fatal
   * WorkerError for an undeclared input (listing the declared ones) or an object that does
   * not parse (naming the input, the object and the problem). */
  list(name, type) {
    return this.raw(name).map((jsonText, index) => {
      try {
        return parseAs(type, jsonText);
      } catch (err) {
        throw WorkerError.fatal(
          `input \`${name}\`: object ${describeObject(index, jsonText)} is not a valid ${typeName(type)}: ${err.message}`,
        );
      }
    });
  }

  /** The samples of a metric query the phase declared (`queries` in the WasmOperator): the
   * host ran the PromQL against Prometheus and hands the result over as data. */
  samples(name) {
    return this.list(name, Sample);
  }
}

/** One sample of a metric query result: an instant-vector element, or a scalar (no labels). */
export class Sample {
  constructor(timestamp, value, labels = {}) {
    /** Evaluation time, seconds since the Unix epoch. */
    this.timestamp = timestamp;
    /** The value; null when Prometheus answered NaN or ±Inf. */
    this.value = value;
    /** The series' labels (empty for a scalar). */
    this.labels = labels;
  }

  static fromJSON(value) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new TypeError(`expected an object, not ${jsonType(value)}`);
    }
    if (!('timestamp' in value)) throw new TypeError('missing field `timestamp`');
    if (!('value' in value)) throw new TypeError('missing field `value`');
    if (value.value !== null && typeof value.value !== 'number') {
      throw new TypeError(`\`value\` must be a number or null, not ${jsonType(value.value)}`);
    }
    return new Sample(Number(value.timestamp), value.value, { ...(value.labels ?? {}) });
  }
}

/** `#3 (apps/v1 Deployment default/web)` when the JSON has the fields, else `#3`. */
export function describeObject(index, jsonText) {
  let value;
  try {
    value = JSON.parse(jsonText);
  } catch {
    return `#${index} (not JSON)`;
  }
  const id = identity(value);
  return id ? `#${index} (${id})` : `#${index}`;
}

/** `apps/v1 Deployment default/web`, from whichever of those fields the JSON has. */
export function identity(value) {
  const text = (obj, key) =>
    obj !== null && typeof obj === 'object' && typeof obj[key] === 'string' ? obj[key] : undefined;
  const parts = [text(value, 'apiVersion'), text(value, 'kind')].filter((p) => p !== undefined);
  const metadata = value !== null && typeof value === 'object' ? value.metadata : undefined;
  const namespace = text(metadata, 'namespace');
  const name = text(metadata, 'name');
  if (name !== undefined) parts.push(namespace !== undefined ? `${namespace}/${name}` : name);
  return parts.length ? parts.join(' ') : undefined;
}
