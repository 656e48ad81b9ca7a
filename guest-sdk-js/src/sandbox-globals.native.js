// Natively nothing is replaced at import: `@wasmpilot/guest/testing` replaces the sandbox's
// globals around each run instead (see sandbox-globals.js).
