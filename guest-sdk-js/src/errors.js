// Why a worker could not decide: retry later (with backoff), or give up on these inputs (run
// again on the next change or resync).

/** Whether the host should retry a failed run. */
export const ErrorKind = Object.freeze({
  /** Transient: the host retries with exponential backoff. */
  RETRYABLE: 'retryable',
  /** Permanent for this generation of the resource: reported as a Condition and an Event,
   * not retried until the resource or an input changes. */
  FATAL: 'fatal',
});

/** The error a worker throws instead of returning an `Outcome`. */
export class WorkerError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'WorkerError';
    this.kind = kind;
  }

  /** A transient failure: the host runs the worker again with backoff. */
  static retryable(message) {
    return new WorkerError(ErrorKind.RETRYABLE, message);
  }

  /** A permanent failure for these inputs: reported as a Condition and an Event, not retried
   * with backoff; the worker runs again when the resource or an input changes, or at the
   * resync interval. */
  static fatal(message) {
    return new WorkerError(ErrorKind.FATAL, message);
  }

  get isFatal() {
    return this.kind === ErrorKind.FATAL;
  }

  get isRetryable() {
    return this.kind === ErrorKind.RETRYABLE;
  }

  /** The same kind of error, its message prefixed: `"{context}: {message}"`. */
  context(context) {
    return new WorkerError(this.kind, `${context}: ${this.message}`);
  }

  toString() {
    return `${this.kind}: ${this.message}`;
  }
}
