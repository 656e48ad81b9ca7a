// Kubernetes label-selector matching (`matchLabels` AND `matchExpressions`), as
// `metav1.LabelSelectorAsSelector` does it: validated once, then matched many times.

const ESCAPES = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\0': '\\0' };

/** Whether `ch` is a C0 or C1 control character. */
const isControl = (ch) => ch.codePointAt(0) < 0x20 || (ch.codePointAt(0) >= 0x7f && ch.codePointAt(0) <= 0x9f);

/** `text` quoted as Rust's `{:?}` writes a string (quotes, backslashes and control characters
 * escaped), so messages read as the Rust worker's. */
export function debugQuoted(text) {
  const quoted = [...text]
    .map((ch) => ESCAPES[ch] ?? (isControl(ch) ? `\\u{${ch.codePointAt(0).toString(16)}}` : ch))
    .join('');
  return `"${quoted}"`;
}

/** Why a LabelSelector cannot be used: an unknown operator, `In`/`NotIn` without values, or
 * `Exists`/`DoesNotExist` with values. */
export class SelectorError extends Error {
  static UNKNOWN_OPERATOR = 'unknown-operator';
  static VALUES_REQUIRED = 'values-required';
  static VALUES_FORBIDDEN = 'values-forbidden';

  constructor(problem, key, operator) {
    super(SelectorError.#describe(problem, key, operator));
    this.name = 'SelectorError';
    this.problem = problem;
    this.key = key;
    this.operator = operator;
  }

  static #describe(problem, key, operator) {
    const quotedKey = debugQuoted(key);
    switch (problem) {
      case SelectorError.UNKNOWN_OPERATOR:
        return `matchExpressions key ${quotedKey}: unknown operator ${debugQuoted(operator)} (expected In, NotIn, Exists or DoesNotExist)`;
      case SelectorError.VALUES_REQUIRED:
        return `matchExpressions key ${quotedKey}: operator ${operator} needs at least one value`;
      default:
        return `matchExpressions key ${quotedKey}: operator ${operator} takes no values`;
    }
  }
}

/** One `matchExpressions` entry as a predicate on labels; throws a SelectorError if the
 * operator and values do not fit. */
function requirement(key, operator, values) {
  const has = (labels) => Object.hasOwn(labels, key);
  switch (operator) {
    case 'In':
    case 'NotIn':
      if (!values.length) throw new SelectorError(SelectorError.VALUES_REQUIRED, key, operator);
      return operator === 'In'
        ? (labels) => has(labels) && values.includes(labels[key])
        : (labels) => !has(labels) || !values.includes(labels[key]);
    case 'Exists':
    case 'DoesNotExist':
      if (values.length) throw new SelectorError(SelectorError.VALUES_FORBIDDEN, key, operator);
      return operator === 'Exists' ? has : (labels) => !has(labels);
    default:
      throw new SelectorError(SelectorError.UNKNOWN_OPERATOR, key, operator);
  }
}

/** A validated label selector (a LabelSelector as JSON). An empty selector matches everything.
 *
 *     new Selector({ matchLabels: { app: 'web' } }).matches({ app: 'web' }) // true
 */
export class Selector {
  #requirements;

  /** Validates `labelSelector`; throws a SelectorError. */
  constructor(labelSelector) {
    this.#requirements = Object.entries(labelSelector.matchLabels ?? {}).map(([key, value]) =>
      requirement(key, 'In', [value]),
    );
    for (const expr of labelSelector.matchExpressions ?? []) {
      this.#requirements.push(requirement(expr.key ?? '', expr.operator ?? '', expr.values ?? []));
    }
  }

  /** Whether `labels` satisfy every requirement. */
  matches(labels) {
    return this.#requirements.every((matches) => matches(labels));
  }
}
