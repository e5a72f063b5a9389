// Where every process's log lines go: stderr, through a bounded backlog
// (README "Logs"). A write to a pipe whose reader is slow or stopped (a log
// collector under SIGSTOP, a paused `| less`) is queued in this process's
// memory; unbounded, a reader that stops for an hour holds the service's
// whole log for that hour in RAM. Past the bound a line is dropped and
// counted, and the first line written once the reader catches up says how
// many were lost. A reader that is gone (EPIPE: a `| head` that left, a
// collector that restarted) makes every write fail; that failure is the
// log's only, and never ends the process.
//
// stderr redirected to a regular file (`2>>custody.log`) is written here
// directly (fs.writeSync on its descriptor), not through process.stderr: a
// write that failed there (ENOSPC: the log's disk full) destroyed the stream,
// and the service logged nothing more for the rest of its life, even once
// space was freed. Now each line that cannot be written is dropped and
// counted, a line cut short by the full disk is ended before the next one,
// and the first line written afterwards says how many were lost.
import { fstatSync, writeSync } from 'node:fs';
import type { Writable } from 'node:stream';

/** Bytes of log a process queues for a reader that does not keep up (CUSTODY_LOG_BACKLOG_BYTES). */
export const LOG_BACKLOG_DEFAULT_BYTES = 8 * 1024 * 1024;
export const LOG_BACKLOG_MIN_BYTES = 4096;
export const LOG_BACKLOG_MAX_BYTES = 1024 * 1024 * 1024;

/** The backlog bound from the environment (children inherit it); the default for a value that is not a whole number within the bounds. */
export function logBacklogBytes(value = process.env.CUSTODY_LOG_BACKLOG_BYTES): number {
  const bytes = value === undefined || !/^\d{1,10}$/.test(value) ? NaN : Number(value);
  return bytes >= LOG_BACKLOG_MIN_BYTES && bytes <= LOG_BACKLOG_MAX_BYTES ? bytes : LOG_BACKLOG_DEFAULT_BYTES;
}

export class LogSink {
  readonly #stream: Writable;
  readonly #maxBytes: number;
  /** The descriptor of a regular file the stream writes to, written directly; null for a pipe or a terminal. */
  readonly #file: number | null;
  #dropped = 0;
  #droppedBytes = 0;
  /** The file holds the start of a line whose end could not be written. */
  #torn = false;
  /** Why lines were dropped from the file (the error's code). */
  #fileError = '';

  constructor(stream: Writable, maxBytes: number, file: number | null = null) {
    this.#stream = stream;
    this.#maxBytes = maxBytes;
    this.#file = file;
    // Errors are the reader's going away: nothing to do but stop caring.
    stream.on('error', () => undefined);
  }

  /** Lines dropped since the last report. */
  get dropped(): number {
    return this.#dropped;
  }

  /**
   * Queue `text` (whole lines) if nothing waits or it fits within the bound
   * with what waits; otherwise it is counted and dropped. So what waits is
   * never more than the bound and one line, and a line longer than the bound
   * still reaches a reader that keeps up.
   */
  write(text: string): void {
    if (this.#file !== null) return this.#writeFile(this.#file, text);
    const stream = this.#stream;
    if (stream.destroyed) return;
    const bytes = Buffer.byteLength(text);
    if (this.#dropped > 0) {
      const report = droppedLine(this.#dropped, this.#droppedBytes, `stderr's reader did not keep up once ${this.#maxBytes} bytes waited for it (CUSTODY_LOG_BACKLOG_BYTES)`);
      if (!this.#fits(Buffer.byteLength(report) + bytes)) return this.#drop(bytes);
      stream.write(report);
      this.#dropped = 0;
      this.#droppedBytes = 0;
    } else if (!this.#fits(bytes)) {
      return this.#drop(bytes);
    }
    stream.write(text);
  }

  /** The whole of `text`, after the report of what was dropped; what a full disk refuses is counted, never retried. */
  #writeFile(fd: number, text: string): void {
    const report = this.#dropped > 0 ? droppedLine(this.#dropped, this.#droppedBytes, `stderr's file could not be written (${this.#fileError})`) : '';
    const bytes = Buffer.from((this.#torn ? '\n' : '') + report + text);
    let at = 0;
    try {
      while (at < bytes.length) at += writeSync(fd, bytes, at);
    } catch (error) {
      this.#fileError = (error as NodeJS.ErrnoException).code ?? 'error';
      // Some of it reached the file: what follows starts on a line of its own.
      if (at > 0) this.#torn = true;
      this.#drop(Buffer.byteLength(text));
      return;
    }
    this.#torn = false;
    this.#dropped = 0;
    this.#droppedBytes = 0;
  }

  #fits(bytes: number): boolean {
    const waiting = this.#stream.writableLength;
    return waiting === 0 || waiting + bytes <= this.#maxBytes;
  }

  #drop(bytes: number): void {
    this.#dropped++;
    this.#droppedBytes += bytes;
  }
}

function droppedLine(lines: number, bytes: number, why: string): string {
  return `${JSON.stringify({
    ts: new Date().toISOString(),
    level: 'warn',
    pid: process.pid,
    event: 'log_lines_dropped',
    lines,
    bytes,
    message: `${lines} log lines were dropped: ${why}`,
  })}\n`;
}

let stderr: LogSink | null = null;

/** This process's stderr sink, made (and its error listener attached) on first use. */
export function stderrSink(): LogSink {
  if (stderr) return stderr;
  const asked = process.env.CUSTODY_LOG_BACKLOG_BYTES;
  const bytes = logBacklogBytes(asked);
  stderr = new LogSink(process.stderr, bytes, isRegularFile(STDERR_FD) ? STDERR_FD : null);
  // A value it could not take is said once, not passed over in silence.
  if (asked !== undefined && bytes === LOG_BACKLOG_DEFAULT_BYTES && Number(asked) !== LOG_BACKLOG_DEFAULT_BYTES) {
    const message = `CUSTODY_LOG_BACKLOG_BYTES=${JSON.stringify(asked.slice(0, 40))} is not a whole number of bytes from ${LOG_BACKLOG_MIN_BYTES} to ${LOG_BACKLOG_MAX_BYTES}; the default ${bytes} is used`;
    stderr.write(`${JSON.stringify({ ts: new Date().toISOString(), level: 'warn', pid: process.pid, event: 'log_backlog_ignored', message })}\n`);
  }
  return stderr;
}

const STDERR_FD = 2;

function isRegularFile(fd: number): boolean {
  try {
    return fstatSync(fd).isFile();
  } catch {
    return false;
  }
}
