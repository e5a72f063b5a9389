// The review-notes journal: JSON lines, one per note
// {"operation_id","note","sha256"}, and fence lines {"fence","fenced_at"}
// written by reconciliation. Every operation reads what other processes
// appended since its last look, decides, and writes under the exclusive
// lock, then fsyncs before answering. The index keeps, per operation id,
// only where its line starts (notes themselves stay on disk), and the file
// is read in bounded chunks, so a long journal costs little memory.
//
// A crash can leave a torn last line. Whatever parses as an entry counts,
// newline or not; the next write first terminates the tail with a newline,
// so a torn fragment stays an unreadable line (skipped) and never joins the
// next entry. Reconciliation therefore sees exactly what readers will see.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { nowMs } from '../../shared/clock.js';
import { syncDirectory } from '../../shared/store/private-fs.js';
import type { ExclusiveFileLock } from './journal-lock.js';

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
const CHUNK_BYTES = 1024 * 1024;
/** Longer than any line this adapter writes (a 4 096-byte note escapes to at most ~25 KiB). */
const MAX_LINE_BYTES = 64 * 1024;

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
  /** Where each operation's note line starts, for complete lines before #offset. */
  #notes = new Map<string, number>();
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
    return this.#locked((view) => {
      // H3: the fence is re-checked under the lock the fence was written under.
      if (view.fenced(operationId)) return { outcome: 'fenced' };
      const existing = view.note(operationId);
      if (existing) return { outcome: 'applied', line: existing, existing: true };
      const line: NoteLine = { operation_id: operationId, note, sha256: noteDigest(note) };
      this.#write(view.tailOpen, line);
      return { outcome: 'applied', line, existing: false };
    });
  }

  /** Find the note, or fence the operation so it can never be appended: not_applied made true (H3, ARCHITECTURE.md §6.5). */
  observe(operationId: string): ObserveOutcome {
    return this.#locked((view) => {
      const existing = view.note(operationId);
      if (existing) return { outcome: 'applied', line: existing };
      if (view.fenced(operationId)) return { outcome: 'not_applied', fencedNow: false };
      this.#write(view.tailOpen, { fence: operationId, fenced_at: nowMs() });
      return { outcome: 'not_applied', fencedNow: true };
    });
  }

  /** Hold the lock, open the journal (creating it 0600), catch up, and decide. */
  #locked<T>(section: (view: JournalView) => T): T {
    return this.#lock.withLock(() => {
      const fd = fs.openSync(this.#file, fs.constants.O_RDONLY | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
      try {
        return section(this.#catchUp(fd));
      } finally {
        fs.closeSync(fd);
      }
    });
  }

  /** Index the complete lines after #offset; the unterminated tail is parsed each time, never indexed. */
  #catchUp(fd: number): JournalView {
    const stat = fs.fstatSync(fd);
    const identity = `${stat.dev}:${stat.ino}`;
    if (identity !== this.#identity || stat.size < this.#offset) this.#reset(identity);
    const chunk = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, Math.max(1, stat.size - this.#offset)));
    let carry = Buffer.alloc(0);
    for (;;) {
      const read = fs.readSync(fd, chunk, 0, chunk.length, this.#offset + carry.length);
      if (read === 0) break;
      const data = carry.length > 0 ? Buffer.concat([carry, chunk.subarray(0, read)]) : chunk.subarray(0, read);
      let start = 0;
      for (let end = data.indexOf(NEWLINE); end >= 0; end = data.indexOf(NEWLINE, start)) {
        this.#index(data.subarray(start, end), this.#offset + start);
        start = end + 1;
      }
      this.#offset += start;
      carry = Buffer.from(data.subarray(start));
    }
    const tail = carry.length > 0 ? parseEntry(carry.toString('utf8')) : null;
    return {
      note: (id) => {
        const at = this.#notes.get(id);
        if (at !== undefined) return this.#noteAt(fd, at);
        return tail?.kind === 'note' && tail.line.operation_id === id ? tail.line : undefined;
      },
      fenced: (id) => this.#fences.has(id) || (tail?.kind === 'fence' && tail.operationId === id),
      tailOpen: carry.length > 0,
    };
  }

  #reset(identity: string): void {
    this.#notes = new Map();
    this.#fences = new Set();
    this.#offset = 0;
    this.#identity = identity;
  }

  #index(line: Buffer, at: number): void {
    if (line.length === 0) return;
    const entry = parseEntry(line.toString('utf8'));
    if (!entry) this.#warn('journal_line_skipped', { file: this.#file, offset: at, bytes: line.length });
    else if (entry.kind === 'note') this.#notes.set(entry.line.operation_id, at);
    else this.#fences.add(entry.operationId);
  }

  #noteAt(fd: number, at: number): NoteLine | undefined {
    const buffer = Buffer.allocUnsafe(MAX_LINE_BYTES);
    const read = fs.readSync(fd, buffer, 0, MAX_LINE_BYTES, at);
    const end = buffer.subarray(0, read).indexOf(NEWLINE);
    const entry = parseEntry(buffer.subarray(0, end < 0 ? read : end).toString('utf8'));
    return entry?.kind === 'note' ? entry.line : undefined;
  }

  #write(tailOpen: boolean, entry: object): void {
    const bytes = Buffer.from((tailOpen ? '\n' : '') + JSON.stringify(entry) + '\n', 'utf8');
    const fd = fs.openSync(this.#file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_NOFOLLOW);
    try {
      let written = 0;
      while (written < bytes.length) written += fs.writeSync(fd, bytes, written);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    // The first write may have been into a file this call created: make its directory entry durable too.
    if (this.#offset === 0) syncDirectory(path.dirname(this.#file));
  }
}

