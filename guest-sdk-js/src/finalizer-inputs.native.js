// The host's `finalizer-inputs` import where there is none (node, tests, phase components):
// the finalizer's inputs come from the caller (`FinalizeTest.input`).
export const hostFinalizerInputs = null;
