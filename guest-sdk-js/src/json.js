// JSON as the Rust SDK (serde_json) writes it: compact, object keys sorted by code point, so a
// worker's decision is the same bytes whichever language it is written in.

import { WorkerError } from './errors.js';
import { precompiled } from './patterns.js';

/** Orders strings by Unicode code point (as Rust and Python compare strings). Compares UTF-16
 * code units in place, no copy: where the first pair that differs holds no surrogate, the code
 * points there are those two units (the prefix is the same in both). */
export function compareText(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return isSurrogate(x) || isSurrogate(y) ? compareCodePoints(a, b) : x - y;
  }
  return a.length - b.length;
}

function isSurrogate(unit) {
  return unit >= 0xd800 && unit <= 0xdfff;
}

/** `compareText` by code point arrays (pairs and lone surrogates as `for…of` splits them). */
function compareCodePoints(a, b) {
  const left = [...a];
  const right = [...b];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const diff = left[i].codePointAt(0) - right[i].codePointAt(0);
    if (diff !== 0) return diff;
  }
  return left.length - right.length;
}

/** Lone or paired surrogates: where sorting by UTF-16 units and by code points can differ. */
const SURROGATE = precompiled(/[\ud800-\udfff]/, 'key');

/** Whether `keys` are in code point order already: in UTF-16 order (`<`, no comparator call)
 * with no surrogate in any key, where the two orders could differ. */
function inCodePointOrder(keys) {
  for (let i = 1; i < keys.length; i++) {
    if (!(keys[i - 1] < keys[i])) return false;
  }
  return keys.length < 2 || !anySurrogate(keys);
}

/** Whether any of `texts` holds a surrogate: only then may UTF-16 order and code point order
 * differ. */
function anySurrogate(texts) {
  return SURROGATE.test(texts.join(''));
}

/** Sorts `texts` in place by code point (as Rust and Python sort strings) and returns it: the
 * engine's own sort, no comparator called per pair, unless a text holds a surrogate. */
export function sortText(texts) {
  texts.sort();
  return anySurrogate(texts) ? texts.sort(compareText) : texts;
}

/** Sorts `items` in place by the text `keyOf(item)`, in code point order, and returns it. The
 * engine's string comparison orders each pair unless a key holds a surrogate. */
export function sortByText(items, keyOf) {
  const keyed = items.map((item) => [keyOf(item), item]);
  if (anySurrogate(keyed.map(([key]) => key))) {
    keyed.sort(([a], [b]) => compareText(a, b));
  } else {
    keyed.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }
  for (let i = 0; i < keyed.length; i++) items[i] = keyed[i][1];
  return items;
}

/** `keys` in code point order: the engine's own sort (UTF-16 units, no comparator called per
 * pair) gives it unless a key holds a surrogate, which the code point comparison then orders. */
function sortedKeys(keys) {
  return keys.length < 2 ? keys : sortText(keys);
}

/** `value` as `JSON.stringify` would see it (`toJSON` applied, functions, symbols and
 * `undefined` members left out, `undefined` array items as null), object keys in code point
 * order; a TypeError for what JSON cannot hold (a BigInt, NaN or ±Infinity, as serde_json
 * refuses them). One walk: `JSON.stringify` then needs no replacer. An object or array that is
 * canonical already (keys in order, every member canonical: what workers mostly build) is
 * returned as it is; only the others are copied. */
function canonical(value) {
  if (value !== null && typeof value === 'object' && typeof value.toJSON === 'function') value = value.toJSON();
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
      return value;
    case 'bigint':
      throw new TypeError(`a BigInt (${value}) is not JSON`);
    case 'object':
      break;
    default:
      return undefined;
  }
  if (value === null) return null;
  if (Array.isArray(value)) {
    let items = null;
    for (let i = 0; i < value.length; i++) {
      const member = value[i];
      let item = canonical(member);
      if (item === undefined) item = null;
      if (items === null && item !== member) items = value.slice(0, i);
      if (items !== null) items[i] = item;
    }
    return items ?? value;
  }
  const keys = Object.keys(value);
  // An engine lists integer-like keys first, in numeric order, whatever order they were added
  // in: such an object cannot be rebuilt in code point order ("10" before "2").
  if (keys.length > 1 && isDigit(keys[0].charCodeAt(0))) digitKeysSeen = true;
  if (inCodePointOrder(keys)) {
    let copy = null;
    for (let i = 0; i < keys.length; i++) {
      const member = value[keys[i]];
      const canonicalMember = canonical(member);
      if (copy === null && canonicalMember !== member) {
        copy = {};
        for (let j = 0; j < i; j++) copy[keys[j]] = value[keys[j]];
      }
      if (copy !== null && canonicalMember !== undefined) copy[keys[i]] = canonicalMember;
    }
    return copy ?? value;
  }
  const sorted = {};
  for (const key of sortedKeys(keys)) {
    const member = canonical(value[key]);
    if (member !== undefined) sorted[key] = member;
  }
  return sorted;
}

/** Set by `canonical` when an object of the value has more than one key and one starting with
 * a digit. */
let digitKeysSeen = false;

function isDigit(unit) {
  return unit >= 0x30 && unit <= 0x39;
}

/** `value` written as `JSON.stringify(canonical(value))` would be, but member by member, keys
 * in code point order: for the values whose objects an engine cannot hold in that order
 * (integer-like keys). Slower: one walk in JavaScript that writes every value. */
function writeSorted(value) {
  if (value !== null && typeof value === 'object' && typeof value.toJSON === 'function') value = value.toJSON();
  switch (typeof value) {
    case 'object':
      break;
    case 'string':
    case 'boolean':
    case 'number':
      return JSON.stringify(value);
    default:
      return undefined;
  }
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    const items = new Array(value.length);
    for (let i = 0; i < value.length; i++) items[i] = writeSorted(value[i]) ?? 'null';
    return `[${items.join(',')}]`;
  }
  const members = [];
  for (const key of sortedKeys(Object.keys(value))) {
    const member = writeSorted(value[key]);
    if (member !== undefined) members.push(`${JSON.stringify(key)}:${member}`);
  }
  return `{${members.join(',')}}`;
}

/** Compact JSON with object keys in code point order (integer-like ones too: `"10"` before
 * `"2"`, as serde_json writes a map): the bytes the Rust SDK writes for the same value. Throws a
 * TypeError for values JSON cannot hold. */
export function toJson(value) {
  digitKeysSeen = false;
  const checked = canonical(value);
  const text = digitKeysSeen ? writeSorted(value) : JSON.stringify(checked);
  if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
  return text;
}

/** `toJson(value)` for the host, or a fatal `WorkerError` saying why not. `what` names the value
 * (`the status`, `output #2`). A value JSON cannot hold (a BigInt, a cycle) is
 * `{what} does not serialize to JSON: {why}`, as in the Rust SDK. A value the engine could not
 * serialize at all — it throws `RangeError: Invalid string length`, or the string
 * `out of memory` — is `{what} ({n} bytes of JSON) could not be serialized: {cause}`, its size
 * counted without building it: the host reports that as its own limit (status info or outputs,
 * in the words it uses for every language) when `n` is beyond it. */
export function serializeFor(what, value) {
  try {
    return toJson(value);
  } catch (err) {
    if (err instanceof TypeError) throw WorkerError.fatal(`${what} does not serialize to JSON: ${err.message}`);
    let size;
    try {
      size = `${jsonSize(value)}`;
    } catch {
      // Reading a string the engine holds as a rope (`'x'.repeat(n)`, concatenations) makes a
      // flat copy of it, which may fail as the serialization did: count its length instead.
      try {
        size = `at least ${jsonSize(value, lengthAtLeast)}`;
      } catch (sizing) {
        throw WorkerError.fatal(`${what} could not be serialized: ${describeThrown(err)} (nor measured: ${describeThrown(sizing)})`);
      }
    }
    throw WorkerError.fatal(`${what} (${size} bytes of JSON) could not be serialized: ${describeThrown(err)}`);
  }
}

/** A lower bound of `stringSize(text)` that does not read the text: each UTF-16 unit is at
 * least one byte of UTF-8, escapes only add. */
function lengthAtLeast(text) {
  return text.length + 2;
}

/** What was thrown, as text: an Error's `name: message`; anything else as a string (engines
 * throw plain strings too, e.g. SpiderMonkey's `out of memory`). */
export function describeThrown(err) {
  if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
  try {
    return String(err);
  } catch {
    return `a thrown ${typeof err}`;
  }
}

/** Printable ASCII other than `"` and `\\`: written as is, one byte a character. */
const PLAIN_TEXT = precompiled(/^[\x20\x21\x23-\x5b\x5d-\x7e]*$/, 'text');

/** Characters of a long string looked at at once: a string built by concatenation (a rope) is
 * read a slice at a time, never made into one flat copy (which may be what just failed). */
const SLICE = 1 << 16;

/** The UTF-8 length of `JSON.stringify(text)`. */
function stringSize(text) {
  let size = 2;
  let start = 0;
  while (start < text.length) {
    let part = text.slice(start, start + SLICE);
    start += part.length;
    // A surrogate pair cut by the slice is counted whole (4 bytes), not as two lone halves.
    const last = part.charCodeAt(part.length - 1);
    if (start < text.length && last >= 0xd800 && last <= 0xdbff) {
      part += text.slice(start, start + 1);
      start += 1;
    }
    size += sliceSize(part);
  }
  return size;
}

function sliceSize(text) {
  if (PLAIN_TEXT.test(text)) return text.length;
  let size = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 || c === 0x5c || c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d) size += 2;
    else if (c < 0x20) size += 6;
    else if (c < 0x80) size += 1;
    else if (c < 0x800) size += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      size += 4;
      i++;
    } else if (c >= 0xd800 && c <= 0xdfff) size += 6; // a lone surrogate is escaped: \udxxx
    else size += 3;
  }
  return size;
}

/** The UTF-8 length of `JSON.stringify(value)`, counted without building the text (which the
 * engine could not: this is asked when it failed). Follows `toJSON` as `JSON.stringify` does.
 * `measureString`: how a string's quoted length is counted. */
export function jsonSize(value, measureString = stringSize) {
  const open = new Set();
  const measure = (v, inArray) => {
    if (v !== null && typeof v === 'object' && typeof v.toJSON === 'function') v = v.toJSON();
    switch (typeof v) {
      case 'string':
        return measureString(v);
      case 'number':
        return Number.isFinite(v) ? String(v).length : 4;
      case 'boolean':
        return v ? 4 : 5;
      case 'undefined':
      case 'function':
      case 'symbol':
        return inArray ? 4 : undefined;
      case 'bigint':
        return String(v).length;
      default:
        break;
    }
    if (v === null) return 4;
    if (open.has(v)) throw new TypeError('the value refers to itself');
    open.add(v);
    let size = 2;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) size += measure(v[i], true) + (i > 0 ? 1 : 0);
    } else {
      let members = 0;
      for (const key of Object.keys(v)) {
        const member = measure(v[key], false);
        if (member === undefined) continue;
        size += measureString(key) + 1 + member + (members > 0 ? 1 : 0);
        members++;
      }
    }
    open.delete(v);
    return size;
  };
  return measure(value, true);
}

/** `a string`, `an object`, …: how error messages name a JSON value's type. */
export function jsonType(value) {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return 'an array';
  switch (typeof value) {
    case 'boolean':
      return 'a boolean';
    case 'number':
      return 'a number';
    case 'string':
      return 'a string';
    default:
      return 'an object';
  }
}

/** `value[key]`, or undefined when `value` is not an object (serde_json's `value[key]`). */
export function field(value, key) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value[key] : undefined;
}
