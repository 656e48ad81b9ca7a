// Builds a component from a bundled worker as `componentize-js` does, with faster glue: the JS
// bindings componentize-js generates for the WIT calls (jco's) are rewritten before the engine
// snapshot. Installed beside componentize-js by deploy/local/guest-toolchains.sh; usage:
//   node componentize-js.mjs <bundle.js> --wit <file> --world-name <world> [--disable <f>]...
//        [--snapshot <wasmpilot-js-snapshot>] -o <out>
//
// `--snapshot` names the program that takes the engine's snapshot in place of componentize-js's
// wizer (`wasmpilot build` passes its `wasmpilot-js-snapshot`): the same snapshot, taken with fixed
// randomness and clocks and the work directory under a fixed name, so that the same bundle gives
// the same component, byte for byte (host/src/bin/wasmpilot-js-snapshot.rs).
//
// The glue runs in the component's interpreter at every call. As generated it
// - measures a string's UTF-8 length in a JavaScript loop over its characters before
//   encoding it: every string a worker hands the host (each output object, the status, each
//   log line's text) is walked character by character, interpreted;
// - builds an object literal for `_debugLog` at every import and export call, to drop it unless
//   JCO_DEBUG is set in the component's environment (never, in a wasmpilot sandbox);
// - makes each export an `async function` awaiting the worker, though the SDK's exports answer
//   at once: a generator, promises with their saved stacks, and an event-loop turn per call.
// Rewritten, a string is encoded by the engine's TextEncoder and copied with one `set` (the same
// bytes, one allocation of the exact size, as before), `_debugLog` calls are skipped without
// evaluating their arguments, and exports are plain functions returning a settled promise. A
// rewrite whose text is not found fails the build, naming this file: the pinned componentize-js
// changed its glue.
//
// A worker's bug (what it throws that is not a `worker-error`) traps the call: the generated
// glue rethrows an `Error`, but checks it with `instanceof Error`, which is false for an error
// made in the worker's global (not the glue's), so it sent the error object as the
// `worker-error` and the trap's message ended in "invalid variant tag value `undefined`".
// Rewritten, an error is recognised by its built-in class, from whichever global it comes.
//
// The glue also gets a warm-up, run once before the snapshot: SpiderMonkey creates a built-in
// class (Uint8Array, DataView, Promise and the async-function machinery) at its first use in a
// global, and each call runs in a fresh instance of the snapshot, so the glue's first
// `new Uint8Array` recreated them at every call (15 % of a call's fixed cost in a profile).
import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE = new URL('./node_modules/@bytecodealliance/componentize-js/', import.meta.url);

/** The glue's UTF-8 length loop, from its first line to the line after encodeInto's check. */
const MEASURED_ENCODE = {
  from: '  // Compute the exact allocation size up front.',
  to: '  const res = { ptr, len, codepoints };',
  // `codepoints` is returned but read by no generated caller (checked below).
  with: `  const bytes = TEXT_ENCODER_UTF8.encode(s);
  const len = bytes.byteLength;
  const ptr = realloc(0, 0, 1, len);
  new Uint8Array(memory.buffer, ptr, len).set(bytes);
  const codepoints = undefined;
`,
};

/** The glue's check that a thrown value is an error to rethrow (not a payload to send). */
const ERROR_CHECK = {
  from: '  if (e instanceof Error) throw e;\n',
  // `Object.prototype.toString` reads the built-in class through cross-global wrappers too.
  with: "  if (e instanceof Error || Object.prototype.toString.call(e) === '[object Error]') throw e;\n",
};

/** Appended to the glue: uses, once before the snapshot, every built-in the glue uses in a call,
 * so the snapshot holds them created (`TextEncoder` and `TextDecoder` are the glue's bindings of
 * the content global's). A promise job it leaves runs at the first call's event loop. */
export const WARM_UP = `
// Added by deploy/local/guest-toolchains/componentize-js.mjs: built-ins created before the snapshot.
{
  const warmBytes = new Uint8Array(new ArrayBuffer(8), 0, 8);
  const warmView = new DataView(warmBytes.buffer);
  warmView.setUint32(0, 1, true);
  warmView.setBigInt64(0, BigInt.asUintN(64, BigInt(warmView.getUint32(0, true))), true);
  warmView.setInt8(0, warmView.getInt8(0), true);
  new TextDecoder().decode(new TextEncoder().encode('warm'));
  (async () => { await Promise.resolve(null); })().then(() => {}, () => {});
}
`;

/** What every rewritten export returns once it has written its answer: the engine only waits
 * for a promise to settle, and this one has (made once, before the snapshot). */
const ANSWERED = `
// Added by deploy/local/guest-toolchains/componentize-js.mjs: the promise exports return.
const EXPORT_ANSWERED = Promise.resolve();
function answeredAtOnce(answer) {
  if (answer !== null && (typeof answer === 'object' || typeof answer === 'function') && typeof answer.then === 'function') {
    throw new TypeError('a wasmpilot worker answers at once: its export returned a promise (componentize-js.mjs)');
  }
}
`;

/**
 * The glue's exports made synchronous. As generated, each is an `async function` that awaits
 * the worker's export and so allocates a generator, two promises and their saved stacks, and
 * resumes from the event loop, though the SDK's exports answer at once. Rewritten, it calls the
 * export, refuses a promise (a TypeError, which traps the call), writes the answer as before and
 * returns an already settled promise; what it throws is returned as a rejected promise, which
 * the engine reports and traps on as it did the async function's.
 */
function synchronousExports(glue) {
  const fail = (why) => {
    throw new Error(`componentize-js.mjs: ${why}; update deploy/local/guest-toolchains/componentize-js.mjs for this componentize-js`);
  };
  const header = /^async function (export_[\w$]+)\(([^)]*)\) \{\n/gm;
  let out = '';
  let last = 0;
  let exports = 0;
  for (let match; (match = header.exec(glue)) !== null; ) {
    const bodyStart = match.index + match[0].length;
    const end = glue.indexOf('\n}\n', bodyStart);
    if (end < 0) fail(`the export ${match[1]} has no end where expected`);
    let body = glue.slice(bodyStart, end + 1);
    const awaits = body.match(/\bawait\b/g) ?? [];
    const call = /const (hostRet\d+) = await ([\w$]+)\(/.exec(body);
    if (awaits.length !== 1 || call === null) fail(`the export ${match[1]} does not await its worker once`);
    const callEnd = body.indexOf(');\n', call.index);
    if (callEnd < 0) fail(`the export ${match[1]}'s call has no end`);
    body =
      body.slice(0, call.index) +
      `const ${call[1]} = ${call[2]}(` +
      body.slice(call.index + call[0].length, callEnd + 3) +
      `    answeredAtOnce(${call[1]});\n` +
      body.slice(callEnd + 3);
    if (!body.endsWith('  return;\n')) fail(`the export ${match[1]} does not end with \`return;\``);
    body = body.slice(0, -'  return;\n'.length) + '  return EXPORT_ANSWERED;\n';
    out +=
      glue.slice(last, match.index) +
      `function ${match[1]}(${match[2]}) {\n  try {\n${body}  } catch (e) {\n    return Promise.reject(e);\n  }\n`;
    last = end + 1;
    exports++;
  }
  if (exports === 0) fail('the generated glue has no async export');
  return out + glue.slice(last) + ANSWERED;
}

/** `jsBindings` with the faster encoding, errors rethrown from any global, no debug-log calls,
 * synchronous exports and the warm-up; throws when the glue is not the one these rewrites were
 * written for. */
export function fasterBindings(jsBindings) {
  const from = jsBindings.indexOf(MEASURED_ENCODE.from);
  const to = jsBindings.indexOf(MEASURED_ENCODE.to);
  if (from < 0 || to < from) {
    throw new Error(
      'componentize-js.mjs: the generated glue has no UTF-8 length loop where expected; update deploy/local/guest-toolchains/componentize-js.mjs for this componentize-js',
    );
  }
  if (/\.codepoints\b/.test(jsBindings)) {
    throw new Error('componentize-js.mjs: the generated glue reads `codepoints`; update the rewrite');
  }
  const encoded = jsBindings.slice(0, from) + MEASURED_ENCODE.with + jsBindings.slice(to);
  const checks = encoded.split(ERROR_CHECK.from).length - 1;
  if (checks !== 1) {
    throw new Error(
      `componentize-js.mjs: the generated glue checks for an error to rethrow ${checks} times, not once; update deploy/local/guest-toolchains/componentize-js.mjs for this componentize-js`,
    );
  }
  const rethrowing = encoded.replace(ERROR_CHECK.from, ERROR_CHECK.with);
  // Statements only (a line's first token): `false && f(...)` evaluates none of the arguments.
  return synchronousExports(rethrowing.replace(/^(\s*)_debugLog\(/gm, '$1false && _debugLog(')) + WARM_UP;
}

function parseArgs(argv) {
  const opts = { disable: [] };
  const rest = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--wit' || arg === '-w') opts.wit = value();
    else if (arg === '--world-name' || arg === '-n') opts.worldName = value();
    else if (arg === '--disable' || arg === '-d') opts.disable.push(value());
    else if (arg === '--out' || arg === '-o') opts.out = value();
    else if (arg === '--snapshot') opts.snapshot = value();
    else if (arg.startsWith('-')) throw new Error(`unknown option ${arg}`);
    else rest.push(arg);
  }
  if (rest.length !== 1 || !opts.wit || !opts.out) {
    throw new Error('usage: node componentize-js.mjs <bundle.js> --wit <file> [--world-name <world>] [--disable <feature>]... [--snapshot <program>] -o <out>');
  }
  return { source: rest[0], ...opts };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (err) {
    console.error(err.message);
    process.exit(2);
  }
  // The module instance componentize.js imports (`../lib/…`): the same file, so the same object.
  const { splicer } = await import(new URL('lib/spidermonkey-embedding-splicer.js', PACKAGE));
  const spliceBindings = splicer.spliceBindings;
  let rewritten = 0;
  splicer.spliceBindings = (...spliceArgs) => {
    const spliced = spliceBindings.apply(splicer, spliceArgs);
    rewritten++;
    return { ...spliced, jsBindings: fasterBindings(spliced.jsBindings) };
  };
  const { componentize } = await import(new URL('src/componentize.js', PACKAGE));
  const { component } = await componentize({
    sourcePath: args.source,
    witPath: resolve(args.wit),
    worldName: args.worldName,
    // componentize-js's own wizer when no `--snapshot` is given.
    wizerBin: args.snapshot,
    disableFeatures: args.disable,
  });
  if (rewritten !== 1) throw new Error(`componentize-js.mjs: the glue was generated ${rewritten} times, not once`);
  await writeFile(args.out, component);
}
