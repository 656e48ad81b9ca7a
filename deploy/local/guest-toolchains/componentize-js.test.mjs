// The glue rewrite of componentize-js.mjs: the same bytes in memory and the same allocations as
// the generated glue, and its debug-log calls skipped with their arguments unevaluated. Run by
// deploy/local/build-guest-examples.sh.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fasterBindings } from './componentize-js.mjs';

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

// A glue module around it: an import call with two debug-log statements.
const GLUE = `const TEXT_DECODER_UTF8 = new TextDecoder();
const TEXT_ENCODER_UTF8 = new TextEncoder();

${ENCODE}

function call(s, realloc, memory, _debugLog) {
  _debugLog('[Instruction::CallWasm] enter', { funcName: s.slice(0, 1) });
  const res = _utf8AllocateAndEncode(s, realloc, memory);
    _debugLog('[Instruction::Return]', {
    funcName: 'log',
  });
  return res;
}
return call;
`;

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
  const original = new Function(GLUE)();
  const rewritten = new Function(fasterBindings(GLUE))();
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
  assert.throws(() => fasterBindings(GLUE.replace('return call;', 'call.x = res.codepoints;')), /codepoints/);
});
