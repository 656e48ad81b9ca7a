// Inside a component: the sandbox's globals replaced once, at start (see sandbox-globals.js).
// Bundles resolve `#sandbox-globals` here through the `wasmpilot-component` condition
// (deploy/local/guest-toolchains/bundle-js.mjs); natively nothing is replaced at import.
import { installSandboxGlobals } from './sandbox-globals.js';

installSandboxGlobals();
