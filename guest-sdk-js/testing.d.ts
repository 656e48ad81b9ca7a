// Types of @wasmpilot/guest/testing: run workers natively under `node --test`.
import type { FinalizerWorker, LogRecord, PhaseWorker, SyncRequest, WorkerError } from './index.js';

export declare const DEFAULT_NOW: string;
export declare const DEFAULT_OPERATOR: string;

/** A run that ended in a WorkerError, with the log lines written before it. */
export declare class FailedRun extends Error {
  readonly error: WorkerError;
  readonly logs: LogRecord[];
}

/** What a phase worker returned, parsed back from the JSON the host would receive. */
export declare class SyncReport {
  readonly nextPhase: string;
  readonly status: Record<string, unknown> | undefined;
  readonly outputs: any[];
  readonly requeueAfterMs: number | undefined;
  readonly logs: LogRecord[];
  outputsOfKind(kind: string): any[];
  output(kind: string, name: string): any | undefined;
  logged(text: string): boolean;
}

/** A phase worker run to set up: resource, inputs, phase, clock. */
export declare class SyncTest {
  constructor(resource: unknown);
  operator(name: string): SyncTest;
  phase(name: string): SyncTest;
  now(rfc3339: string): SyncTest;
  input(name: string, objects: Iterable<unknown>): SyncTest;
  /** Adds the objects the host would hand over for an input declared with
   * `selectorFrom: <selectorField>`; see `selectedBy`. */
  inputSelected(name: string, selectorField: string, objects: Iterable<unknown>): SyncTest;
  emptyInput(name: string): SyncTest;
  inputJson(name: string, objects: string[]): SyncTest;
  request(): SyncRequest;
  /** Throws a FailedRun if the worker returns an error. */
  run(worker: PhaseWorker): SyncReport;
  /** Expects a WorkerError; throws if the worker decided. */
  fail(worker: PhaseWorker): FailedRun;
}

/** A finalizer worker run to set up. */
export declare class FinalizeTest {
  constructor(resource: unknown);
  operator(name: string): FinalizeTest;
  now(rfc3339: string): FinalizeTest;
  /** Adds objects to the finalizer's input `name`, declaring it if new. */
  input(name: string, objects: Iterable<unknown>): FinalizeTest;
  inputSelected(name: string, selectorField: string, objects: Iterable<unknown>): FinalizeTest;
  emptyInput(name: string): FinalizeTest;
  run(worker: FinalizerWorker): {
    done: boolean;
    status: Record<string, unknown> | undefined;
    requeueAfterMs: number | undefined;
    logs: LogRecord[];
  };
}

/** The objects the host hands a worker for an input declared with `selectorFrom:
 * <selectorField>`: those in the resource's namespace whose labels match the selector at that
 * field of the resource. Throws a SelectorError where the host would report InvalidSelector. */
export declare function selectedBy<T>(resource: unknown, selectorField: string, objects: Iterable<T>): T[];

/** Multi-document YAML into objects (`kind: List` items one by one, empty documents skipped). */
export declare function objectsFromYaml(yaml: string): any[];
