// The review-notes journal: JSON lines, one per note
// {"operation_id","note","sha256"}, and fence lines {"fence","fenced_at"}
// written by reconciliation. Every operation reads what other processes
// appended since its last look (an index kept by byte offset), decides, and
// writes under the exclusive lock, then fsyncs before answering.
//
// A crash can leave a torn last line. Whatever parses as an entry counts,
// newline or not; the next write first terminates the tail with a newline,
// so a torn fragment stays an unreadable line (skipped) and never joins the
// next entry. Reconciliation therefore sees exactly what readers will see.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { nowMs } from '../../shared/clock.js';
import { type ExclusiveFileLock } from './journal-lock.js';

export interface NoteLine {
  readonly operation_id: string;
  readonly note: string;
  readonly sha256: string;
}

export type AppendOutcome = { readonly outcome: 'applied'; readonly line: NoteLine; readonly existing: boolean } | { readonly outcome: 'fenced' };
export type ObserveOutcome = { readonly outcome: 'applied'; readonly line: NoteLine } | { readonly outcome: 'not_applied'; readonly fencedNow: boolean };

type Entry = { readonly kind: 'note'; readonly line: NoteLine } | { readonly kind: 'fence'; readonly operationId: string };

interface JournalView {
  note(operationId: string): NoteLine | undefined;
  fenced(operationId: string): boolean;
  /** The file does not end with a newline (a torn last line). */
  readonly tailOpen: boolean;
}

const NEWLINE = 0x0a;

export function noteDigest(note: string): string {
  return createHash('sha256').update(note, 'utf8').digest('hex');
}

function parseEntry(text: string): Entry | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort().join(',');
  if (keys === 'note,operation_id,sha256' && typeof record.operation_id === 'string' && typeof record.note === 'string' && typeof record.sha256 === 'string') {
    return { kind: 'note', line: { operation_id: record.operation_id, note: record.note, sha256: record.sha256 } };
  }
  if (keys === 'fence,fenced_at' && typeof record.fence === 'string') return { kind: 'fence', operationId: record.fence };
  return null;
}

export class NotesJournal {
  readonly #file: string;
  readonly #lock: ExclusiveFileLock;
  readonly #warn: (event: string, fields: Record<string, unknown>) => void;
  /** What the complete (newline-terminated) lines before #offset say, per operation id. */
  #notes = new Map<string, NoteLine>();
  #fences = new Set<string>();
  #offset = 0;
  /** dev:ino of the file the index describes; another file (rotated, replaced) is read from its start. */
  #identity: string | null = null;

  constructor(file: string, lock: ExclusiveFileLock, warn: (event: string, fields: Record<string, unknown>) => void) {
    this.#file = file;
    this.#lock = lock;
    this.#warn = warn;
  }

  /** Append a note unless the operation is fenced; a note already there is the same effect, returned as it is. */
  append(operationId: string, note: string): AppendOutcome {
    return this.#lock.withLock(() => {
      const view = this.#catchUp();
      // H3 (FIX_FENCE): the fence is re-checked under the lock the fence was written under.
      if (view.fenced(operationId)) return { outcome: 'fenced' };
      const existing = view.note(operationId);
      if (existing) return { outcome: 'applied', line: existing, existing: true };
      const line: NoteLine = { operation_id: operationId, note, sha256: noteDigest(note) };
      this.#write(view.tailOpen, line);
      return { outcome: 'applied', line, existing: false };
    });
  }

  /** Find the note, or fence the operation so it can never be appended: not_applied made true (H3). */
  observe(operationId: string): ObserveOutcome {
    return this.#lock.withLock(() => {
      const view = this.#catchUp();
      const existing = view.note(operationId);
      if (existing) return { outcome: 'applied', line: existing };
      if (view.fenced(operationId)) return { outcome: 'not_applied', fencedNow: false };
      this.#write(view.tailOpen, { fence: operationId, fenced_at: nowMs() });
      return { outcome: 'not_applied', fencedNow: true };
    });
  }

  /** Bring the index up to the file's end. The unterminated tail is re-read each time, never indexed. */
  #catchUp(): JournalView {
    const bytes = this.#readNew();
    const completeLength = bytes.lastIndexOf(NEWLINE) + 1;
    let start = 0;
    while (start < completeLength) {
      const end = bytes.indexOf(NEWLINE, start);
      this.#index(bytes.subarray(start, end).toString('utf8'), this.#offset + start);
      start = end + 1;
    }
    this.#offset += completeLength;
    const rest = bytes.subarray(completeLength);
    const tail = rest.length > 0 ? parseEntry(rest.toString('utf8')) : null;
    return {
      note: (id) => this.#notes.get(id) ?? (tail?.kind === 'note' && tail.line.operation_id === id ? tail.line : undefined),
      fenced: (id) => this.#fences.has(id) || (tail?.kind === 'fence' && tail.operationId === id),
      tailOpen: rest.length > 0,
    };
  }

  /** The bytes after #offset, creating the journal (0600) if it is not there yet. */
  #readNew(): Buffer {
    const fd = fs.openSync(this.#file, fs.constants.O_RDONLY | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
    try {
      const stat = fs.fstatSync(fd);
      const identity = `${stat.dev}:${stat.ino}`;
      if (identity !== this.#identity || stat.size < this.#offset) this.#reset(identity);
      const pending = Buffer.alloc(stat.size - this.#offset);
      let read = 0;
      while (read < pending.length) {
        const n = fs.readSync(fd, pending, read, pending.length - read, this.#offset + read);
        if (n === 0) break;
        read += n;
      }
      return pending.subarray(0, read);
    } finally {
      fs.closeSync(fd);
    }
  }

  #reset(identity: string): void {
    this.#notes = new Map();
    this.#fences = new Set();
    this.#offset = 0;
    this.#identity = identity;
  }

  #index(text: string, at: number): void {
    if (text.trim() === '') return;
    const entry = parseEntry(text);
    if (!entry) this.#warn('journal_line_skipped', { file: this.#file, offset: at, bytes: Buffer.byteLength(text) });
    else if (entry.kind === 'note') this.#notes.set(entry.line.operation_id, entry.line);
    else this.#fences.add(entry.operationId);
  }

  #write(tailOpen: boolean, entry: object): void {
    const line = (tailOpen ? '\n' : '') + JSON.stringify(entry) + '\n';
    const fd = fs.openSync(this.#file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_NOFOLLOW);
    try {
      const bytes = Buffer.from(line, 'utf8');
      let written = 0;
      while (written < bytes.length) written += fs.writeSync(fd, bytes, written);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    if (this.#offset === 0) syncDirectory(path.dirname(this.#file));
  }
}

function syncDirectory(dir: string): void {
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
