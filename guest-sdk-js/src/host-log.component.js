// The host's `log` import, inside a component: bundles resolve `#host-log` here through the
// `wasmpilot-component` condition (deploy/local/guest-toolchains/bundle-js.mjs).
import { log } from 'wasmpilot:operator/log@0.1.0';

export const hostLog = log;
