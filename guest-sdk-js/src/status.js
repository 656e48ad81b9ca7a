// The `.status` fields the host writes on every resource it manages, for workers to read. Any
// of them a worker sends back in a status patch is dropped (see `Outcome.status`).

/** One phase transition as the host recorded it: which code decided it, and from what. */
export class Transition {
  constructor(value) {
    this.from = value.from ?? '';
    this.to = value.to ?? '';
    /** When the host wrote it (RFC 3339). */
    this.time = value.time ?? '';
    /** The resource's `.metadata.generation` the worker saw. */
    this.generation = value.generation;
    /** The component that decided (`sha256:…`); undefined when the host itself moved the
     * resource (a spec change after a final phase). */
    this.module = value.module;
    /** The sha256 of the exact request the worker received: replaying that request against
     * `module` gives the same decision. */
    this.inputHash = value.inputHash;
    /** Outputs applied and pruned by this decision. */
    this.applied = value.applied ?? 0;
    this.pruned = value.pruned ?? 0;
  }
}

/** The `.status` fields the wasmpilot host writes.
 *
 *     const host = HostStatus.of(resource);
 *     const last = host.history.at(-1)?.to;
 */
export class HostStatus {
  constructor(status = {}) {
    /** The current phase, set by the host from the worker's decision. */
    this.phase = status.phase;
    /** The `.metadata.generation` the host last ran a worker for. */
    this.observedGeneration = status.observedGeneration;
    /** Conditions set by the host (`Synced`). */
    this.conditions = [...(status.conditions ?? [])];
    /** The digest (`sha256:…`) of the component that decided the current phase. */
    this.moduleDigest = status.moduleDigest;
    /** The last phase transitions, oldest first (the WasmOperator's `historyLimit`, default 10). */
    this.history = (status.history ?? []).map((t) => new Transition(t));
  }

  /** The host-written fields of a resource's `.status` (defaults where there are none). */
  static of(resource) {
    return new HostStatus(resource?.status ?? {});
  }
}
