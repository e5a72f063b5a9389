// Reads and writes of supervisor.db, each a prepared statement made once.
import type Database from 'better-sqlite3';
import { nowMs } from '../../shared/clock.js';
import { CustodyError, isStorageFull, isStoreBusy, toCustodyError } from '../../shared/errors.js';
import { crashPoint } from '../../shared/fault.js';
import { openStore, provisionStore, type StoreSpec } from '../../shared/store/sqlite-store.js';
import { type BatchRider, GroupCommit } from '../../shared/store/group-commit.js';
import { BEFORE_OR_AFTER_KERNEL, OPEN_PHASES, type RequestPhase, REQUEST_MACHINE, releasePhaseOf } from '../operations/phases.js';
import { SUPERVISOR_MIGRATIONS } from './schema.js';

export interface PinRow {
  readonly name: string;
  readonly role: 'kernel' | 'executor';
  readonly identity_id: string;
  readonly public_key: string;
  readonly key_epoch: number;
  readonly pinned_at: number;
}

export interface RotationRow {
  readonly name: string;
  readonly role: 'kernel' | 'executor';
  readonly new_epoch: number;
  readonly old_public_key: string;
  readonly new_public_key: string;
  readonly statement: string;
  readonly recorded_at: number;
}

export interface ChildRow {
  readonly name: string;
  readonly role: string;
  readonly state: string;
  readonly pid: number | null;
  readonly pid_start_ticks: number | null;
  readonly sid: string | null;
  readonly restarts: number;
  readonly started_at: number | null;
  readonly updated_at: number;
  readonly last_exit: string | null;
}

export interface IncidentRow {
  readonly id: number;
  readonly at: number;
  readonly child: string | null;
  readonly kind: string;
  readonly code: string | null;
  readonly message: string;
  readonly operation_id: string | null;
}

export interface RequestRow {
  readonly request_id: string;
  readonly operation_id: string;
  readonly kind: 'invoke' | 'authorize';
  readonly tool: string;
  readonly subject: string;
  readonly arguments: string;
  readonly cost_units: number;
  readonly binding_hash: string;
  readonly phase: RequestPhase;
  readonly nonce_id: string | null;
  readonly expected: string | null;
  readonly executor: string | null;
  readonly authorization: string | null;
  readonly report: string | null;
  readonly receipt: string | null;
  readonly output: string | null;
  readonly outcome: string | null;
  readonly reason: string | null;
  readonly attempts: number;
  readonly created_at: number;
  readonly updated_at: number;
}

export type NewRequest = Pick<RequestRow, 'request_id' | 'operation_id' | 'kind' | 'tool' | 'subject' | 'arguments' | 'cost_units' | 'binding_hash'>;

export type RequestPatch = Partial<
  Pick<RequestRow, 'nonce_id' | 'expected' | 'executor' | 'authorization' | 'report' | 'receipt' | 'output' | 'outcome' | 'reason'>
>;

/** A request's moves not yet in supervisor.db: the phase reached and what was learned on the way. */
interface Unwritten {
  readonly phase: RequestPhase;
  readonly patch: RequestPatch;
  /** When the last of them was made: the row's updated_at as this process knows it. */
  readonly at: number;
}

const PATCHABLE = ['nonce_id', 'expected', 'executor', 'authorization', 'report', 'receipt', 'output', 'outcome', 'reason'] as const;

/** The columns a patch names (undefined skips a column; null is written as null). */
function learnedOf(patch: RequestPatch): RequestPatch {
  return Object.fromEntries(PATCHABLE.filter((key) => patch[key] !== undefined).map((key) => [key, patch[key]]));
}

/** The characters of a row's text columns: what remembering it costs, near enough. */
function sizeOf(row: RequestRow): number {
  let chars = 0;
  for (const value of Object.values(row)) if (typeof value === 'string') chars += value.length;
  return chars;
}

/** What #moveRow did: the row after it, the row before when the phase changed, and the moves in memory it wrote. */
interface Moved {
  readonly row: RequestRow;
  readonly before: RequestRow | null;
  readonly written: Unwritten | undefined;
}

/** Who hears what the store recorded (GET /metrics, supervisor/metrics/); told after the write, never able to stop it. */
export interface StoreObserver {
  incident(incident: { readonly child: string | null; readonly kind: string; readonly code: string | null }): void;
  child(row: Omit<ChildRow, 'updated_at'>): void;
  /** A request moved from `before`'s phase to `after`'s. */
  phase(before: RequestRow, after: RequestRow): void;
  /** A grouped transaction committed carrying this many request writes (a heads-only commit counts as one). */
  committed(writes: number): void;
}

/** The incident kind that counts one crash against a request (see countCrash). */
export const CRASH_INCIDENT = 'request_crash';

export function quarantinedError(row: Pick<RequestRow, 'request_id' | 'reason'>): CustodyError {
  return new CustodyError(
    'request_quarantined',
    `${row.request_id} is quarantined (${row.reason ?? 'it crashed a child'}); it is not retried: see custody trace ${row.request_id}, and release it with custody reconcile ${row.request_id}`,
  );
}

export function supervisorStoreSpec(dir: string): StoreSpec {
  return { label: 'supervisor', dir, file: 'supervisor.db', migrations: SUPERVISOR_MIGRATIONS };
}

/**
 * Request rows remembered as supervisor.db holds them (#remembered), counted
 * by the characters of their text columns: ~4 KB a row in the common case,
 * so thousands of requests in flight, while a few rows carrying large
 * arguments or outputs cannot hold more memory than this. A size, not a
 * behaviour: a row forgotten early is read again, nothing more.
 */
export const REMEMBERED_CHARS = 32 * 1024 * 1024;

/** Rows of the request log read per slice by requestsDispatchedTo: ~40 MB of the largest rows, a few ms of reading. */
const DISPATCHED_ROWS_PER_SLICE = 10_000;

/** Oldest first; Array.prototype.sort is stable, so equal times keep the table's order. */
export function byCreation(rows: RequestRow[]): RequestRow[] {
  return rows.sort((a, b) => a.created_at - b.created_at);
}

/**
 * Writes per grouped transaction. A size, not a behaviour: more waiting
 * writes simply take the next transaction in the same turn.
 */
const GROUP_COMMIT_MAX_WRITES = 256;

export class SupervisorStore {
  readonly db: Database.Database;
  readonly #putPin: Database.Statement;
  readonly #getPin: Database.Statement<[string], PinRow>;
  readonly #upsertChild: Database.Statement;
  readonly #listChildren: Database.Statement<[], ChildRow>;
  readonly #openSession: Database.Statement;
  readonly #closeSession: Database.Statement;
  readonly #incident: Database.Statement;
  readonly #incidentsFor: Database.Statement<[string], IncidentRow>;
  readonly #recentIncidents: Database.Statement<[number], IncidentRow>;
  readonly #insertRequest: Database.Statement;
  readonly #getRequest: Database.Statement<[string], RequestRow>;
  readonly #getPhase: Database.Statement<[string], { phase: RequestPhase }>;
  readonly #getByOperation: Database.Statement<[string], RequestRow>;
  readonly #endOf: Database.Statement<[string], Pick<RequestRow, 'phase' | 'executor' | 'outcome'>>;
  readonly #setPhase: Database.Statement;
  readonly #openRequests: Database.Statement<[], RequestRow>;
  readonly #beforeOrAfterKernel: Database.Statement<[number], RequestRow>;
  readonly #quarantined: Database.Statement<[], RequestRow>;
  readonly #crashesOf: Database.Statement<[string], { n: number }>;
  /** Where bookkeeping writes that a full disk refused are reported (they are skipped, not fatal). */
  onBookkeepingFailed: (what: string, error: CustodyError) => void = () => undefined;
  readonly #getWitness: Database.Statement<[string], { head: number }>;
  readonly #dispatchedTo: Database.Statement<{ executor: string; from: number; to: number }, RequestRow>;
  readonly #lastRowid: Database.Statement<[], { last: number | null }>;
  readonly #raiseWitness: Database.Statement;
  /** Witness heads announced but not yet written: they go with the next write transaction, or at the end of the turn. */
  readonly #pendingHeads = new Map<string, number>();
  #pendingWaiters: Array<{ resolve(): void; reject(reason: unknown): void }> = [];
  #flushScheduled = false;
  #lingerTimer: NodeJS.Timeout | null = null;
  /** Told of incidents, children and phase moves once they are written. */
  observer: StoreObserver | null = null;
  /** The UPDATEs of request rows, one per set of columns written (#update), prepared on first use. */
  readonly #updates = new Map<string, Database.Statement>();
  /** The request log's hot writes, grouped per event-loop turn (shared/store/group-commit.ts). */
  readonly #group: GroupCommit;
  /**
   * Phase moves a request made in memory only (movePhaseLater): this
   * process reads them as written, and supervisor.db gets them with the
   * request's next durable write (ARCHITECTURE.md §6.6). A crash loses them,
   * and that is safe: each is a kernel or executor answer that asking again
   * returns byte for byte.
   */
  readonly #unwritten = new Map<string, Unwritten>();
  /**
   * Request rows as supervisor.db holds them, read outside any transaction
   * and kept until this process writes to the row again (every write of a
   * request row goes through this class and forgets it first: #forget). A
   * request in flight is read some fifteen times on its way, each a read
   * transaction of its ~4 KB row with two locks of the WAL index; it is now
   * read once after each of its durable writes (docs/PERFORMANCE.md, "The
   * supervisor's reads of its own rows"). Reads inside a transaction go to
   * the store: they see its uncommitted writes, which this map never holds.
   */
  readonly #remembered = new Map<string, { readonly row: RequestRow; readonly chars: number }>();
  /** The characters #remembered holds (sizeOf each row, once), kept at most #rememberedBound (REMEMBERED_CHARS). */
  #rememberedChars = 0;
  /** The row a grouped write left, until its transaction commits (#groupedWrite); a later write forgets it. */
  readonly #committing = new Map<string, RequestRow>();

  /** `rememberedChars`: the bound on rows remembered (REMEMBERED_CHARS; a test sets it to a few rows). */
  static provision(dir: string, rememberedChars = REMEMBERED_CHARS): SupervisorStore {
    return new SupervisorStore(provisionStore(supervisorStoreSpec(dir)), rememberedChars);
  }

  static open(dir: string, rememberedChars = REMEMBERED_CHARS): SupervisorStore {
    return new SupervisorStore(openStore(supervisorStoreSpec(dir)), rememberedChars);
  }

  readonly #rememberedBound: number;

  private constructor(db: Database.Database, rememberedChars: number) {
    this.db = db;
    this.#rememberedBound = rememberedChars;
    this.#group = new GroupCommit(db, GROUP_COMMIT_MAX_WRITES, 'supervisor', () => this.#headsRider(), (writes) => this.observer?.committed(writes));
    this.#putPin = db.prepare(
      `INSERT INTO pins (name, role, identity_id, public_key, key_epoch, pinned_at) VALUES (@name, @role, @identity_id, @public_key, @key_epoch, @pinned_at)
       ON CONFLICT (name) DO UPDATE SET identity_id = excluded.identity_id, public_key = excluded.public_key, key_epoch = excluded.key_epoch, pinned_at = excluded.pinned_at`,
    );
    this.#getPin = db.prepare('SELECT * FROM pins WHERE name = ?');
    this.#upsertChild = db.prepare(
      `INSERT INTO children (name, role, state, pid, pid_start_ticks, sid, restarts, started_at, updated_at, last_exit)
       VALUES (@name, @role, @state, @pid, @pid_start_ticks, @sid, @restarts, @started_at, @updated_at, @last_exit)
       ON CONFLICT (name) DO UPDATE SET role = excluded.role, state = excluded.state, pid = excluded.pid, pid_start_ticks = excluded.pid_start_ticks,
         sid = excluded.sid, restarts = excluded.restarts, started_at = excluded.started_at, updated_at = excluded.updated_at, last_exit = excluded.last_exit`,
    );
    this.#listChildren = db.prepare('SELECT * FROM children ORDER BY name');
    this.#openSession = db.prepare('INSERT INTO sessions (sid, child, pid, started_at) VALUES (?, ?, ?, ?)');
    this.#closeSession = db.prepare('UPDATE sessions SET ended_at = ?, end_reason = ? WHERE sid = ? AND ended_at IS NULL');
    this.#incident = db.prepare(
      'INSERT INTO incidents (at, child, kind, code, message, operation_id) VALUES (@at, @child, @kind, @code, @message, @operation_id)',
    );
    this.#incidentsFor = db.prepare('SELECT * FROM incidents WHERE operation_id = ? ORDER BY id');
    this.#recentIncidents = db.prepare('SELECT * FROM incidents ORDER BY id DESC LIMIT ?');
    this.#insertRequest = db.prepare(
      `INSERT INTO requests (request_id, operation_id, kind, tool, subject, arguments, cost_units, binding_hash, phase, created_at, updated_at)
       VALUES (@request_id, @operation_id, @kind, @tool, @subject, @arguments, @cost_units, @binding_hash, 'received', @now, @now)
       ON CONFLICT (request_id) DO NOTHING`,
    );
    this.#getRequest = db.prepare('SELECT * FROM requests WHERE request_id = ?');
    this.#getPhase = db.prepare('SELECT phase FROM requests WHERE request_id = ?');
    this.#getByOperation = db.prepare('SELECT * FROM requests WHERE operation_id = ?');
    // Three short columns of the row, not its ~4 KB of artifacts: archival asks this of every claim it may move.
    this.#endOf = db.prepare('SELECT phase, executor, outcome FROM requests WHERE operation_id = ?');
    this.#setPhase = db.prepare('UPDATE requests SET phase = ?, updated_at = ? WHERE request_id = ? AND phase = ?');
    // A quarantined request is not open: nothing resumes it but an operator's release.
    // An IN list of the open phases, not NOT IN the closed ones: the index on
    // phase answers it, where NOT IN read every row of the history. Sorted by
    // SQLite (oldest first, in the table's order within one millisecond; the
    // index returns them by phase): the rows are the requests in flight, and
    // their second copy in the sort's memory (temp_store,
    // shared/store/sqlite-store.ts) is as small.
    this.#openRequests = db.prepare(`SELECT * FROM requests WHERE phase IN (${OPEN_PHASES.map((phase) => `'${phase}'`).join(', ')}) ORDER BY created_at, rowid`);
    this.#beforeOrAfterKernel = db.prepare(`SELECT * FROM requests WHERE phase IN (${BEFORE_OR_AFTER_KERNEL.map((phase) => `'${phase}'`).join(', ')}) ORDER BY created_at, rowid LIMIT ?`);
    this.#quarantined = db.prepare("SELECT * FROM requests WHERE phase = 'quarantined' ORDER BY created_at");
    this.#crashesOf = db.prepare(`SELECT count(*) AS n FROM incidents WHERE operation_id = ? AND kind = '${CRASH_INCIDENT}'`);
    this.#getWitness = db.prepare('SELECT head FROM witness WHERE name = ?');
    this.#dispatchedTo = db.prepare('SELECT * FROM requests WHERE rowid > @from AND rowid <= @to AND executor = @executor AND authorization IS NOT NULL');
    this.#lastRowid = db.prepare('SELECT max(rowid) AS last FROM requests');
    this.#raiseWitness = db.prepare(
      // Never a head below the stored one, even when nothing changes: the insert trigger (version 5) refuses that.
      `INSERT INTO witness (name, head, updated_at)
         SELECT @name, max(@head, coalesce((SELECT head FROM witness WHERE name = @name), 0)), @now WHERE true
       ON CONFLICT (name) DO UPDATE SET head = excluded.head, updated_at = excluded.updated_at WHERE excluded.head > witness.head`,
    );
  }

  /**
   * Bookkeeping (children, sessions, incidents) must not stop the service
   * when the disk is full, or when supervisor.db is locked past the busy
   * timeout (a sqlite3 shell holding BEGIN IMMEDIATE while a child exits:
   * the throw, from a child's exit handler, ended the supervisor): the
   * write is skipped and reported, and the stop or restart in progress goes
   * on. What is skipped is the record of a child's run; a restart's kill of
   * what a dead child left still judges by pid and start time. Anything
   * else still throws.
   */
  #bookkeeping(what: string, write: () => void): void {
    try {
      write();
    } catch (error) {
      if (!isStorageFull(error) && !isStoreBusy(error)) throw error;
      this.onBookkeepingFailed(what, isStoreBusy(error) ? new CustodyError('store_busy', `supervisor.db is locked by another connection (a sqlite3 shell?): ${toCustodyError(error).message}`) : toCustodyError(error));
    }
  }

  close(): void {
    if (this.#lingerTimer) clearTimeout(this.#lingerTimer);
    this.#lingerTimer = null;
    // Heads seen and not written yet are written now, not lost with a graceful stop.
    try {
      if (this.db.open && !this.db.inTransaction) this.#flushHeads();
    } finally {
      this.db.close();
    }
  }

  // ------------------------------------------------------------------- pins

  putPin(pin: PinRow): void {
    this.#putPin.run(pin);
  }

  /**
   * Move a pin through a verified rotation statement and keep the statement,
   * in one transaction (the caller verified it against the pin it replaces).
   */
  rotatePin(pin: PinRow, rotation: RotationRow): void {
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO rotations (name, role, new_epoch, old_public_key, new_public_key, statement, recorded_at)
           VALUES (@name, @role, @new_epoch, @old_public_key, @new_public_key, @statement, @recorded_at) ON CONFLICT DO NOTHING`,
        )
        .run(rotation);
      this.#putPin.run(pin);
    }).immediate();
  }

  /** The statements a pin moved through, oldest first. */
  rotationsOf(name: string): RotationRow[] {
    return this.db.prepare<[string], RotationRow>('SELECT * FROM rotations WHERE name = ? ORDER BY new_epoch').all(name);
  }

  /** The key a child was pinned with first: the start of its statement chain. */
  firstKeyOf(name: string): string | undefined {
    return this.rotationsOf(name)[0]?.old_public_key ?? this.getPin(name)?.public_key;
  }

  getPin(name: string): PinRow | undefined {
    return this.#getPin.get(name);
  }

  // --------------------------------------------------------------- children

  recordChild(row: Omit<ChildRow, 'updated_at'>): void {
    this.#bookkeeping(`children row of ${row.name}`, () => this.#upsertChild.run({ ...row, updated_at: nowMs() }));
    this.observer?.child(row);
  }

  listChildren(): ChildRow[] {
    return this.#listChildren.all();
  }

  openSession(sid: string, child: string, pid: number): void {
    this.#bookkeeping(`session ${sid} of ${child}`, () => this.#openSession.run(sid, child, pid, nowMs()));
  }

  closeSession(sid: string, reason: string): void {
    this.#bookkeeping(`end of session ${sid}`, () => this.#closeSession.run(nowMs(), reason, sid));
  }

  // -------------------------------------------------------------- incidents

  recordIncident(incident: { child: string | null; kind: string; code: string | null; message: string; operation_id?: string | null }): void {
    this.#bookkeeping(`incident ${incident.kind}`, () => this.#incident.run({ at: nowMs(), operation_id: null, ...incident }));
    this.observer?.incident(incident);
  }

  incidentsFor(operationId: string): IncidentRow[] {
    return this.#incidentsFor.all(operationId);
  }

  recentIncidents(limit: number): IncidentRow[] {
    return this.#recentIncidents.all(limit);
  }

  // ---------------------------------------------------------------- witness

  /**
   * The highest head a child's store has presented (docs/ROLLBACK.md); 0 when
   * none was seen yet. A head this process saw and has not written yet counts:
   * it is no less true for being in memory.
   */
  witnessedHead(name: string): number {
    return Math.max(this.#getWitness.get(name)?.head ?? 0, this.#pendingHeads.get(name) ?? 0);
  }

  /**
   * Every request whose authorization was dispatched to this executor
   * identity, settled or not, a slice of the table at a time: the caller
   * keeps what it needs, so a history of a million rows is never in memory
   * at once, and the event loop turns between slices (the service answers
   * while an operator's recover-rollback reads).
   */
  async *requestsDispatchedTo(executorId: string, rowsPerSlice = DISPATCHED_ROWS_PER_SLICE): AsyncGenerator<RequestRow[]> {
    for (let from = 0; from < (this.#lastRowid.get()?.last ?? 0); from += rowsPerSlice) {
      const rows = this.#dispatchedTo.all({ executor: executorId, from, to: from + rowsPerSlice });
      if (rows.length > 0) yield rows;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Raise the witnessed heads (never lowered), all in one durable transaction. */
  raiseWitness(heads: ReadonlyMap<string, number>): void {
    this.db.transaction(() => this.#writeHeads(heads)).immediate();
    this.observer?.committed(1);
  }

  /**
   * Group commit of witness heads (docs/ROLLBACK.md): the head is written with
   * the next request transaction of this store (a kernel decision is always
   * followed by one, before the supervisor acts on it), or at the end of this
   * event-loop turn, whichever comes first. Resolves once it is durable.
   */
  witnessLater(name: string, head: number, lingerMs = 0): Promise<void> {
    this.#pendingHeads.set(name, Math.max(head, this.#pendingHeads.get(name) ?? 0));
    const durable = new Promise<void>((resolve, reject) => this.#pendingWaiters.push({ resolve, reject }));
    if (lingerMs === 0) this.#scheduleFlush();
    else this.#scheduleLingeringFlush(lingerMs);
    return durable;
  }

  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    setImmediate(() => {
      this.#flushScheduled = false;
      this.#flushHeads();
    });
  }

  /** A head that may wait for a request write: written alone only if none carried it within `lingerMs`. */
  #scheduleLingeringFlush(lingerMs: number): void {
    if (this.#lingerTimer) return;
    this.#lingerTimer = setTimeout(() => {
      this.#lingerTimer = null;
      this.#flushHeads();
    }, lingerMs);
  }

  #flushHeads(): void {
    if (this.#pendingHeads.size === 0 || !this.db.open) return;
    const { heads, waiters } = this.#takePending();
    try {
      this.raiseWitness(heads);
    } catch (error) {
      for (const waiter of waiters) waiter.reject(error);
      return;
    }
    for (const waiter of waiters) waiter.resolve();
  }

  #takePending(): { heads: Map<string, number>; waiters: Array<{ resolve(): void; reject(reason: unknown): void }> } {
    const heads = new Map(this.#pendingHeads);
    const waiters = this.#pendingWaiters;
    this.#pendingHeads.clear();
    this.#pendingWaiters = [];
    return { heads, waiters };
  }

  #writeHeads(heads: ReadonlyMap<string, number>): void {
    const now = nowMs();
    for (const [name, head] of heads) this.#raiseWitness.run({ name, head, now });
  }

  /** The pending witness heads ride with a grouped batch: written in its transaction, answered once it commits. */
  #headsRider(): BatchRider {
    const { heads, waiters } = this.#takePending();
    return {
      write: () => this.#writeHeads(heads),
      settled: (committed) => {
        if (committed) {
          for (const waiter of waiters) waiter.resolve();
          return;
        }
        for (const [name, head] of heads) this.#pendingHeads.set(name, Math.max(head, this.#pendingHeads.get(name) ?? 0));
        this.#pendingWaiters.push(...waiters);
        this.#scheduleFlush();
      },
    };
  }

  /** Run a write in one IMMEDIATE transaction that also carries the pending witness heads (inside another transaction: that one carries them). */
  #withPendingHeads<T>(work: () => T): T {
    if (this.db.inTransaction || this.#pendingHeads.size === 0) {
      return this.db.inTransaction ? work() : this.db.transaction(work).immediate();
    }
    const { heads, waiters } = this.#takePending();
    let result: T;
    try {
      result = this.db
        .transaction(() => {
          const value = work();
          this.#writeHeads(heads);
          return value;
        })
        .immediate();
    } catch (error) {
      // Not written: they wait for the next write or the end of the turn.
      for (const [name, head] of heads) this.#pendingHeads.set(name, Math.max(head, this.#pendingHeads.get(name) ?? 0));
      this.#pendingWaiters.push(...waiters);
      this.#scheduleFlush();
      throw error;
    }
    for (const waiter of waiters) waiter.resolve();
    return result;
  }

  // --------------------------------------------------------------- requests

  /** Log a request before the first kernel call; an existing row with the same id is returned as it is. */
  logRequest(row: NewRequest): RequestRow {
    const { stored, inserted } = this.#insertRequestRow(row);
    if (inserted) crashPoint('supervisor', 'after_request_logged');
    return stored;
  }

  #insertRequestRow(row: NewRequest): { stored: RequestRow; inserted: boolean } {
    const inserted = this.#insertRequest.run({ ...row, now: nowMs() }).changes === 1;
    const stored = this.#getRequest.get(row.request_id);
    if (!stored) throw new CustodyError('internal', `request ${row.request_id} was not logged`);
    return { stored, inserted };
  }

  // The hot path's writes, grouped: each resolves once the transaction that
  // holds it is durable, so a request is never sent to the kernel before its
  // row is, nor an answer given before the phase it reports. Per request:
  // its log row (before the kernel sees it), reserved (the nonce the start
  // needs), authorized (the authorization the executor runs), executing
  // (the attempt count crash accounting and recovery read), reported (the
  // report, kept until the kernel settles it) and settled/refused (the
  // answer). Each is one savepoint of a shared transaction, not an fsync.

  /** logRequest in the next grouped transaction. */
  logRequestGrouped(row: NewRequest): Promise<RequestRow> {
    return this.#groupedWrite(row.request_id, () => {
      const { stored, inserted } = this.#insertRequestRow(row);
      return { moved: { row: stored, before: null, written: undefined }, cutpoints: inserted ? ['after_request_logged'] : [] };
    });
  }

  /** movePhase in the next grouped transaction; its cutpoint passes once that transaction is durable. */
  movePhaseGrouped(requestId: string, to: RequestPhase, patch: RequestPatch = {}): Promise<RequestRow> {
    return this.#groupedWrite(requestId, () => {
      const moved = this.#moveRow(requestId, to, patch);
      if (moved.before) this.observer?.phase(moved.before, moved.row);
      return { moved, cutpoints: moved.before ? [`after_phase_${to}`] : [] };
    });
  }

  /** startAttempt in the next grouped transaction. */
  startAttemptGrouped(requestId: string): Promise<RequestRow> {
    return this.#groupedWrite(requestId, () => {
      const moved = this.#moveRow(requestId, 'executing', {}, true);
      if (moved.before) this.observer?.phase(moved.before, moved.row);
      return { moved, cutpoints: ['after_attempt_started'] };
    });
  }

  /**
   * A write of one request's row in the next grouped transaction. `write`
   * ends with the row as the transaction leaves it and the moves in memory
   * it wrote; once that commits, those are forgotten and the row is
   * remembered as supervisor.db now holds it (#remembered), unless the
   * request was written again in between (a later transaction of the same
   * turn, a synchronous write), which forgets it (#forget).
   */
  #groupedWrite(requestId: string, write: () => { moved: Moved; cutpoints: readonly string[] }): Promise<RequestRow> {
    let written: Unwritten | undefined;
    let ending: RequestRow | undefined;
    const leave = () => {
      if (ending !== undefined && this.#committing.get(requestId) === ending) this.#committing.delete(requestId);
    };
    return this.#group
      .submit(() => {
        const { moved, cutpoints } = write();
        written = moved.written;
        ending = moved.row;
        this.#committing.set(requestId, ending);
        return { value: ending, cutpoints };
      })
      .then(
        (row) => {
          this.#written(requestId, written);
          if (this.#committing.get(requestId) === row) this.#remember(row);
          leave();
          return row;
        },
        (error: unknown) => {
          leave();
          throw error;
        },
      );
  }

  /** A request as this process knows it: its row with any move not yet written laid over it. */
  getRequest(requestId: string): RequestRow | undefined {
    return this.#known(this.#stored(requestId));
  }

  /** A request's phase as this process knows it, without reading its artifacts (the admission check before every send). */
  phaseOf(requestId: string): RequestPhase | undefined {
    return this.#unwritten.get(requestId)?.phase ?? (this.db.inTransaction ? undefined : this.#remembered.get(requestId)?.row.phase) ?? this.#getPhase.get(requestId)?.phase;
  }

  /** A request's row as supervisor.db holds it: remembered outside a transaction (#remembered), read inside one. */
  #stored(requestId: string): RequestRow | undefined {
    if (this.db.inTransaction) return this.#getRequest.get(requestId);
    const remembered = this.#remembered.get(requestId);
    if (remembered) return remembered.row;
    const row = this.#getRequest.get(requestId);
    if (row) this.#remember(row);
    return row;
  }

  /** Only a row read outside a transaction, or one whose transaction committed (#groupedWrite). */
  #remember(row: RequestRow): void {
    this.#drop(row.request_id);
    const chars = sizeOf(row);
    if (chars > this.#rememberedBound) return;
    this.#remembered.set(row.request_id, { row, chars });
    this.#rememberedChars += chars;
    // A Map iterates in insertion order: the first key is the longest remembered.
    while (this.#rememberedChars > this.#rememberedBound) this.#drop(this.#remembered.keys().next().value!);
  }

  #drop(requestId: string): void {
    const remembered = this.#remembered.get(requestId);
    if (remembered === undefined) return;
    this.#remembered.delete(requestId);
    this.#rememberedChars -= remembered.chars;
  }

  /** Before any write of a request's row: the next read outside a transaction reads it from the store. */
  #forget(requestId: string): void {
    this.#drop(requestId);
    this.#committing.delete(requestId);
  }

  getRequestByOperation(operationId: string): RequestRow | undefined {
    return this.#known(this.#getByOperation.get(operationId));
  }

  /** Where the request log's row of an operation stands, as written: its phase, executor and outcome (supervisor/operations/archival.ts). */
  endOf(operationId: string): Pick<RequestRow, 'phase' | 'executor' | 'outcome'> | undefined {
    return this.#endOf.get(operationId);
  }

  /**
   * Up to `limit` open requests, oldest first, in a phase the kernel's
   * listing of operations in doubt does not cover (received, reserved:
   * before its start; reported: its report retained, the kernel perhaps
   * settled). Read by phase through requests_by_phase.
   */
  requestsBeforeOrAfterKernel(limit: number): RequestRow[] {
    return this.#beforeOrAfterKernel.all(limit).map((row) => this.#known(row)!);
  }

  openRequests(): RequestRow[] {
    return this.#openRequests.all().map((row) => this.#known(row)!);
  }

  quarantinedRequests(): RequestRow[] {
    return this.#quarantined.all();
  }

  #known(row: RequestRow | undefined): RequestRow | undefined {
    const unwritten = row && this.#unwritten.get(row.request_id);
    return unwritten ? { ...row, ...unwritten.patch, phase: unwritten.phase, updated_at: unwritten.at } : row;
  }

  /**
   * Write a request's moves held in memory into the transaction under way
   * (#moveRow to the phase they reached), so that supervisor.db says what
   * this process knows before anything else is written for it; null when
   * there are none. `written` is forgotten once that commits.
   */
  #writeUnwritten(requestId: string): Moved | null {
    const unwritten = this.#unwritten.get(requestId);
    return unwritten ? this.#moveRow(requestId, unwritten.phase, {}) : null;
  }

  /** Forget moves that are now durable, unless a later move replaced them meanwhile. */
  #written(requestId: string, unwritten: Unwritten | undefined): void {
    if (unwritten && this.#unwritten.get(requestId) === unwritten) this.#unwritten.delete(requestId);
  }

  /**
   * Move a request in memory only (ARCHITECTURE.md §6.6): the moves whose
   * answer the kernel or the executor retains and gives again — reserved
   * (reserve is idempotent by request id), authorized (a repeated reserve
   * of a started operation leads to its authorization), reported (the
   * executor replays its report byte for byte). supervisor.db gets them
   * with the request's next durable write (its attempt, its end) or when a
   * drive stops on them (persist). A supervisor that dies first resumes
   * from the last durable phase and asks again. Its cutpoint passes at once:
   * nothing durable is waited for.
   */
  movePhaseLater(requestId: string, to: RequestPhase, patch: RequestPatch = {}): RequestRow {
    const current = this.getRequest(requestId);
    if (!current) throw new CustodyError('not_found', `no request ${requestId}`);
    if (current.phase === 'quarantined') throw quarantinedError(current);
    if (current.phase !== to) REQUEST_MACHINE.assertMove(current.phase, to, `request ${requestId}`);
    const learned = learnedOf(patch);
    const at = nowMs();
    this.#unwritten.set(requestId, { phase: to, patch: { ...this.#unwritten.get(requestId)?.patch, ...learned }, at });
    // What getRequest would now read, without reading the row again.
    const row: RequestRow = { ...current, ...learned, phase: to, updated_at: at };
    if (current.phase !== to) {
      this.observer?.phase(current, row);
      crashPoint('supervisor', `after_phase_${to}`);
    }
    return row;
  }

  /** Make a request's in-memory moves durable (grouped); resolves with the row once they are (`known`, as this process knows it, when there were none). */
  persist(known: RequestRow): Promise<RequestRow> {
    const requestId = known.request_id;
    if (!this.#unwritten.has(requestId)) return Promise.resolve(known);
    return this.#groupedWrite(requestId, () => {
      // A crash counted meanwhile (countCrash) may have written them already: then nothing is left to write.
      const moved = this.#writeUnwritten(requestId) ?? { row: this.#getRequest.get(requestId)!, before: null, written: undefined };
      return { moved, cutpoints: [] };
    }).then((row) => this.getRequest(requestId) ?? row);
  }

  // ------------------------------------------------------------- quarantine

  /**
   * Count one crash of `child` against a request that was in flight on it,
   * as an incident (the count is the number of such incidents), and park the
   * request when the count reaches `limit`, all in one transaction. Returns
   * the count and whether this crash quarantined it. Throws storage_full
   * like any request write.
   */
  countCrash(requestId: string, child: string, why: string, limit: number): { crashes: number; quarantined: boolean } {
    let written: Unwritten | undefined;
    const counted = this.db.transaction(() => {
      written = this.#writeUnwritten(requestId)?.written;
      const row = this.#getRequest.get(requestId);
      if (!row || row.phase === 'quarantined' || row.phase === 'settled' || row.phase === 'refused') return { crashes: 0, quarantined: false };
      this.#incident.run({ at: nowMs(), child, kind: CRASH_INCIDENT, code: null, message: `${child} ended (${why}) while ${requestId} was in flight on it (phase ${row.phase})`, operation_id: row.operation_id });
      this.observer?.incident({ child, kind: CRASH_INCIDENT, code: null });
      const crashes = this.#crashesOf.get(row.operation_id)?.n ?? 0;
      if (crashes < limit) return { crashes, quarantined: false };
      const parked = this.#moveRow(requestId, 'quarantined', { reason: `quarantined after ${crashes} crashes of ${child} (from ${row.phase})` });
      this.#incident.run({
        at: nowMs(),
        child,
        kind: 'quarantined',
        code: 'request_quarantined',
        message: `${requestId} was in flight on ${child} at ${crashes} of its crashes (last: ${why}); parked in phase quarantined, not retried; release it with custody reconcile ${requestId}`,
        operation_id: row.operation_id,
      });
      this.observer?.incident({ child, kind: 'quarantined', code: 'request_quarantined' });
      this.observer?.phase(row, parked.row);
      return { crashes, quarantined: true };
    }).immediate();
    this.#written(requestId, written);
    return counted;
  }

  /** Crashes counted against a request so far. */
  crashesOf(operationId: string): number {
    return this.#crashesOf.get(operationId)?.n ?? 0;
  }

  /** An operator's release: back to the phase the request's retained artifacts prove, with an incident. */
  releaseQuarantined(requestId: string): RequestRow {
    return this.db.transaction(() => {
      const row = this.#getRequest.get(requestId);
      if (!row) throw new CustodyError('not_found', `no request ${requestId}`);
      if (row.phase !== 'quarantined') return this.#known(row)!;
      const to = releasePhaseOf(row);
      this.#forget(requestId);
      this.#setPhase.run(to, nowMs(), requestId, 'quarantined');
      this.#incident.run({ at: nowMs(), child: null, kind: 'quarantine_released', code: null, message: `an operator released ${requestId} from quarantine to phase ${to}; one more crash parks it again`, operation_id: row.operation_id });
      return this.#getRequest.get(requestId)!;
    }).immediate();
  }

  /** Record what was learned; values are written as given (null clears nothing: use undefined to skip). */
  patchRequest(requestId: string, patch: RequestPatch): void {
    const keys = PATCHABLE.filter((key) => patch[key] !== undefined);
    if (keys.length === 0) return;
    const statement = this.#update(`UPDATE requests SET ${keys.map((key) => `${key} = @${key}`).join(', ')}, updated_at = @updated_at WHERE request_id = @request_id`);
    this.#forget(requestId);
    statement.run({ ...Object.fromEntries(keys.map((key) => [key, patch[key]])), updated_at: nowMs(), request_id: requestId });
  }

  /** Move a request to a phase through the transition table; staying in place is a no-op. */
  movePhase(requestId: string, to: RequestPhase, patch: RequestPatch = {}): RequestRow {
    const nested = this.db.inTransaction;
    const moved = this.#withPendingHeads(() => this.#moveRow(requestId, to, patch));
    // Inside a grouped transaction the group forgets them once it commits.
    if (!nested) this.#written(requestId, moved.written);
    if (moved.before) {
      this.observer?.phase(moved.before, moved.row);
      // A cutpoint per phase reached, once its move has committed (startAttempt's has its own).
      if (!nested) crashPoint('supervisor', `after_phase_${to}`);
    }
    return moved.row;
  }

  /** Move to `executing` and count the attempt, in one transaction: the row returned carries the new count. */
  startAttempt(requestId: string): RequestRow {
    const started = this.#withPendingHeads(() => this.#moveRow(requestId, 'executing', {}, true));
    this.#written(requestId, started.written);
    if (started.before) this.observer?.phase(started.before, started.row);
    crashPoint('supervisor', 'after_attempt_started');
    return started.row;
  }

  /**
   * One UPDATE of a request's row, in the transaction under way: the moves it
   * made in memory only, the move to `to` (checked against the transition
   * table from the phase this process knows), what was learned, and for an
   * attempt its count. Each of these was a statement of its own, and each
   * UPDATE of a row rewrites all of it (~4 KB, docs/PERFORMANCE.md "The
   * supervisor's reads of its own rows"). Returns the row as it now stands
   * (the row read with the values written, which are all the UPDATE
   * changed), the row as this process knew it before when the phase changed,
   * and the moves in memory it wrote (forgotten once it commits: #written).
   */
  #moveRow(requestId: string, to: RequestPhase, patch: RequestPatch, attempt = false): Moved {
    const current = this.#getRequest.get(requestId);
    if (!current) throw new CustodyError('not_found', `no request ${requestId}`);
    const unwritten = this.#unwritten.get(requestId);
    const known = this.#known(current)!;
    // Only releaseQuarantined leaves quarantine: a step still finishing must not un-park it.
    if (known.phase === 'quarantined') throw quarantinedError(known);
    if (known.phase !== to) REQUEST_MACHINE.assertMove(known.phase, to, `request ${requestId}`);
    const changes: RequestPatch = { ...unwritten?.patch, ...learnedOf(patch) };
    const keys = PATCHABLE.filter((key) => changes[key] !== undefined);
    const before = known.phase === to ? null : known;
    if (before === null && current.phase === to && keys.length === 0 && !attempt) return { row: current, before, written: unwritten };
    const now = nowMs();
    this.#forget(requestId);
    const values = Object.fromEntries(keys.map((key) => [key, changes[key]]));
    const updated = this.#moveStatement(keys, attempt).run({ ...values, phase: to, now, request_id: requestId, from: current.phase }).changes;
    if (updated !== 1) throw new CustodyError('internal', `request ${requestId} changed under its own transaction (phase ${current.phase})`);
    const row: RequestRow = { ...current, ...values, phase: to, updated_at: now, attempts: current.attempts + (attempt ? 1 : 0) };
    return { row, before, written: unwritten };
  }

  /** The UPDATE of #moveRow for one set of written columns. */
  #moveStatement(keys: readonly string[], attempt: boolean): Database.Statement {
    const set = ['phase = @phase', 'updated_at = @now', ...keys.map((key) => `${key} = @${key}`), ...(attempt ? ['attempts = attempts + 1'] : [])];
    return this.#update(`UPDATE requests SET ${set.join(', ')} WHERE request_id = @request_id AND phase = @from`);
  }

  /** A request-row UPDATE by its text, prepared on first use (a handful of column sets occur). */
  #update(sql: string): Database.Statement {
    let statement = this.#updates.get(sql);
    if (!statement) this.#updates.set(sql, (statement = this.db.prepare(sql)));
    return statement;
  }
}
