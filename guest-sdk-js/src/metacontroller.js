// Run an existing Metacontroller hook function as a wasmpilot worker, unchanged: the function
// takes the hook request (`controller`, `parent`, `children`, `related`, `finalizing`) and
// returns the response (`status`, `children`, `resyncAfterSeconds`; a finalize hook also
// `finalized`), as Metacontroller's nodejs hooks do.
//
//   import { syncWorker } from '@wasmpilot/guest/metacontroller';
//   import { sync } from './hook.js';
//   export const phaseWorker = exportPhase(syncWorker(sync));
//
// Inputs named `children/<Kind>.<apiVersion>` (owned) and `related/<Kind>.<apiVersion>` fill the
// request's maps (`wasmpilot import metacontroller` declares them), keyed as the hook's version
// says (v1: the name, `namespace/name` for a namespaced object of a cluster-scoped parent; v2:
// `namespace/name` for every namespaced object). The same as the Python SDK's
// `wasmpilot_guest.metacontroller`.
import { WorkerError } from './errors.js';
import { FinalizerWorker, PhaseWorker } from './export.js';
import { Finalized, Outcome } from './outcome.js';

export const CHILDREN = 'children/';
export const RELATED = 'related/';

/** The hook request Metacontroller would send for `parent` with these inputs. */
export function hookRequest(ctx, parent, inputs, version, finalizing) {
  if (version !== 'v1' && version !== 'v2') {
    throw WorkerError.fatal(`metacontroller hook version ${JSON.stringify(version)} is not v1 or v2`);
  }
  const parentNamespaced = Boolean(parent?.metadata?.namespace);
  return {
    controller: {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: ctx.operator },
    },
    parent,
    children: objects(inputs, CHILDREN, version, parentNamespaced),
    related: objects(inputs, RELATED, version, parentNamespaced),
    finalizing,
  };
}

function objects(inputs, prefix, version, parentNamespaced) {
  const groups = {};
  for (const name of inputs.names()) {
    if (!name.startsWith(prefix)) continue;
    const group = (groups[name.slice(prefix.length)] ??= {});
    for (const obj of inputs.list(name)) {
      group[key(obj, version, parentNamespaced)] = obj;
    }
  }
  return groups;
}

function key(obj, version, parentNamespaced) {
  const { name = '', namespace } = obj?.metadata ?? {};
  return namespace && (version === 'v2' || !parentNamespaced) ? `${namespace}/${name}` : String(name);
}

function respond(hook, request) {
  let answer;
  try {
    answer = hook(request);
  } catch (err) {
    if (err instanceof WorkerError) throw err;
    throw WorkerError.retryable(`the metacontroller hook failed: ${err?.name ?? 'Error'}: ${err?.message ?? err}`);
  }
  if (answer === null || typeof answer !== 'object' || Array.isArray(answer)) {
    throw WorkerError.fatal(`the metacontroller hook answered ${Array.isArray(answer) ? 'a list' : typeof answer}, not a response object`);
  }
  if (answer.children != null && !Array.isArray(answer.children)) {
    throw WorkerError.fatal("the metacontroller hook's children is not a list of objects");
  }
  if (answer.status != null && (typeof answer.status !== 'object' || Array.isArray(answer.status))) {
    throw WorkerError.fatal("the metacontroller hook's status is not an object");
  }
  return answer;
}

function resyncMs(answer) {
  const seconds = answer.resyncAfterSeconds;
  if (seconds == null) return undefined;
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) {
    throw WorkerError.fatal("the metacontroller hook's resyncAfterSeconds is not a number of seconds");
  }
  return seconds > 0 ? Math.round(seconds * 1000) : undefined;
}

/** A phase worker class (export it with `exportPhase`) running the sync hook `hook`: it stays in
 * its phase, its children the outputs, its status the status patch. */
export function syncWorker(hook, version = 'v1') {
  return class MetacontrollerSync extends PhaseWorker {
    sync(ctx, resource, inputs) {
      const answer = respond(hook, hookRequest(ctx, resource, inputs, version, false));
      const outcome = Outcome.next(ctx.phase).outputsFrom(answer.children ?? []);
      if (answer.status != null) outcome.status(answer.status);
      const ms = resyncMs(answer);
      if (ms !== undefined) outcome.requeueAfter(ms);
      return outcome;
    }
  };
}

/** A finalizer worker class (export it with `exportFinalizer`) running the finalize hook `hook`
 * with `finalizing: true`: done when it answers `finalized: true`, else asked again after
 * `resyncAfterSeconds` (10 s unless it says). Its children are not applied: the resource's
 * outputs go with it. */
export function finalizeWorker(hook, version = 'v1') {
  return class MetacontrollerFinalize extends FinalizerWorker {
    finalize(ctx, resource, inputs) {
      const answer = respond(hook, hookRequest(ctx, resource, inputs, version, true));
      const finalized = answer.finalized ?? false;
      if (typeof finalized !== 'boolean') {
        throw WorkerError.fatal("the metacontroller hook's finalized is not true or false");
      }
      const decided = finalized ? Finalized.done() : Finalized.pending(resyncMs(answer) ?? 10_000);
      if (answer.status != null) decided.status(answer.status);
      return decided;
    }
  };
}
