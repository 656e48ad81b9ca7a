// The host's `finalizer-inputs` import, inside a finalizer component: bundles for the
// `finalizer` world resolve `#finalizer-inputs` here through the `wasmpilot-finalizer`
// condition (deploy/local/guest-toolchains/bundle-js.mjs); the phase world has no such import.
import { inputs } from 'wasmpilot:operator/finalizer-inputs@0.1.0';

export const hostFinalizerInputs = inputs;
