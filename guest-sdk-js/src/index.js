// Write the business logic of a wasmpilot operator in JavaScript, built into a WebAssembly
// component with componentize-js against `wit/operator.wit`.
//
// A worker decides one phase of a custom resource: it receives the resource, the phase's
// declared inputs and the host's clock, and returns the next phase, a status patch, the
// Kubernetes objects the host should apply, and when to run again. It never talks to the API
// server itself. Test it natively with `@wasmpilot/guest/testing`.
export { Context, LogLevel, LogRecord } from './context.js';
export { ErrorKind, WorkerError } from './errors.js';
export { exportFinalizer, exportPhase, FinalizerWorker, PhaseWorker } from './export.js';
export { Inputs, Sample } from './inputs.js';
export { compareText, describeThrown, jsonSize, sortByText, sortText, toJson } from './json.js';
export { Finalized, Outcome } from './outcome.js';
export { precompiled } from './patterns.js';
export { LabelSelector, SelectorError } from './selector.js';
export { HostStatus, Transition } from './status.js';
export { InputsView, PhaseOutcome, TypedPhaseWorker } from './typed.js';
