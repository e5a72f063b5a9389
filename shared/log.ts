// Logs are JSON lines on stderr: never on stdout, which is a frame channel
// in every child process.
import { CustodyError } from './errors.js';
import { stderrSink } from './log-sink.js';
import { wellFormed } from './text/cut.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export const LOG_LEVELS: Readonly<Record<LogLevel, number>> = { debug: 10, info: 20, warn: 30, error: 40 };
const LEVELS = LOG_LEVELS;

export interface Logger {
  debug(event: string, fields?: Record<string, unknown>): void;
  info(event: string, fields?: Record<string, unknown>): void;
  warn(event: string, fields?: Record<string, unknown>): void;
  error(event: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export interface LoggerOptions {
  readonly level?: LogLevel;
  readonly write?: (line: string) => void;
}

function levelFromEnv(): LogLevel {
  const value = process.env.CUSTODY_LOG_LEVEL;
  return value === 'debug' || value === 'info' || value === 'warn' || value === 'error' ? value : 'info';
}

/** Turn an error into loggable fields, keeping its code and the chain of causes. */
export function errorFields(error: unknown): Record<string, unknown> {
  if (error instanceof CustodyError) {
    return { code: error.code, message: error.message, ...(error.cause ? { cause: errorFields(error.cause) } : {}) };
  }
  if (error instanceof Error) {
    return { message: error.message, ...('code' in error ? { code: error.code } : {}), ...(error.cause ? { cause: errorFields(error.cause) } : {}) };
  }
  return { message: String(error) };
}

export function createLogger(base: Record<string, unknown> = {}, options: LoggerOptions = {}): Logger {
  const threshold = LEVELS[options.level ?? levelFromEnv()];
  const write = options.write ?? ((line: string) => stderrSink().write(line));
  const emit = (level: LogLevel, event: string, fields?: Record<string, unknown>) => {
    if (LEVELS[level] < threshold) return;
    const record = { ts: new Date().toISOString(), level, ...base, event, ...fields };
    // Fields never rename the event (a relayed adapter's log included): a host acts on some events (docs/PROTOCOL.md §11.7).
    record.event = event;
    record.level = level;
    let line: string;
    try {
      // Lone surrogates become U+FFFD: JSON.stringify escapes them as \udXXX, which strict readers (serde_json) refuse.
      line = JSON.stringify(record, wellFormedMember);
    } catch {
      line = JSON.stringify({ ts: record.ts, level, ...base, event, unserializable: true });
    }
    write(line + '\n');
  };
  return {
    debug: (event, fields) => emit('debug', event, fields),
    info: (event, fields) => emit('info', event, fields),
    warn: (event, fields) => emit('warn', event, fields),
    error: (event, fields) => emit('error', event, fields),
    child: (fields) => createLogger({ ...base, ...fields }, options),
  };
}

/**
 * JSON.stringify's replacer for a log line: a bigint as its digits, and every
 * string and member name well-formed (lone surrogates → U+FFFD; escaped as
 * \udXXX, strict readers such as serde_json refuse the line).
 */
function wellFormedMember(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string') return wellFormed(value);
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).some((key) => wellFormed(key) !== key)) {
    return Object.fromEntries(Object.entries(value).map(([key, member]) => [wellFormed(key), member as unknown]));
  }
  return value;
}
