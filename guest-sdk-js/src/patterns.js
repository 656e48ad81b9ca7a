// Regular expressions compiled when a component is built, not at each call: SpiderMonkey
// compiles a pattern at its first test, and every call runs in a fresh copy of the snapshot.
//
// componentize-js snapshots the engine after the bundle's top level ran. A pattern tested there
// is compiled in the snapshot; one first tested during a call is compiled again in every fresh
// instance (in a profile, the three the SDK tests at every call cost 13 % of a JavaScript call's
// fixed cost that way).

/**
 * `pattern`, compiled now by testing it on each sample (`''` when none): call it where the
 * pattern is defined, at the module's top level, so a component's snapshot holds it compiled.
 * Natively it only tests once. The engine compiles a pattern separately for text with
 * characters beyond U+00FF, so give such a sample too if that is the usual input. `lastIndex`
 * is reset.
 * @template {RegExp} P
 * @param {P} pattern
 * @param {...string} samples
 * @returns {P}
 */
export function precompiled(pattern, ...samples) {
  for (const sample of samples.length === 0 ? [''] : samples) {
    pattern.test(sample);
  }
  pattern.lastIndex = 0;
  return pattern;
}
