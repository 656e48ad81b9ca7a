// Kubernetes label selectors (`matchLabels` AND `matchExpressions`) for workers that match
// objects themselves. Checked and matched as the host does for an input's selector
// (selection/src/label_selector.rs), and an invalid one is reported in the host's words, naming the field.
//
//     const selector = LabelSelector.fromJSON(route.spec.deploymentSelector, 'spec.deploymentSelector');
//     const web = deployments.filter((d) => selector.matches(d.metadata.labels));
//
// An input that declares `selectorFrom` (or `matchLabels` / `matchExpressions`) in the
// WasmOperator is already selected by the host; a worker needs this only to select by itself.
import { sortText } from './json.js';
import { precompiled } from './patterns.js';

/** The `matchExpressions` operators Kubernetes knows. */
const OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'];

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);

/** A selector Kubernetes would not accept: `"{field}: {problem}"`, e.g.
 * `spec.deploymentSelector.matchExpressions[0].operator: "Equals" is not In, NotIn, Exists or
 * DoesNotExist`. */
export class SelectorError extends Error {
  constructor(field, problem) {
    super(`${field}: ${problem}`);
    this.name = 'SelectorError';
    /** Where the problem is, e.g. `spec.deploymentSelector.matchExpressions[0].values`. */
    this.field = field;
    this.problem = problem;
  }
}

/** Whether one requirement holds for `value`, the label's value (undefined: no such label). */
const HOLDS = {
  In: (value, values) => value !== undefined && values.includes(value),
  NotIn: (value, values) => value === undefined || !values.includes(value),
  Exists: (value) => value !== undefined,
  DoesNotExist: (value) => value === undefined,
};

/** A checked label selector: every requirement must hold. The empty selector matches everything.
 *
 *     LabelSelector.fromJSON({ matchLabels: { app: 'web' } }).matches({ app: 'web' }) // true
 */
export class LabelSelector {
  #requirements;

  /** The selector of `requirements` (`{ key, operator, values }`, already checked); `fromJSON`
   * builds them from JSON. */
  constructor(requirements = []) {
    this.#requirements = requirements;
  }

  /** Parses a LabelSelector as JSON (`{ matchLabels, matchExpressions }`, either absent or null)
   * found at `field` (e.g. `'spec.deploymentSelector'`), which errors name.
   *
   * Throws a SelectorError, as the host: a value that is not an object; `matchLabels` that is
   * not an object of strings; `matchExpressions` that is not an array of objects with string
   * `key`, `operator` and `values`; an empty key; a key or value Kubernetes does not accept as a
   * label's; an unknown operator; `In` or `NotIn` without values; `Exists` or `DoesNotExist` with
   * values. */
  static fromJSON(value, field = 'selector') {
    if (!isObject(value)) {
      throw new SelectorError(field, 'is not a label selector (an object with matchLabels and/or matchExpressions)');
    }
    const matchLabels = parseMatchLabels(value.matchLabels, `${field}.matchLabels`);
    const expressions = parseMatchExpressions(value.matchExpressions, `${field}.matchExpressions`);
    const requirements = sortText(Object.keys(matchLabels)).map((key) => {
      const text = matchLabels[key];
      let why = labelKeyProblem(key);
      if (why) throw new SelectorError(`${field}.matchLabels`, `${debugQuoted(key)} is not a valid label key: ${why}`);
      why = labelValueProblem(text);
      if (why) {
        throw new SelectorError(
          `${field}.matchLabels`,
          `${debugQuoted(text)} (key ${debugQuoted(key)}) is not a valid label value: ${why}`,
        );
      }
      return { key, operator: 'In', values: [text] };
    });
    expressions.forEach((expression, index) =>
      requirements.push(checked(expression, `${field}.matchExpressions[${index}]`)),
    );
    return new LabelSelector(requirements);
  }

  /** Whether an object with `labels` (undefined or null: it has none) is selected. */
  matches(labels) {
    const found = labels ?? {};
    return this.#requirements.every(({ key, operator, values }) =>
      HOLDS[operator](Object.hasOwn(found, key) ? found[key] : undefined, values),
    );
  }
}

/** A `matchExpressions` entry at `at`, if Kubernetes accepts it; else a SelectorError. */
function checked({ key, operator, values }, at) {
  if (key === '') throw new SelectorError(`${at}.key`, 'must not be empty');
  const why = labelKeyProblem(key);
  if (why) throw new SelectorError(`${at}.key`, `${debugQuoted(key)} is not a valid label key: ${why}`);
  values.forEach((text, index) => {
    const problem = labelValueProblem(text);
    if (problem) {
      throw new SelectorError(`${at}.values[${index}]`, `${debugQuoted(text)} is not a valid label value: ${problem}`);
    }
  });
  if ((operator === 'In' || operator === 'NotIn') && values.length === 0) {
    throw new SelectorError(`${at}.values`, `must not be empty for operator ${operator}`);
  }
  if ((operator === 'Exists' || operator === 'DoesNotExist') && values.length > 0) {
    throw new SelectorError(`${at}.values`, `must be empty for operator ${operator}`);
  }
  if (!OPERATORS.includes(operator)) {
    throw new SelectorError(`${at}.operator`, `${debugQuoted(operator)} is not In, NotIn, Exists or DoesNotExist`);
  }
  return { key, operator, values };
}

const NAME_CHARACTERS = "consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character";

/** Why `key` cannot be a label key (Kubernetes' qualified name: an optional DNS subdomain prefix
 * and `/`, then a name), if it cannot; the host's words. */
function labelKeyProblem(key) {
  const parts = key.split('/');
  if (parts.length > 2) return "at most one '/', between a DNS subdomain prefix and the name (e.g. example.com/name)";
  let name = key;
  if (parts.length === 2) {
    const prefix = parts[0];
    name = parts[1];
    if (prefix === '') return "the prefix before '/' must not be empty";
    if (!isDnsSubdomain(prefix)) return "the prefix before '/' must be a lowercase DNS subdomain (e.g. example.com)";
    if (prefix.length > 253) return "the prefix before '/' must be no more than 253 characters";
  }
  if (name === '') return 'the name must not be empty';
  const problem = nameProblem(name);
  if (problem === 'characters') return `the name must ${NAME_CHARACTERS}`;
  if (problem === 'length') return 'the name must be no more than 63 characters';
  return undefined;
}

/** Why `value` cannot be a label value (empty, or a name of at most 63 characters), if it
 * cannot; the host's words. */
function labelValueProblem(value) {
  const problem = value === '' ? undefined : nameProblem(value);
  if (problem === 'characters') return `it must be empty or ${NAME_CHARACTERS}`;
  if (problem === 'length') return 'it must be no more than 63 characters';
  return undefined;
}

/** `'characters'` unless `text` is `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, then `'length'`
 * if longer than 63 (characters first, so the length is of ASCII text). */
function nameProblem(text) {
  if (!NAME.test(text)) return 'characters';
  return text.length > 63 ? 'length' : undefined;
}

/** A label value, or a label key's name part. */
const NAME = precompiled(/^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/, 'app.kubernetes.io');

/** A label of an RFC 1123 subdomain. */
const DNS_LABEL = precompiled(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'example');

/** A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`. */
const isDnsSubdomain = (text) => text.split('.').every((label) => DNS_LABEL.test(label));

/** `matchLabels` (absent or null: none). Checked in key order, as the host's serde does. */
function parseMatchLabels(value, field) {
  if (value === undefined || value === null) return {};
  if (!isObject(value)) throw new SelectorError(field, invalidType(value, 'a map'));
  for (const key of sortText(Object.keys(value))) {
    if (typeof value[key] !== 'string') throw new SelectorError(field, invalidType(value[key], 'a string'));
  }
  return value;
}

/** `matchExpressions` (absent or null: none) as `{ key, operator, values }`, the types checked
 * for every entry before any entry's meaning (as the host parses, then checks). A missing or
 * null `key`, `operator` or `values` is empty, as in the host's Kubernetes types. */
function parseMatchExpressions(value, field) {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new SelectorError(field, invalidType(value, 'a sequence'));
  return value.map((entry) => {
    if (!isObject(entry)) throw new SelectorError(field, invalidType(entry, 'LabelSelectorRequirement'));
    const key = optionalText(entry.key, field);
    const operator = optionalText(entry.operator, field);
    const values = entry.values ?? [];
    if (!Array.isArray(values)) throw new SelectorError(field, invalidType(values, 'a sequence'));
    for (const text of values) {
      if (typeof text !== 'string') throw new SelectorError(field, invalidType(text, 'a string'));
    }
    return { key, operator, values: [...values] };
  });
}

function optionalText(value, field) {
  if (value === undefined || value === null) return '';
  if (typeof value !== 'string') throw new SelectorError(field, invalidType(value, 'a string'));
  return value;
}

/** serde's words for a JSON value of the wrong type: `invalid type: integer `1`, expected a
 * string`. (A number written `1.0` reads as the integer 1 here: JavaScript cannot tell them apart.) */
function invalidType(value, expected) {
  let unexpected;
  if (value === undefined || value === null) unexpected = 'null';
  else if (typeof value === 'boolean') unexpected = `boolean \`${value}\``;
  else if (typeof value === 'number') unexpected = Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
  else if (typeof value === 'string') unexpected = `string ${debugQuoted(value)}`;
  else if (Array.isArray(value)) unexpected = 'sequence';
  else unexpected = 'map';
  return `invalid type: ${unexpected}, expected ${expected}`;
}

/** Whether `ch` is a C0 or C1 control character (or DEL). */
const isControl = (ch) => ch.codePointAt(0) < 0x20 || (ch.codePointAt(0) >= 0x7f && ch.codePointAt(0) <= 0x9f);

const ESCAPES = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\0': '\\0' };

/** `text` quoted as Rust's `{:?}` writes a string (quotes, backslashes and C0/C1 control
 * characters escaped), so messages read as the host's. */
function debugQuoted(text) {
  const quoted = [...text]
    .map((ch) => ESCAPES[ch] ?? (isControl(ch) ? `\\u{${ch.codePointAt(0).toString(16)}}` : ch))
    .join('');
  return `"${quoted}"`;
}
