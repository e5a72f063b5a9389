// `custody trace NAME` while the service is down (README "Offline trace"):
// the operation's timeline read from the three stores themselves —
// supervisor.db, the kernel's kernel.db, and the ledger and archive of the
// executor it was addressed to — without the service, without any lock, and
// without writing a byte in the state directory.
//
// Even a read-only SQLite connection writes beside a WAL database: it creates
// the -wal and -shm files a cleanly closed store no longer has, and rewrites
// the -shm index after a crash. So each store file (and its -wal, which holds
// the last commits of a killed process) is copied into a private temporary
// directory and opened there, readonly and fileMustExist; the state
// directory is only ever read. Meant for a stopped service: a store that is
// being written while it is copied may be read as of an instant between two
// of its commits.
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { CustodyError } from '../../shared/errors.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import type { StatePaths } from '../paths.js';

export interface TraceEvent {
  readonly at: number;
  readonly store: string;
  readonly event: string;
  readonly detail: string;
}

export interface OfflineTrace {
  readonly name: string;
  readonly operation_id: string;
  readonly source: 'offline';
  readonly request: Record<string, unknown> | null;
  readonly kernel: Record<string, unknown> | null;
  readonly claim: Record<string, unknown> | null;
  readonly events: TraceEvent[];
  /** Stores that could not be read, and why (a missing executor store, say). */
  readonly unread: Array<{ store: string; reason: string }>;
}

/** A store copied aside and opened read-only; `close` removes the copy. */
interface StoreCopy {
  readonly db: Database.Database;
  close(): void;
}

function openCopy(file: string): StoreCopy {
  if (!existsSync(file)) throw new CustodyError('store_missing', `${file} does not exist`);
  const dir = mkdtempSync(path.join(tmpdir(), 'custody-trace-'));
  try {
    const copy = path.join(dir, path.basename(file));
    copyFileSync(file, copy);
    if (existsSync(`${file}-wal`)) copyFileSync(`${file}-wal`, `${copy}-wal`);
    const db = new Database(copy, { readonly: true, fileMustExist: true });
    return {
      db,
      close: () => {
        db.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

function withStore<T>(file: string, read: (db: Database.Database) => T): T {
  const store = openCopy(file);
  try {
    return read(store.db);
  } finally {
    store.close();
  }
}

interface RequestRow {
  request_id: string;
  operation_id: string;
  kind: string;
  tool: string;
  phase: string;
  executor: string | null;
  authorization: string | null;
  report: string | null;
  receipt: string | null;
  outcome: string | null;
  reason: string | null;
  created_at: number;
  updated_at: number;
}

/**
 * An operation's receipts, by the key its store finds them by: the
 * operation's rowid since kernel.db version 10, its id before (a stopped
 * service's store may not be migrated yet; kernel-proc/store/schema.ts).
 */
function receiptsQuery(db: Database.Database): string {
  return hasColumn(db, 'receipts', 'operation_rowid')
    ? 'SELECT receipt FROM receipts WHERE operation_rowid = (SELECT operation_rowid FROM operations WHERE operation_id = ?) ORDER BY seq'
    : 'SELECT receipt FROM receipts WHERE operation_id = ? ORDER BY seq';
}

/** How a ledger's reports join their claims: by the claim's seq since ledger.db version 6, by operation id before (executor-proc/ledger/schema.ts). */
function claimReportJoin(db: Database.Database): string {
  return hasColumn(db, 'reports', 'claim_seq') ? 'r.claim_seq = c.seq' : 'r.operation_id = c.operation_id';
}

/** Whether the store's `table` has `column`: how a reader tells a store's version by what it reads. */
function hasColumn(db: Database.Database, table: string, column: string): boolean {
  return db.prepare('SELECT 1 FROM pragma_table_info(?) WHERE name = ?').get(table, column) !== undefined;
}

/** The timeline of NAME from the stores of a stopped service. */
export function offlineTrace(paths: StatePaths, name: string): OfflineTrace {
  const operationId = operationIdFor(name);
  const events: TraceEvent[] = [];
  const unread: Array<{ store: string; reason: string }> = [];
  const attempt = <T>(store: string, read: () => T): T | undefined => {
    try {
      return read();
    } catch (error) {
      unread.push({ store, reason: error instanceof Error ? error.message : String(error) });
      return undefined;
    }
  };

  const supervisor = attempt('supervisor', () =>
    withStore(path.join(paths.supervisorDir, 'supervisor.db'), (db) => ({
      row: db.prepare('SELECT * FROM requests WHERE request_id = ?').get(name) as RequestRow | undefined,
      incidents: db.prepare('SELECT at, kind, message FROM incidents WHERE operation_id = ? ORDER BY id').all(operationId) as Array<{ at: number; kind: string; message: string }>,
      executors: db.prepare("SELECT name, identity_id FROM pins WHERE role = 'executor'").all() as Array<{ name: string; identity_id: string }>,
    })),
  );
  const kernel = attempt('kernel', () =>
    withStore(path.join(paths.kernelDir, 'kernel.db'), (db) => ({
      operation: db.prepare('SELECT operation_id, request_id, tool, state, executor_id, created_at, updated_at, flag, authorization FROM operations WHERE operation_id = ?').get(operationId) as
        | { executor_id: string | null; authorization: string | null; tool: string; state: string }
        | undefined,
      receipts: (db.prepare(receiptsQuery(db)).all(operationId) as Array<{ receipt: string }>).map((r) => r.receipt),
    })),
  );
  const row = supervisor?.row;
  if (!row && !kernel?.operation) {
    const why = unread.length > 0 ? `; unread: ${unread.map((u) => `${u.store} (${u.reason})`).join(', ')}` : '';
    throw new CustodyError('operation_unknown', `no operation named ${name} in the stores of ${paths.root}${why}`);
  }

  if (row) {
    events.push({ at: row.created_at, store: 'supervisor', event: 'request logged', detail: `${row.kind} ${row.tool}` });
    events.push({ at: row.updated_at, store: 'supervisor', event: `phase ${row.phase}`, detail: row.outcome ? `${row.outcome} (${row.reason ?? ''})` : '' });
  }
  for (const incident of supervisor?.incidents ?? []) events.push({ at: incident.at, store: 'supervisor', event: incident.kind, detail: incident.message });
  for (const text of kernel?.receipts ?? []) {
    const body = readEnvelope(text).envelope.body as { issued_at?: number; decision?: string; verdict?: string; reason?: string; state?: string; hold?: { disposition?: string } };
    events.push({ at: body.issued_at ?? 0, store: 'kernel', event: `receipt ${body.decision} ${body.verdict}`, detail: `reason ${body.reason}, state ${body.state}, hold ${body.hold?.disposition}` });
  }
  const authorization = row?.authorization ?? kernel?.operation?.authorization ?? null;
  if (authorization) {
    const body = readEnvelope(authorization).envelope.body as { issued_at: number; not_before: number; expires_at: number; executor: { id: string; key_epoch: number } };
    events.push({ at: body.issued_at, store: 'kernel', event: 'authorization signed', detail: `for ${body.executor.id} epoch ${body.executor.key_epoch}, window ${new Date(body.not_before).toISOString()} – ${new Date(body.expires_at).toISOString()}` });
  }

  // The executor the authorization names (the supervisor's record of it, else the kernel's).
  const executorId = row?.executor ?? kernel?.operation?.executor_id ?? null;
  const executorName = executorId === null ? undefined : supervisor?.executors.find((e) => e.identity_id === executorId)?.name;
  let claim: Record<string, unknown> | null = null;
  if (executorName && authorization) {
    const store = `executor ${executorName}`;
    claim =
      attempt(store, () => {
        const dir = paths.executorDir(executorName);
        const live = withStore(path.join(dir, 'ledger.db'), (db) =>
          db.prepare(`SELECT c.claim_id, c.kind, c.claimed_at, r.status AS report_status, r.report FROM claims c LEFT JOIN reports r ON ${claimReportJoin(db)} WHERE c.operation_id = ?`).get(operationId),
        ) as Record<string, unknown> | undefined;
        if (live) return { ...live, archived: false };
        const archived = withStore(path.join(dir, 'archive.db'), (db) =>
          db.prepare('SELECT claim_id, kind, claimed_at, status AS report_status, report FROM archived_claims WHERE operation_id = ?').get(operationId),
        ) as Record<string, unknown> | undefined;
        return archived ? { ...archived, archived: true } : null;
      }) ?? null;
    const c = claim as { claimed_at?: number | null; kind?: string; report_status?: string | null; report?: string | null } | null;
    if (c?.claimed_at) events.push({ at: c.claimed_at, store, event: c.kind ?? 'claim', detail: `report ${c.report_status ?? 'none'}` });
    const report = row?.report ?? c?.report ?? null;
    if (report) {
      const body = readEnvelope(report).envelope.body as { finished_at: number; status: string; claim_id: string };
      events.push({ at: body.finished_at, store, event: `report signed: ${body.status}`, detail: `claim ${body.claim_id}` });
    }
  } else if (row?.report) {
    const body = readEnvelope(row.report).envelope.body as { finished_at: number; status: string; claim_id: string };
    events.push({ at: body.finished_at, store: 'executor', event: `report signed: ${body.status}`, detail: `claim ${body.claim_id}` });
  }
  events.sort((a, b) => a.at - b.at);

  const request = row
    ? { request_id: row.request_id, tool: row.tool, phase: row.phase, outcome: row.outcome, reason: row.reason, executor: executorName ?? row.executor }
    : null;
  const kernelView = kernel?.operation ? { ...kernel.operation, authorization: undefined } : null;
  return { name, operation_id: operationId, source: 'offline', request, kernel: kernelView, claim, events, unread };
}
