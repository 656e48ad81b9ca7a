// JSON as the Rust SDK (serde_json) writes it: compact, object keys sorted by code point, so a
// worker's decision is the same bytes whichever language it is written in.

/** Orders strings by Unicode code point (as Rust and Python compare strings). */
export function compareText(a, b) {
  const left = [...a];
  const right = [...b];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const diff = left[i].codePointAt(0) - right[i].codePointAt(0);
    if (diff !== 0) return diff;
  }
  return left.length - right.length;
}

function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    const sorted = {};
    for (const key of Object.keys(value).sort(compareText)) {
      if (value[key] !== undefined) sorted[key] = sortKeys(value[key]);
    }
    return sorted;
  }
  return value;
}

/** Compact JSON with sorted keys. Throws a TypeError for values JSON cannot hold. */
export function toJson(value) {
  const text = JSON.stringify(sortKeys(value), (_, v) => {
    if (typeof v === 'bigint') throw new TypeError(`a BigInt (${v}) is not JSON`);
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} is not JSON`);
    return v;
  });
  if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
  return text;
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
