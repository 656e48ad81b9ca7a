"""Run an existing Metacontroller hook function as a wasmpilot worker, unchanged.

A Metacontroller CompositeController hook takes the sync request (`controller`, `parent`,
`children`, `related`, `finalizing`) and answers `status`, `children` and `resyncAfterSeconds`
(its finalize hook also `finalized`). Wrap the function that maps one to the other:

    # workers/sync/app.py
    import wasmpilot_guest as guest
    import wasmpilot_guest.metacontroller as metacontroller
    from hook import sync            # your hook: def sync(request: dict) -> dict

    PhaseWorker = guest.export_phase(metacontroller.sync_worker(sync))

The WasmOperator declares what Metacontroller's controller did, in inputs named after the
request's maps (`wasmpilot import metacontroller` writes them):

- `children/<Kind>.<apiVersion>` (`owned: true`): the children of one kind, e.g.
  `children/ConfigMap.v1` → `request["children"]["ConfigMap.v1"]`;
- `related/<Kind>.<apiVersion>`: the related objects of one kind (what the customize hook chose
  is declared on the input: `namespaceFrom`, `nameFrom`, `selectorFrom`, …).

Each map is keyed as the hook's `version` says: `v1` (the object's name; `namespace/name` for a
namespaced object of a cluster-scoped parent) or `v2` (`namespace/name` for every namespaced
object, `name` for cluster-scoped ones). The answer's `children` become the phase's outputs,
`status` its status patch (merged into the resource's status, where Metacontroller replaces it),
`resyncAfterSeconds` when it runs again. A hook that raises is retried with backoff; an answer
that is not a response is a fatal error naming what is wrong.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Mapping, Optional

from .context import Context
from .errors import WorkerError
from .export import FinalizerWorker, PhaseWorker
from .inputs import Inputs
from .outcome import Finalized, Outcome

#: The prefix of the inputs holding a child kind's objects.
CHILDREN = "children/"
#: The prefix of the inputs holding a related kind's objects.
RELATED = "related/"

Hook = Callable[[dict[str, Any]], Any]


def request(ctx: Context, parent: Any, inputs: Inputs, version: str, finalizing: bool) -> dict[str, Any]:
    """The hook request Metacontroller would send for `parent` with these inputs."""
    if version not in ("v1", "v2"):
        raise WorkerError.fatal(f"metacontroller hook version {version!r} is not v1 or v2")
    parent_namespaced = bool((parent.get("metadata") or {}).get("namespace"))
    return {
        "controller": {
            "apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "CompositeController",
            "metadata": {"name": ctx.operator},
        },
        "parent": parent,
        "children": _objects(inputs, CHILDREN, version, parent_namespaced),
        "related": _objects(inputs, RELATED, version, parent_namespaced),
        "finalizing": finalizing,
    }


def _objects(inputs: Inputs, prefix: str, version: str, parent_namespaced: bool) -> dict[str, dict[str, Any]]:
    """`{"<Kind>.<apiVersion>": {key: object}}` of the inputs named `<prefix><Kind>.<apiVersion>`."""
    groups: dict[str, dict[str, Any]] = {}
    for name in inputs.names():
        if not name.startswith(prefix):
            continue
        group = groups.setdefault(name[len(prefix) :], {})
        for obj in inputs.list(name):
            group[_key(obj, version, parent_namespaced)] = obj
    return groups


def _key(obj: Mapping[str, Any], version: str, parent_namespaced: bool) -> str:
    meta = obj.get("metadata") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace")
    if namespace and (version == "v2" or not parent_namespaced):
        return f"{namespace}/{name}"
    return str(name)


def _response(hook: Hook, req: dict[str, Any]) -> dict[str, Any]:
    try:
        answer = hook(req)
    except WorkerError:
        raise
    except Exception as err:  # the hook's own failure: Metacontroller retries a failed call
        raise WorkerError.retryable(f"the metacontroller hook failed: {type(err).__name__}: {err}") from err
    if not isinstance(answer, Mapping):
        raise WorkerError.fatal(f"the metacontroller hook answered {type(answer).__name__}, not a response object")
    children = answer.get("children")
    if children is not None and not isinstance(children, list):
        raise WorkerError.fatal("the metacontroller hook's children is not a list of objects")
    status = answer.get("status")
    if status is not None and not isinstance(status, Mapping):
        raise WorkerError.fatal("the metacontroller hook's status is not an object")
    return dict(answer)


def _resync(answer: Mapping[str, Any]) -> Optional[timedelta]:
    seconds = answer.get("resyncAfterSeconds")
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise WorkerError.fatal("the metacontroller hook's resyncAfterSeconds is not a number of seconds")
    return timedelta(seconds=seconds) if seconds > 0 else None


def sync_worker(hook: Hook, version: str = "v1") -> type[PhaseWorker]:
    """A phase worker class (export it: `PhaseWorker = export_phase(sync_worker(hook))`) running the Metacontroller sync hook `hook`:
    it stays in its phase, its children the outputs, its status the status patch."""

    class MetacontrollerSync(PhaseWorker):
        def sync(self, ctx: Context, resource: Any, inputs: Inputs) -> Outcome:
            answer = _response(hook, request(ctx, resource, inputs, version, finalizing=False))
            outcome = Outcome.next(ctx.phase).outputs_from(answer.get("children") or [])
            if answer.get("status") is not None:
                outcome.status(answer["status"])
            delay = _resync(answer)
            if delay is not None:
                outcome.requeue_after(delay)
            return outcome

    MetacontrollerSync.__name__ = MetacontrollerSync.__qualname__ = f"MetacontrollerSync[{getattr(hook, '__name__', 'hook')}]"
    return MetacontrollerSync


def finalize_worker(hook: Hook, version: str = "v1") -> type[FinalizerWorker]:
    """A finalizer worker class (export it: `FinalizerWorker =
    export_finalizer(finalize_worker(hook))`) running the Metacontroller finalize
    hook `hook` with `finalizing: true`: done when it answers `finalized: true`, else asked
    again after `resyncAfterSeconds` (or on the next change). The children it answers are not
    applied: the resource's outputs carry its controller reference and go with it."""

    class MetacontrollerFinalize(FinalizerWorker):
        def finalize(self, ctx: Context, resource: Any, inputs: Inputs) -> Finalized:
            answer = _response(hook, request(ctx, resource, inputs, version, finalizing=True))
            finalized = answer.get("finalized", False)
            if not isinstance(finalized, bool):
                raise WorkerError.fatal("the metacontroller hook's finalized is not true or false")
            decided = Finalized.done() if finalized else Finalized.pending(_resync(answer) or timedelta(seconds=10))
            if answer.get("status") is not None:
                decided.status(answer["status"])
            return decided

    MetacontrollerFinalize.__name__ = MetacontrollerFinalize.__qualname__ = f"MetacontrollerFinalize[{getattr(hook, '__name__', 'hook')}]"
    return MetacontrollerFinalize
