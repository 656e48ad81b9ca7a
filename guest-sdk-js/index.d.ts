// Types of @wasmpilot/guest: write wasmpilot operator workers in JavaScript (componentize-js).

/** A log level, as the WIT `log.level` enum names it. */
export type LogLevelName = 'trace' | 'debug' | 'info' | 'warn' | 'error';
export declare const LogLevel: Readonly<{
  TRACE: 'trace';
  DEBUG: 'debug';
  INFO: 'info';
  WARN: 'warn';
  ERROR: 'error';
}>;

/** Log fields: written in key order, values as `String(value)`. */
export type LogFields = Record<string, unknown>;

/** One log line a worker wrote; kept natively (tests), sent to the host in a component. */
export declare class LogRecord {
  readonly level: LogLevelName;
  readonly message: string;
  readonly fields: [string, string][];
  /** The value of the field `key`, if the record has one. */
  field(key: string): string | undefined;
  toString(): string;
}

/** The run a worker is deciding: which operator and phase, the host's clock, and a logger. */
export declare class Context {
  /** The name of the WasmOperator this worker belongs to. */
  readonly operator: string;
  /** The phase being run (`"finalizer"` for a finalizer worker). */
  readonly phase: string;
  /** The host's clock when it started this run. Workers have no other clock. */
  readonly now: Date;
  log(level: LogLevelName, message: string, fields?: LogFields): void;
  trace(message: string, fields?: LogFields): void;
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  /** The records written so far, removed from the context (always empty in a component). */
  takeLogs(): LogRecord[];
}

export type ErrorKindName = 'retryable' | 'fatal';
export declare const ErrorKind: Readonly<{ RETRYABLE: 'retryable'; FATAL: 'fatal' }>;

/** The error a worker throws instead of returning an Outcome. */
export declare class WorkerError extends Error {
  constructor(kind: ErrorKindName, message: string);
  readonly kind: ErrorKindName;
  /** Transient: the host retries with exponential backoff. */
  static retryable(message: string): WorkerError;
  /** Permanent for these inputs: a Condition and an Event; runs again on a change or resync. */
  static fatal(message: string): WorkerError;
  readonly isFatal: boolean;
  readonly isRetryable: boolean;
  /** The same kind of error, its message prefixed: `"{context}: {message}"`. */
  context(context: unknown): WorkerError;
  /** `"fatal: message"` or `"retryable: message"`. */
  toString(): string;
}

/** A type objects can be parsed into: `fromJSON` throws (with a message saying what is wrong)
 * when the JSON does not fit. */
export interface FromJson<T> {
  readonly name: string;
  fromJSON(value: unknown): T;
}

/** A Kubernetes object as JSON. */
export type KubernetesObject = { apiVersion: string; kind: string; metadata: { name: string; [key: string]: unknown }; [key: string]: unknown };

/** The phase's declared inputs, each a list of whole Kubernetes objects as JSON. */
export declare class Inputs {
  constructor(inputs: [string, string[]][]);
  /** The declared input names, in declaration order. */
  names(): string[];
  /** The objects of input `name` as JSON strings, or undefined if the phase declares no such input. */
  getRaw(name: string): string[] | undefined;
  /** The objects of input `name` as JSON strings; a fatal WorkerError if it is not declared. */
  raw(name: string): string[];
  /** Every object of input `name`, parsed (through `type.fromJSON` if given); a fatal
   * WorkerError for an undeclared input or an object that does not parse. */
  list(name: string): any[];
  list<T>(name: string, type: FromJson<T>): T[];
  /** The samples of a metric query the phase declared (`queries` in the WasmOperator). */
  samples(name: string): Sample[];
}

/** One sample of a metric query result. */
export declare class Sample {
  constructor(timestamp: number, value: number | null, labels?: Record<string, string>);
  /** Evaluation time, seconds since the Unix epoch. */
  readonly timestamp: number;
  /** The value; null when Prometheus answered NaN or ±Inf. */
  readonly value: number | null;
  readonly labels: Record<string, string>;
  static fromJSON(value: unknown): Sample;
}

/** A label selector Kubernetes would not accept, named by field and worded as the host's
 * `InvalidSelector`: `"{field}: {problem}"`. */
export declare class SelectorError extends Error {
  constructor(field: string, problem: string);
  /** Where the problem is, e.g. `spec.deploymentSelector.matchExpressions[0].operator`. */
  readonly field: string;
  readonly problem: string;
}

/** A checked label selector (`matchLabels` AND `matchExpressions`), for workers that match
 * objects themselves; the empty selector matches everything. Inputs declaring `selectorFrom`,
 * `matchLabels` or `matchExpressions` are already selected by the host. */
export declare class LabelSelector {
  /** The empty selector; `fromJSON` parses one. */
  constructor();
  /** Parses a selector (`{ matchLabels, matchExpressions }` as JSON) found at `field`
   * (default `"selector"`; errors name it). Throws a SelectorError as the host would refuse
   * it: not an object, malformed parts, an empty key, an unknown operator, In/NotIn without
   * values, Exists/DoesNotExist with values. */
  static fromJSON(value: unknown, field?: string): LabelSelector;
  /** Whether an object with `labels` (undefined or null: none) is selected. */
  matches(labels: Record<string, string> | null | undefined): boolean;
}

/** What a phase worker decided. */
export declare class Outcome {
  /** Move to `phase` (which may be the current one) with no status change and no outputs. */
  static next(phase: string): Outcome;
  readonly nextPhase: string;
  readonly statusPatch: Record<string, unknown> | undefined;
  /** The objects to apply, parsed again from what was added: a fresh copy at each read. */
  readonly outputs: Record<string, unknown>[];
  /** The objects to apply as the JSON the host gets (keys in code point order), one string each. */
  readonly outputJson: string[];
  /** How many objects were added. */
  readonly outputCount: number;
  readonly requeueAfterMs: number | undefined;
  /** Merge into `.status` (host-owned fields dropped); merges with an earlier call. */
  status(status: Record<string, unknown>): Outcome;
  /** Add one object to server-side apply; a fatal WorkerError without apiVersion, kind, metadata.name. */
  output(object: KubernetesObject | Record<string, unknown>): Outcome;
  outputsFrom(objects: Iterable<KubernetesObject | Record<string, unknown>>): Outcome;
  /** Run this resource again after `ms` milliseconds. */
  requeueAfter(ms: number): Outcome;
}

/** What a finalizer worker decided. */
export declare class Finalized {
  static done(): Finalized;
  static pending(ms: number): Finalized;
  readonly isDone: boolean;
  readonly statusPatch: Record<string, unknown> | undefined;
  readonly requeueAfterMs: number | undefined;
  status(status: Record<string, unknown>): Finalized;
}

/** Decides one phase of a resource; export it with `exportPhase`. */
export declare abstract class PhaseWorker<R = any> {
  /** What the resource is parsed into; undefined: plain JSON. */
  static resourceType: FromJson<unknown> | undefined;
  abstract sync(ctx: Context, resource: R, inputs: Inputs): Outcome;
}

/** Cleans up when a resource carrying the operator's finalizer is deleted; export it with `exportFinalizer`. */
export declare abstract class FinalizerWorker<R = any> {
  static resourceType: FromJson<unknown> | undefined;
  /** `inputs`: the finalizer's declared inputs (`spec.finalizer.inputs`). */
  abstract finalize(ctx: Context, resource: R, inputs: Inputs): Finalized;
}

/** The WIT records, as componentize-js passes them. */
export interface SyncRequest {
  operator: string;
  phase: string;
  resource: string;
  inputs: { name: string; objects: string[] }[];
  now: string;
}
export interface SyncResult {
  nextPhase: string;
  statusInfo: string | undefined;
  outputs: string[];
  requeueAfterMs: bigint | undefined;
}
export interface FinalizeRequest {
  operator: string;
  resource: string;
  now: string;
}
export interface FinalizeResult {
  done: boolean;
  statusInfo: string | undefined;
  requeueAfterMs: bigint | undefined;
}

/** `export const phaseWorker = exportPhase(MyWorker)`: the `phase-worker` export. */
export declare function exportPhase(worker: new () => PhaseWorker): { sync(request: SyncRequest): SyncResult };
/** `export const finalizerWorker = exportFinalizer(MyFinalizer)`: the `finalizer-worker` export. */
export declare function exportFinalizer(worker: new () => FinalizerWorker): {
  finalize(request: FinalizeRequest): FinalizeResult;
};

/** Compact JSON with object keys sorted by code point, as the Rust SDK writes it. */
export declare function toJson(value: unknown): string;
/** The UTF-8 length of `JSON.stringify(value)`, counted without building the text. */
export declare function jsonSize(value: unknown): number;
/** What was thrown, as text: an Error's `name: message`, anything else (an engine's plain
 * string such as `out of memory`) as a string. */
export declare function describeThrown(err: unknown): string;
/** Orders strings by Unicode code point (as Rust and Python compare strings). */
export declare function compareText(a: string, b: string): number;
/** Sorts `texts` in place by code point and returns it: the engine's own sort unless a text
 * holds a surrogate (faster than `sort(compareText)`). */
export declare function sortText<T extends string>(texts: T[]): T[];
/** Sorts `items` in place by the text `keyOf(item)`, in code point order, and returns it. */
export declare function sortByText<T>(items: T[], keyOf: (item: T) => string): T[];
/** `pattern`, compiled now by testing it on each sample (`''` when none), `lastIndex` reset:
 * call it where a pattern is defined, at a module's top level, so the component's snapshot
 * holds it compiled. Otherwise SpiderMonkey compiles it at its first test in every call's fresh
 * instance. Patterns are compiled apart for text beyond U+00FF: give such a sample too if that
 * is the usual input. */
export declare function precompiled<P extends RegExp>(pattern: P, ...samples: string[]): P;

/** The `.status` fields the host writes on every resource it manages. */
export declare class HostStatus {
  static of(resource: unknown): HostStatus;
  readonly phase: string | undefined;
  readonly observedGeneration: number | undefined;
  readonly conditions: Record<string, unknown>[];
  readonly moduleDigest: string | undefined;
  /** The last phase transitions, oldest first. */
  readonly history: Transition[];
}

/** One phase transition as the host recorded it. */
export declare class Transition {
  readonly from: string;
  readonly to: string;
  readonly time: string;
  readonly generation: number | undefined;
  readonly module: string | undefined;
  readonly inputHash: string | undefined;
  readonly applied: number;
  readonly pruned: number;
}

/** A Kubernetes object's `metadata`, as far as workers read or write it. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  generateName?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: Record<string, unknown>[];
  managedFields?: Record<string, unknown>[];
}

/** The typed view of a phase's inputs; the generated `<Phase>Inputs` (`wasmpilot generate`)
 * add one accessor per declared input and metric query. */
export declare class InputsView {
  constructor(inputs: Inputs);
  /** The untyped inputs, for what the accessors do not cover. */
  readonly untyped: Inputs;
}

/** What a phase decided, built through its generated `<Phase>Outcome`: one static method per
 * phase it may move to (and `next`, `stay`), one method per declared output kind. */
export declare class PhaseOutcome {
  protected constructor(outcome: Outcome);
  /** The phase this outcome is decided in (set by the generated subclass). */
  protected static readonly phase: string;
  /** The phases it may move to (set by the generated subclass). */
  protected static readonly allowed: readonly string[];
  /** Moves to `phase`; a fatal WorkerError if the phase may not. */
  protected static move(phase: string): PhaseOutcome;
  /** The SDK's untyped decision (what `sync` returns). */
  readonly untyped: Outcome;
  /** The phase this outcome is decided in. */
  readonly currentPhase: string;
  /** Merge into `.status` (see `Outcome.status`). */
  status(status: Record<string, unknown>): this;
  /** Run this resource again after `ms` milliseconds. */
  requeueAfter(ms: number): this;
  /** The phase this outcome moves to. */
  readonly nextPhase: string;
  /** Adds an output of `apiVersion` `kind` (filled in when absent; another kind is a fatal
   * WorkerError). The generated methods call it; a worker calls those. */
  protected outputOfKind(apiVersion: string, kind: string, object: object): this;
  protected outputsOfKind(apiVersion: string, kind: string, objects: Iterable<object>): this;
}

/** A phase worker written against its phase's generated inputs and outcome: subclass the
 * generated `<Phase>Worker` and implement `decide`. Export and test it as any `PhaseWorker`. */
export declare abstract class TypedPhaseWorker<R, I extends InputsView, O extends PhaseOutcome> extends PhaseWorker<R> {
  /** Runs `decide` with the typed inputs and returns its untyped outcome. */
  sync(ctx: Context, resource: R, inputs: Inputs): Outcome;
  /** Decides the phase through its typed outcome. */
  abstract decide(ctx: Context, resource: R, inputs: I): O;
}
