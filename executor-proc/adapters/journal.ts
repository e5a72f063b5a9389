// The review-notes journal: JSON lines, one per note
// {"operation_id","note","sha256"}, and fence lines {"fence","fenced_at"}
// written by reconciliation. Every operation reads what other processes
// appended since its last look, decides, and writes under the exclusive
// lock, then fsyncs before answering.
//
// The index (which operation's note starts where, which operations are
// fenced, and how far the journal was read) lives in a SQLite file beside
// the journal, `<journal>.index`, written only under the same lock: a start
// reads on from where the index stopped instead of the whole journal again
// (a million notes took ~3 s and ~150 MB at every executor start, and a Map
// stops at 16.7 million entries). The journal stays the truth: an index of
// another file (another inode, a shorter file, a last line that differs) is
// rebuilt from the start, and a note is read from the journal itself and
// must name the operation it was found for. The index is not fsynced (WAL,
// synchronous=NORMAL): one that lost its last writes reads on from earlier.
//
// A crash can leave a torn last line. Whatever parses as an entry counts,
// newline or not; the next write first terminates the tail with a newline,
// so a torn fragment stays an unreadable line (skipped) and never joins the
// next entry. Reconciliation therefore sees exactly what readers will see.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { CustodyError, isStoreDamaged } from '../../shared/errors.js';
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

/** Where the journal was read to, and the last complete line read: an index whose last line the journal no longer holds is of another file. */
interface IndexMark {
  readonly identity: string;
  readonly offset: number;
  readonly lastAt: number;
  readonly lastDigest: string;
}

const INDEX_SCHEMA = `
CREATE TABLE IF NOT EXISTS mark (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  identity TEXT NOT NULL,        -- the inode of the journal indexed
  offset INTEGER NOT NULL,       -- bytes of complete lines read
  last_at INTEGER NOT NULL,      -- where the last of them starts
  last_digest TEXT NOT NULL      -- SHA-256 of that line, its newline included
) STRICT;
CREATE TABLE IF NOT EXISTS notes (operation_id TEXT PRIMARY KEY, at INTEGER NOT NULL) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fences (operation_id TEXT PRIMARY KEY) STRICT, WITHOUT ROWID;
`;

/** The journal's index in `<journal>.index`; every method runs under the journal's lock. */
class JournalIndex {
  readonly #db: Database.Database;
  readonly #markOf: Database.Statement<[], { identity: string; offset: number; last_at: number; last_digest: string }>;
  readonly #noteAt: Database.Statement<[string], { at: number }>;
  readonly #fenced: Database.Statement<[string], { one: number }>;
  readonly #addNote: Database.Statement<[string, number]>;
  readonly #addFence: Database.Statement<[string]>;
  readonly #setMark: Database.Statement<[string, number, number, string]>;

  constructor(file: string) {
    // Created private before SQLite does (it would use the umask); its -wal and -shm take this file's mode.
    const fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
    fs.closeSync(fd);
    this.#db = new Database(file, { timeout: 10_000 });
    this.#db.pragma('journal_mode = WAL');
    this.#db.pragma('synchronous = NORMAL');
    this.#db.exec(INDEX_SCHEMA);
    this.#markOf = this.#db.prepare('SELECT identity, offset, last_at, last_digest FROM mark WHERE id = 1');
    this.#noteAt = this.#db.prepare('SELECT at FROM notes WHERE operation_id = ?');
    this.#fenced = this.#db.prepare('SELECT 1 AS one FROM fences WHERE operation_id = ?');
    // The first note of an operation is its effect (append never writes a second); a fence once is a fence.
    this.#addNote = this.#db.prepare('INSERT OR IGNORE INTO notes (operation_id, at) VALUES (?, ?)');
    this.#addFence = this.#db.prepare('INSERT OR IGNORE INTO fences (operation_id) VALUES (?)');
    this.#setMark = this.#db.prepare(
      'INSERT INTO mark (id, identity, offset, last_at, last_digest) VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET identity = excluded.identity, offset = excluded.offset, last_at = excluded.last_at, last_digest = excluded.last_digest',
    );
  }

  mark(): IndexMark | null {
    const row = this.#markOf.get();
    return row ? { identity: row.identity, offset: row.offset, lastAt: row.last_at, lastDigest: row.last_digest } : null;
  }

  noteAt(operationId: string): number | undefined {
    return this.#noteAt.get(operationId)?.at;
  }

  fenced(operationId: string): boolean {
    return this.#fenced.get(operationId) !== undefined;
  }

  /** Forget everything: the journal is read again from its start. */
  reset(): void {
    this.#db.exec('DELETE FROM notes; DELETE FROM fences; DELETE FROM mark;');
  }

  /** Entries read from complete lines, and the mark they bring it to, in one transaction. */
  record(entries: ReadonlyArray<{ readonly entry: Entry; readonly at: number }>, mark: IndexMark): void {
    this.#db.transaction(() => {
      for (const { entry, at } of entries) {
        if (entry.kind === 'note') this.#addNote.run(entry.line.operation_id, at);
        else this.#addFence.run(entry.operationId);
      }
      this.#setMark.run(mark.identity, mark.offset, mark.lastAt, mark.lastDigest);
    })();
  }

  close(): void {
    this.#db.close();
  }
}

/** Complete lines a process reads before it writes them to the index: what the next process may read again. */
export const RECORD_EVERY_LINES = 512;

/** Lines read past the index's mark (`base`), not yet written to it. */
interface Unrecorded {
  readonly identity: string;
  readonly base: number;
  end: number;
  lastAt: number;
  lastDigest: string;
  lines: number;
  readonly entries: Array<{ entry: Entry; at: number }>;
  readonly notes: Map<string, number>;
  readonly fences: Set<string>;
}

/** Nothing read yet past the mark at `base`, whose last line starts at `lastAt`. */
function unrecorded(identity: string, base: number, lastAt: number, lastDigest: string): Unrecorded {
  return { identity, base, end: base, lastAt, lastDigest, lines: 0, entries: [], notes: new Map(), fences: new Set() };
}

function lineDigest(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export class NotesJournal {
  readonly #file: string;
  readonly #lock: ExclusiveFileLock;
  readonly #warn: (event: string, fields: Record<string, unknown>) => void;
  #index: JournalIndex | null = null;
  #unrecorded: Unrecorded | null = null;

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
      this.#write(view, line);
      return { outcome: 'applied', line, existing: false };
    });
  }

  /** Find the note, or fence the operation so it can never be appended: not_applied made true (H3, ARCHITECTURE.md §6.5). */
  observe(operationId: string): ObserveOutcome {
    return this.#locked((view) => {
      const existing = view.note(operationId);
      if (existing) return { outcome: 'applied', line: existing };
      if (view.fenced(operationId)) return { outcome: 'not_applied', fencedNow: false };
      this.#write(view, { fence: operationId, fenced_at: nowMs() });
      return { outcome: 'not_applied', fencedNow: true };
    });
  }

  close(): void {
    this.#index?.close();
    this.#index = null;
  }

  /**
   * Hold the lock, open the journal (creating it 0600), catch up, and decide.
   * An index SQLite cannot read (cut short by a full disk, overwritten) is
   * only a cache: it is removed and rebuilt from the journal, and the section
   * run again (every section asks the index before it writes the journal).
   */
  #locked<T>(section: (view: JournalView & { readonly empty: boolean }) => T): T {
    return this.#lock.withLock(() => {
      const fd = fs.openSync(this.#file, fs.constants.O_RDONLY | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
      try {
        try {
          return section(this.#catchUp(fd));
        } catch (error) {
          if (!isStoreDamaged(error)) throw error;
          this.#warn('journal_index_rebuilt', { file: `${this.#file}.index`, code: (error as { code?: string }).code, message: 'the index could not be read; it is removed and rebuilt from the journal' });
          this.#discardIndex();
          return section(this.#catchUp(fd));
        }
      } finally {
        fs.closeSync(fd);
      }
    });
  }

  /** Under the lock: another process that has the old file open keeps a whole index of its own, read from the same journal. */
  #discardIndex(): void {
    try {
      this.#index?.close();
    } catch {
      // Closing an unreadable database may fail too: it is removed either way.
    }
    this.#index = null;
    this.#unrecorded = null;
    for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${this.#file}.index${suffix}`, { force: true });
  }

  /**
   * Index the complete lines not read yet; the unterminated tail is parsed
   * each time, never indexed. Lines read past the index's mark are kept in
   * this process (#unrecorded) and written to the index RECORD_EVERY_LINES
   * at a time: a write per operation cost the adapter host ~0.1 ms of CPU
   * and held the journal's lock the longer. What a process never wrote is
   * read again by the next, from the mark; one that finds the mark moved by
   * another process drops its own and reads on from there.
   */
  #catchUp(fd: number): JournalView & { readonly empty: boolean } {
    this.#index ??= new JournalIndex(`${this.#file}.index`);
    const index = this.#index;
    const stat = fs.fstatSync(fd);
    // The inode alone: a device number can change across a remount, and the size and last line tell the rest.
    const identity = String(stat.ino);
    let mark = index.mark();
    if (mark && !this.#describes(fd, mark, identity, stat.size)) {
      this.#warn('journal_reindexed', { file: this.#file, message: 'the index describes another journal (replaced, cut short, or put back from a copy): it is read again from its start' });
      index.reset();
      mark = null;
      this.#unrecorded = null;
    }
    const base = mark?.offset ?? 0;
    let pending = this.#unrecorded;
    // Another process moved the mark, or the file is not the one read (another inode, cut short, its last line read no longer there).
    // Nothing read past the mark: its last line is the mark's, checked just above.
    if (pending && (pending.base !== base || pending.identity !== identity || stat.size < pending.end || (pending.end !== base && !this.#lineStillThere(fd, pending)))) pending = null;
    pending ??= unrecorded(identity, base, mark?.lastAt ?? 0, mark?.lastDigest ?? '');
    const chunk = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, Math.max(1, stat.size - pending.end)));
    let carry = Buffer.alloc(0);
    for (;;) {
      const offset = pending.end;
      const read = fs.readSync(fd, chunk, 0, chunk.length, offset + carry.length);
      if (read === 0) break;
      const data = carry.length > 0 ? Buffer.concat([carry, chunk.subarray(0, read)]) : chunk.subarray(0, read);
      let start = 0;
      let lastStart = -1;
      for (let end = data.indexOf(NEWLINE); end >= 0; end = data.indexOf(NEWLINE, start)) {
        const at = offset + start;
        const entry = this.#entryOf(data.subarray(start, end), at);
        if (entry) {
          pending.entries.push({ entry, at });
          if (entry.kind === 'fence') pending.fences.add(entry.operationId);
          else if (!pending.notes.has(entry.line.operation_id)) pending.notes.set(entry.line.operation_id, at);
        }
        pending.lines++;
        lastStart = start;
        start = end + 1;
      }
      if (lastStart >= 0) {
        // Only the last complete line's digest is kept: it tells this file from another at the next catch-up.
        pending.lastAt = offset + lastStart;
        pending.lastDigest = lineDigest(data.subarray(lastStart, start));
      }
      pending.end = offset + start;
      carry = Buffer.from(data.subarray(start));
      if (pending.lines >= RECORD_EVERY_LINES) {
        index.record(pending.entries, { identity, offset: pending.end, lastAt: pending.lastAt, lastDigest: pending.lastDigest });
        pending = unrecorded(identity, pending.end, pending.lastAt, pending.lastDigest);
      }
    }
    this.#unrecorded = pending;
    const tail = carry.length > 0 ? parseEntry(carry.toString('utf8')) : null;
    const read = pending;
    return {
      note: (id) => {
        // The index first: it holds the earlier lines, and an operation's first note is its effect.
        const at = index.noteAt(id) ?? read.notes.get(id);
        if (at !== undefined) return this.#noteAt(fd, at, id);
        return tail?.kind === 'note' && tail.line.operation_id === id ? tail.line : undefined;
      },
      fenced: (id) => read.fences.has(id) || index.fenced(id) || (tail?.kind === 'fence' && tail.operationId === id),
      tailOpen: carry.length > 0,
      empty: read.end === 0,
    };
  }

  /** Whether the index describes this file: the same inode, no shorter, and its last line read still there, byte for byte. */
  #describes(fd: number, mark: IndexMark, identity: string, size: number): boolean {
    if (mark.identity !== identity || size < mark.offset) return false;
    return this.#lineStillThere(fd, { end: mark.offset, lastAt: mark.lastAt, lastDigest: mark.lastDigest });
  }

  /** The last line read before `end` is still at `lastAt`, byte for byte (nothing read: nothing to check). */
  #lineStillThere(fd: number, read: { readonly end: number; readonly lastAt: number; readonly lastDigest: string }): boolean {
    if (read.end === 0) return true;
    const length = read.end - read.lastAt;
    if (length <= 0 || length > MAX_LINE_BYTES + 1) return false;
    const bytes = Buffer.allocUnsafe(length);
    return fs.readSync(fd, bytes, 0, length, read.lastAt) === length && lineDigest(bytes) === read.lastDigest;
  }

  #entryOf(line: Buffer, at: number): Entry | null {
    if (line.length === 0) return null;
    const entry = parseEntry(line.toString('utf8'));
    if (!entry) this.#warn('journal_line_skipped', { file: this.#file, offset: at, bytes: line.length });
    return entry;
  }

  /** The note line at `at`, which must be the one of `operationId`: an index that says otherwise is of another file. */
  #noteAt(fd: number, at: number, operationId: string): NoteLine | undefined {
    const buffer = Buffer.allocUnsafe(MAX_LINE_BYTES);
    const read = fs.readSync(fd, buffer, 0, MAX_LINE_BYTES, at);
    const end = buffer.subarray(0, read).indexOf(NEWLINE);
    const entry = parseEntry(buffer.subarray(0, end < 0 ? read : end).toString('utf8'));
    if (entry?.kind === 'note' && entry.line.operation_id === operationId) return entry.line;
    throw new CustodyError('store_corrupt', `the index of ${this.#file} says the note of ${operationId} starts at byte ${at}, and it does not; remove ${this.#file}.index to have it rebuilt`);
  }

  #write(view: JournalView & { readonly empty: boolean }, entry: object): void {
    const bytes = Buffer.from((view.tailOpen ? '\n' : '') + JSON.stringify(entry) + '\n', 'utf8');
    const fd = fs.openSync(this.#file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_NOFOLLOW);
    try {
      let written = 0;
      while (written < bytes.length) written += fs.writeSync(fd, bytes, written);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    // The first write may have been into a file this call created: make its directory entry durable too.
    if (view.empty) syncDirectory(path.dirname(this.#file));
  }
}
