// The glue rewrite of componentize-js.mjs: the same bytes in memory and the same allocations as
// the generated glue, its debug-log calls skipped with their arguments unevaluated, and a
// warm-up appended that runs. Run by deploy/local/build-guest-examples.sh.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runInNewContext } from 'node:vm';

import { fasterBindings, WARM_UP } from './componentize-js.mjs';

// The string lowering as componentize-js 0.23.0 generates it (jco's), verbatim.
const ENCODE = `function _utf8AllocateAndEncode(s, realloc, memory) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
  // Compute the exact allocation size up front. Some older preview1
  // adapters only support an initial allocation, not a subsequent shrink.
  let len = 0;
  let codepoints = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    codepoints++;
    if (ch < 0x80) { len += 1; }
    else if (ch < 0x800) { len += 2; }
    else if (ch >= 0xd800 && ch <= 0xdbff &&
    i + 1 < s.length &&
    (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      len += 4;
      i++;
    } else { len += 3; }
  }
  const ptr = realloc(0, 0, 1, len);
  const { read, written } = TEXT_ENCODER_UTF8.encodeInto(
  s,
  new Uint8Array(memory.buffer, ptr, len),
  );
  if (read !== s.length || written !== len) {
    throw new Error('failed to encode whole string');
  }
  const res = { ptr, len, codepoints };
  return res;
}`;

// An export as componentize-js 0.23.0 generates it, its lifting and lowering cut down to one
// argument and a list the answer is written to.
const EXPORT = `async function export_phaseWorker_0_1_0$sync(arg0, arg1) {
  var result0 = String(arg0);
  let ret;
  
  try {
    const hostRet8 = await phaseWorker010Sync({
      operator: result0,
    });
    ret = hostRet8 !== null && typeof hostRet8 === 'object' && (hostRet8.tag === 'ok' || hostRet8.tag === 'err')
    ? hostRet8
    : { tag: 'ok', val: hostRet8};
  } catch (e) {
    
    ret = { tag: 'err', val: getErrorPayload(e) };
  }
  
  var variant19 = ret;
  switch (variant19.tag) {
    case 'ok': {
      const e = variant19.val;
      written.push(['ok', e]);
      break;
    }
    case 'err': {
      const e = variant19.val;
      written.push(['err', e]);
      break;
    }
    default: {
      throw new TypeError('invalid variant specified for result');
    }
  }
  return;
}
`;

// A glue module around them: an import call with two debug-log statements, and the export.
const GLUE = `const TEXT_DECODER_UTF8 = new TextDecoder();
const TEXT_ENCODER_UTF8 = new TextEncoder();

${ENCODE}

const hasOwnProperty = Object.prototype.hasOwnProperty;

function getErrorPayload(e) {
  if (e && hasOwnProperty.call(e, 'payload')) return e.payload;
  if (e instanceof Error) throw e;
  return e;
}

function call(s, realloc, memory, _debugLog) {
  _debugLog('[Instruction::CallWasm] enter', { funcName: s.slice(0, 1) });
  const res = _utf8AllocateAndEncode(s, realloc, memory);
    _debugLog('[Instruction::Return]', {
    funcName: 'log',
  });
  return res;
}

${EXPORT}
const written = [];
let phaseWorker010Sync;
`;

/** The glue's functions, from its text as generated or rewritten (run to its end first, as
 * the engine runs it before the snapshot). */
const glueOf = (text) =>
  new Function(`${text}
return {
  call,
  sync: export_phaseWorker_0_1_0$sync,
  written,
  bind: (worker) => { phaseWorker010Sync = worker; },
};`)();

/** A call's result, allocations and the bytes it left in a fresh memory. */
function lower(call, text) {
  const memory = { buffer: new ArrayBuffer(1 << 16) };
  const allocations = [];
  let next = 8;
  const realloc = (old, oldSize, align, size) => {
    allocations.push([old, oldSize, align, size]);
    const ptr = next;
    next += size;
    return ptr;
  };
  let logged = 0;
  const res = call(text, realloc, memory, () => logged++);
  const bytes = [...new Uint8Array(memory.buffer, res.ptr, res.len)];
  return { result: [res.ptr, res.len], bytes, allocations, logged };
}

test('strings are lowered to the same bytes with the same allocations, and nothing is logged', () => {
  const original = glueOf(GLUE).call;
  const rewritten = glueOf(fasterBindings(GLUE)).call;
  const texts = ['', 'web', 'é', '€uro', '\u{1F600} grin', 'lone \ud800 high', 'lone \udc00 low', 'x'.repeat(5000), '\uffff\u0000'];
  for (const text of texts) {
    const want = lower(original, text);
    const got = lower(rewritten, text);
    assert.equal(want.logged, 2, 'the generated glue logs');
    assert.equal(got.logged, 0, 'the rewritten glue skips its debug-log calls');
    assert.deepEqual({ ...got, logged: 0 }, { ...want, logged: 0 }, JSON.stringify(text).slice(0, 40));
  }
  assert.throws(() => rewritten(42, () => 8, { buffer: new ArrayBuffer(8) }, () => {}), TypeError);
});

test('a glue without the expected text fails the build, naming the script', () => {
  assert.throws(() => fasterBindings('function _utf8AllocateAndEncode() {}'), /componentize-js\.mjs/);
  assert.throws(() => fasterBindings(`${GLUE}const x = res.codepoints;\n`), /codepoints/);
  assert.throws(() => fasterBindings(GLUE.replace(EXPORT, '')), /no async export/);
  assert.throws(() => fasterBindings(GLUE.replace('if (e instanceof Error) throw e;', '')), /checks for an error to rethrow 0 times/);
  const twice = EXPORT.replace('  let ret;', '  await null;\n  let ret;');
  assert.throws(() => fasterBindings(GLUE.replace(EXPORT, twice)), /does not await its worker once/);
  const noReturn = EXPORT.replace('  return;\n}', '}');
  assert.throws(() => fasterBindings(GLUE.replace(EXPORT, noReturn)), /does not end with `return;`/);
});

/** What an export call did: its promise's outcome, and what it wrote before and after settling. */
async function exportCall(glue, worker) {
  glue.bind(worker);
  const before = glue.written.length;
  const promise = glue.sync('op', 0);
  const writtenAtOnce = glue.written.slice(before);
  let outcome;
  try {
    outcome = { fulfilled: await promise };
  } catch (err) {
    outcome = { rejected: err };
  }
  return { outcome, writtenAtOnce, written: glue.written.slice(before) };
}

test('an export answers at once, as the async export did after its await', async () => {
  const original = glueOf(GLUE);
  const rewritten = glueOf(fasterBindings(GLUE));
  assert.doesNotMatch(fasterBindings(GLUE), /async function export_|await phaseWorker/);
  const answer = { nextPhase: 'Ready' };
  const bug = new TypeError('the worker has a bug');
  const cases = [
    ['an answer', () => answer, { fulfilled: undefined }, [['ok', answer]]],
    ['a worker error', () => { throw { payload: { tag: 'fatal', val: 'no' } }; }, { fulfilled: undefined }, [['err', { tag: 'fatal', val: 'no' }]]],
    ['a bug', () => { throw bug; }, { rejected: bug }, []],
  ];
  for (const [what, worker, outcome, written] of cases) {
    const want = await exportCall(original, worker);
    const got = await exportCall(rewritten, worker);
    assert.deepEqual(want.outcome, outcome, `${what}: the generated export`);
    assert.deepEqual(want.written, written, `${what}: the generated export`);
    assert.deepEqual(got.outcome, outcome, what);
    assert.deepEqual(got.writtenAtOnce, written, `${what}: written before the call returns`);
    assert.deepEqual(got.written, written, what);
  }
  assert.deepEqual((await exportCall(original, () => answer)).writtenAtOnce, [], 'the generated export answers after its await');
  // A bug whose error was made in another global (the worker's, in a component): the generated
  // export sent the error object as the worker-error (a trap on its missing tag); now rethrown.
  const foreign = runInNewContext('new TypeError("can\'t access property of null")');
  assert.equal(foreign instanceof Error, false, 'the premise: an error from another global');
  assert.deepEqual((await exportCall(original, () => { throw foreign; })).written, [['err', foreign]]);
  const rethrown = await exportCall(rewritten, () => { throw foreign; });
  assert.equal(rethrown.outcome.rejected, foreign);
  assert.deepEqual(rethrown.written, []);
  // A thrown value that is no error at all is still the generated glue's payload.
  assert.deepEqual((await exportCall(rewritten, () => { throw 'text'; })).written, [['err', 'text']]);
  // A promise: awaited by the generated export, refused (a rejected call, so a trap) now.
  const promised = async () => answer;
  assert.deepEqual((await exportCall(original, promised)).written, [['ok', answer]]);
  const refused = await exportCall(rewritten, promised);
  assert.match(String(refused.outcome.rejected), /answers at once/);
  assert.deepEqual(refused.written, []);
});

test('the warm-up is appended to the glue and runs to its end without throwing', async () => {
  assert.ok(fasterBindings(GLUE).endsWith(WARM_UP));
  let settled = false;
  const warm = new Function('Promise', WARM_UP);
  // The async function's promise, observed through the Promise the warm-up uses.
  class Observed extends Promise {
    static resolve(value) {
      return super.resolve(value).then((v) => {
        settled = true;
        return v;
      });
    }
  }
  warm(Observed);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.ok(settled, 'the async function reached its await');
});
