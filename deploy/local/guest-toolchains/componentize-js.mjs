// Builds a component from a bundled worker as `componentize-js` does, with faster glue: the JS
// bindings componentize-js generates for the WIT calls (jco's) are rewritten before the engine
// snapshot. Installed beside componentize-js by deploy/local/guest-toolchains.sh; usage:
//   node componentize-js.mjs <bundle.js> --wit <file> --world-name <world> [--disable <f>]... -o <out>
//
// The glue runs in the component's interpreter at every call. As generated it
// - measures a string's UTF-8 length in a JavaScript loop over its characters before
//   encoding it: every string a worker hands the host (each output object, the status, each
//   log line's text) is walked character by character, interpreted;
// - builds an object literal for `_debugLog` at every import and export call, to drop it unless
//   JCO_DEBUG is set in the component's environment (never, in a wasmpilot sandbox).
// Rewritten, a string is encoded by the engine's TextEncoder and copied with one `set` (the same
// bytes, one allocation of the exact size, as before), and `_debugLog` calls are skipped
// without evaluating their arguments. A rewrite whose text is not found fails the build, naming
// this file: the pinned componentize-js changed its glue.
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

/** `jsBindings` with the faster encoding and no debug-log calls; throws when the glue is not
 * the one these rewrites were written for. */
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
  // Statements only (a line's first token): `false && f(...)` evaluates none of the arguments.
  return encoded.replace(/^(\s*)_debugLog\(/gm, '$1false && _debugLog(');
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
    else if (arg.startsWith('-')) throw new Error(`unknown option ${arg}`);
    else rest.push(arg);
  }
  if (rest.length !== 1 || !opts.wit || !opts.out) {
    throw new Error('usage: node componentize-js.mjs <bundle.js> --wit <file> [--world-name <world>] [--disable <feature>]... -o <out>');
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
    disableFeatures: args.disable,
  });
  if (rewritten !== 1) throw new Error(`componentize-js.mjs: the glue was generated ${rewritten} times, not once`);
  await writeFile(args.out, component);
}
