// What a worker knows about its run besides the resource: names, the host's clock, logging.
import { hostLog } from '#host-log';

/** Log levels, as the WIT `log.level` enum names them. */
export const LogLevel = Object.freeze({
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
});

/** One log line a worker wrote. In a component it goes straight to the host; natively
 * (tests) it is kept and returned by `@wasmpilot/guest/testing`. */
export class LogRecord {
  constructor(level, message, fields) {
    this.level = level;
    this.message = message;
    /** `[key, value]` pairs, values already formatted as text. */
    this.fields = fields;
  }

  /** The value of the field `key`, if the record has one. */
  field(key) {
    return this.fields.find(([k]) => k === key)?.[1];
  }

  toString() {
    const level = this.level[0].toUpperCase() + this.level.slice(1);
    return [`${level} ${this.message}`, ...this.fields.map(([k, v]) => `${k}=${v}`)].join(' ');
  }
}

/** The run a worker is deciding: which operator and phase, the host's clock, and a logger.
 *
 *     ctx.info('creating service', { deployment: 'web', port: 8080 });
 *     const started = ctx.now; // a Date
 */
export class Context {
  #logs = [];

  constructor(operator, phase, now) {
    /** The name of the WasmOperator this worker belongs to. */
    this.operator = operator;
    /** The phase being run: the resource's current `.status.phase`, or the initial phase.
     * For a finalizer worker: `"finalizer"`. */
    this.phase = phase;
    /** The host's clock when it started this run (a Date). Workers have no other clock. */
    this.now = now;
  }

  /** Writes a log line with key/value fields (an object, in its key order). */
  log(level, message, fields = {}) {
    if (hostLog) {
      const hostFields = [];
      for (const key of Object.keys(fields)) hostFields.push({ key, value: String(fields[key]) });
      hostLog(level, message, hostFields);
    } else {
      const record = new LogRecord(
        level,
        message,
        Object.entries(fields).map(([key, value]) => [key, String(value)]),
      );
      console.error(`[${this.operator} ${this.phase}] ${record}`);
      this.#logs.push(record);
    }
  }

  trace(message, fields) {
    this.log(LogLevel.TRACE, message, fields);
  }

  debug(message, fields) {
    this.log(LogLevel.DEBUG, message, fields);
  }

  /** Writes an info line: `ctx.info('synced', { services: 3 })`. */
  info(message, fields) {
    this.log(LogLevel.INFO, message, fields);
  }

  warn(message, fields) {
    this.log(LogLevel.WARN, message, fields);
  }

  error(message, fields) {
    this.log(LogLevel.ERROR, message, fields);
  }

  /** The records written so far, removed from the context (always empty in a component). */
  takeLogs() {
    const logs = this.#logs;
    this.#logs = [];
    return logs;
  }
}
