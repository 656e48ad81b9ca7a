// Globals the component's engine (StarlingMonkey) defines but a wasmpilot worker cannot use:
// calling the engine's own would trap the call (it has no network to reach), naming nothing.
// In a component they are replaced at start with functions that throw an Error saying why,
// which a worker can catch; `@wasmpilot/guest/testing` replaces them during a native run too,
// so a test sees what the component will.

/** Why a worker has no network. */
function noNetwork(name) {
  return function unavailable() {
    throw new TypeError(
      `${name}() is not available in a wasmpilot worker: workers have no network. What a phase reads ` +
        'comes in its request: declare it as an input (or a metric query) of the phase in the WasmOperator',
    );
  };
}

/** Global name → what stands in for it inside a worker. */
export const SANDBOX_GLOBALS = Object.freeze({
  fetch: noNetwork('fetch'),
});

/** Replaces the globals for good (inside a component). */
export function installSandboxGlobals() {
  for (const [name, value] of Object.entries(SANDBOX_GLOBALS)) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
  }
}

/** Runs `run()` with the globals replaced, then puts the originals back (native tests). */
export function withSandboxGlobals(run) {
  const saved = Object.keys(SANDBOX_GLOBALS).map((name) => [name, Object.getOwnPropertyDescriptor(globalThis, name)]);
  installSandboxGlobals();
  try {
    return run();
  } finally {
    for (const [name, descriptor] of saved) {
      if (descriptor) Object.defineProperty(globalThis, name, descriptor);
      else delete globalThis[name];
    }
  }
}
