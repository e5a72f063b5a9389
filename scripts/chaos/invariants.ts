// The guarantee as a check over what the service left behind (docs/RELIABILITY.md):
// it reads the three stores (kernel.db, each executor's ledger.db and
// archive.db, supervisor.db) read-only and the built-in tool's journal, and
// lists every violation it finds. The chaos campaign (scripts/chaos.ts) and
// the crash matrix (test/supervisor/crash-matrix.test.ts) both end with it.
//   - per operation at most one effect (journal lines);
//   - completed ⇒ exactly one journal line, a report that verifies under the
//     executor's key and says the effect happened, a completion receipt that
//     verifies under the kernel's key;
//   - released, denied, start_denied, expired ⇒ no journal line;
//   - no hold left `reserved` for a settled operation, none released for an
//     open one, consumed exactly for an applied effect;
//   - each grant's usage equals the sum of its holds, within its bound;
//   - every `unknown` carries a reason;
//   - the executor's ledger and the supervisor's log agree with the kernel.
import Database from 'better-sqlite3';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { readPublicKeyFile } from '../../shared/crypto/key-files.js';
import { EFFECT_APPLIED, type ReportStatus } from '../../shared/protocol/artifacts.js';
import { statePaths } from '../../supervisor/paths.js';

/** Kernel states that end an operation without an effect. */
const NO_EFFECT_STATES: ReadonlySet<string> = new Set(['released', 'denied', 'start_denied', 'expired']);
/** Kernel states in which an operation is still open: its hold must be reserved. */
const OPEN_STATES: ReadonlySet<string> = new Set(['reserved', 'dispatch_committed', 'awaiting_report', 'unknown']);
/** The journal that counts effects: the built-in review-notes tool's. */
const JOURNAL_TOOL_PREFIX = 'review-notes/';

export interface Violation {
  readonly rule: string;
  readonly request_id: string | null;
  readonly operation_id: string | null;
  readonly detail: string;
}

export interface CheckOptions {
  /** The state directory. */
  readonly root: string;
  /** Executor directories to read, by name; default: executors/<name> for every directory there. */
  readonly executorDirs?: Readonly<Record<string, string>>;
  /** The journal; default resources/review-notes.jsonl. */
  readonly journal?: string;
  /** Request ids that must have reached a final answer: settled, refused, or unknown with a reason. */
  readonly mustBeFinal?: readonly string[];
}

export interface CheckResult {
  readonly violations: Violation[];
  readonly operations: number;
  /** Kernel operations per state. */
  readonly states: Record<string, number>;
  /** Journal lines (effects) in total. */
  readonly effects: number;
  /** Of mustBeFinal, how many are final. */
  readonly final: number;
}

interface KernelOperation {
  operation_id: string;
  request_id: string;
  state: string;
  tool: string;
  capability_id: string | null;
  flag: string | null;
  report: string | null;
  hold_state: string | null;
  hold_invocations: number | null;
}

interface LedgerRecord {
  operation_id: string;
  kind: string;
  status: string | null;
  report: string | null;
  executor: string;
}

interface RequestRecord {
  request_id: string;
  operation_id: string;
  phase: string;
  outcome: string | null;
  reason: string | null;
  receipt: string | null;
}

function openReadOnly(file: string): Database.Database {
  return new Database(file, { readonly: true, fileMustExist: true });
}

/** Journal note lines per operation id; a torn last line from a crash is not an entry. */
export function effectsPerOperation(journal: string): Map<string, number> {
  const counts = new Map<string, number>();
  if (!existsSync(journal)) return counts;
  for (const line of readFileSync(journal, 'utf8').split('\n')) {
    if (line.trim() === '') continue;
    try {
      const entry = JSON.parse(line) as { operation_id?: unknown; note?: unknown };
      if (typeof entry.operation_id === 'string' && typeof entry.note === 'string') counts.set(entry.operation_id, (counts.get(entry.operation_id) ?? 0) + 1);
    } catch {
      // torn line
    }
  }
  return counts;
}

function readKernel(root: string): { operations: KernelOperation[]; receipts: Map<string, string[]>; grants: Array<{ capability_id: string; max_invocations: number }> } {
  const db = openReadOnly(path.join(statePaths(root).kernelDir, 'kernel.db'));
  try {
    const operations = db
      .prepare(
        // The settling report is in reports since kernel schema version 6; an operation's rows are keyed by its rowid since version 10 (kernel-proc/store/schema.ts).
        `SELECT o.operation_id, o.request_id, o.state, o.tool, o.capability_id, o.flag, r.report, h.state AS hold_state, h.invocations AS hold_invocations
         FROM operations o LEFT JOIN holds h ON h.operation_rowid = o.operation_rowid LEFT JOIN reports r ON r.operation_rowid = o.operation_rowid`,
      )
      .all() as KernelOperation[];
    const receipts = new Map<string, string[]>();
    for (const row of db.prepare('SELECT operation_id, receipt FROM receipts ORDER BY operation_rowid, seq').all() as Array<{ operation_id: string; receipt: string }>) {
      const list = receipts.get(row.operation_id) ?? [];
      list.push(row.receipt);
      receipts.set(row.operation_id, list);
    }
    const grants = db.prepare('SELECT capability_id, max_invocations FROM grants').all() as Array<{ capability_id: string; max_invocations: number }>;
    return { operations, receipts, grants };
  } finally {
    db.close();
  }
}

function readLedgers(dirs: Readonly<Record<string, string>>): Map<string, LedgerRecord> {
  const records = new Map<string, LedgerRecord>();
  for (const [executor, dir] of Object.entries(dirs)) {
    const ledgerFile = path.join(dir, 'ledger.db');
    if (!existsSync(ledgerFile)) continue;
    const ledger = openReadOnly(ledgerFile);
    try {
      const rows = ledger
        // A report is keyed by its claim's seq since ledger version 6 (executor-proc/ledger/schema.ts).
        .prepare('SELECT c.operation_id, c.kind, r.status, r.report FROM claims c LEFT JOIN reports r ON r.claim_seq = c.seq')
        .all() as Array<Omit<LedgerRecord, 'executor'>>;
      for (const row of rows) records.set(row.operation_id, { ...row, executor });
    } finally {
      ledger.close();
    }
    const archiveFile = path.join(dir, 'archive.db');
    if (!existsSync(archiveFile)) continue;
    const archive = openReadOnly(archiveFile);
    try {
      const rows = archive.prepare('SELECT operation_id, kind, status, report FROM archived_claims').all() as Array<Omit<LedgerRecord, 'executor'>>;
      for (const row of rows) if (!records.has(row.operation_id)) records.set(row.operation_id, { ...row, executor });
    } finally {
      archive.close();
    }
  }
  return records;
}

function readRequests(root: string): RequestRecord[] {
  const file = path.join(statePaths(root).supervisorDir, 'supervisor.db');
  if (!existsSync(file)) return [];
  const db = openReadOnly(file);
  try {
    return db.prepare('SELECT request_id, operation_id, phase, outcome, reason, receipt FROM requests').all() as RequestRecord[];
  } finally {
    db.close();
  }
}

function defaultExecutorDirs(root: string): Record<string, string> {
  const { executorsDir } = statePaths(root);
  if (!existsSync(executorsDir)) return {};
  return Object.fromEntries(readdirSync(executorsDir).map((name) => [name, path.join(executorsDir, name)]));
}

function trustedKeys(dirs: Readonly<Record<string, string>>): string[] {
  return Object.values(dirs)
    .map((dir) => path.join(dir, 'executor.pub'))
    .filter((file) => existsSync(file))
    .map((file) => readPublicKeyFile(file));
}

/** Whether a signed artifact verifies under one of the keys; the failure's message otherwise. */
function verifies(kind: 'report' | 'receipt', text: string, keys: readonly string[]): { ok: true; body: Record<string, unknown> } | { ok: false; why: string } {
  try {
    return { ok: true, body: decodeArtifact(kind, text, { trustedSigners: keys }).body };
  } catch (error) {
    return { ok: false, why: (error as Error).message };
  }
}

export function checkInvariants(options: CheckOptions): CheckResult {
  const { root } = options;
  const paths = statePaths(root);
  const executorDirs = options.executorDirs ?? defaultExecutorDirs(root);
  const journal = options.journal ?? path.join(paths.resourcesDir, 'review-notes.jsonl');
  const kernelKey = readPublicKeyFile(paths.kernelPub);
  const executorKeys = trustedKeys(executorDirs);
  const effects = effectsPerOperation(journal);
  const kernel = readKernel(root);
  const ledger = readLedgers(executorDirs);
  const requests = readRequests(root);

  const violations: Violation[] = [];
  const byOperation = new Map(kernel.operations.map((op) => [op.operation_id, op]));
  const violate = (rule: string, op: { request_id?: string | null; operation_id?: string | null }, detail: string) =>
    violations.push({ rule, request_id: op.request_id ?? null, operation_id: op.operation_id ?? null, detail });

  // Effects the kernel never heard of are effects nobody authorized.
  for (const [operationId, count] of effects) {
    if (count > 1) violate('at_most_one_effect', { request_id: byOperation.get(operationId)?.request_id, operation_id: operationId }, `${count} journal lines`);
    if (!byOperation.has(operationId)) violate('effect_authorized', { operation_id: operationId }, 'a journal line for an operation kernel.db does not hold');
  }

  const states: Record<string, number> = {};
  const usage = new Map<string, { consumed: number; reserved: number; completed: number; open: number }>();
  for (const op of kernel.operations) {
    states[op.state] = (states[op.state] ?? 0) + 1;
    const lines = effects.get(op.operation_id) ?? 0;
    const journaled = op.tool.startsWith(JOURNAL_TOOL_PREFIX);
    const record = ledger.get(op.operation_id);

    if (op.state === 'completed') {
      if (journaled && lines !== 1) violate('completed_one_effect', op, `completed with ${lines} journal lines`);
      if (!op.report) violate('completed_signed_report', op, 'completed without a retained report');
      else {
        const report = verifies('report', op.report, executorKeys);
        if (!report.ok) violate('completed_signed_report', op, `report does not verify: ${report.why}`);
        else if (!EFFECT_APPLIED.has(report.body.status as ReportStatus) || report.body.operation_id !== op.operation_id) {
          violate('completed_signed_report', op, `report says ${String(report.body.status)} for ${String(report.body.operation_id).slice(0, 16)}…`);
        }
      }
      const receipts = kernel.receipts.get(op.operation_id) ?? [];
      const completion = receipts.map((text) => verifies('receipt', text, [kernelKey])).find((r) => r.ok && r.body.decision === 'completion' && r.body.state === 'completed');
      if (!completion) violate('completed_signed_receipt', op, 'no completion receipt verifies under kernel.pub');
    }
    if (NO_EFFECT_STATES.has(op.state) && lines !== 0) violate('no_effect_when_released', op, `${op.state} with ${lines} journal lines`);
    if (op.state === 'released' && op.report) {
      const report = verifies('report', op.report, executorKeys);
      if (!report.ok) violate('released_signed_report', op, `report does not verify: ${report.why}`);
      else if (EFFECT_APPLIED.has(report.body.status as ReportStatus)) violate('released_signed_report', op, `released on a report that says ${String(report.body.status)}`);
    }
    if (op.state === 'unknown' && (op.flag === null || op.flag.trim() === '')) violate('unknown_has_reason', op, 'unknown without a flag naming why');

    // Holds against the operation's state.
    if (op.state !== 'denied') {
      if (op.hold_state === null) violate('hold_exists', op, `${op.state} without a hold`);
      else if (OPEN_STATES.has(op.state) && op.hold_state !== 'reserved') violate('hold_matches_state', op, `${op.state} with its hold ${op.hold_state}`);
      else if (!OPEN_STATES.has(op.state) && op.hold_state === 'reserved') violate('no_reserved_hold_when_settled', op, `${op.state} with its hold still reserved`);
      else if (op.state === 'completed' && op.hold_state !== 'consumed') violate('hold_matches_state', op, `completed with its hold ${op.hold_state}`);
      else if (NO_EFFECT_STATES.has(op.state) && op.hold_state !== 'released') violate('hold_matches_state', op, `${op.state} with its hold ${op.hold_state}`);
    }
    if (op.capability_id && op.hold_state) {
      const entry = usage.get(op.capability_id) ?? { consumed: 0, reserved: 0, completed: 0, open: 0 };
      if (op.hold_state === 'consumed') entry.consumed += op.hold_invocations ?? 0;
      if (op.hold_state === 'reserved') entry.reserved += op.hold_invocations ?? 0;
      if (op.state === 'completed') entry.completed += 1;
      if (OPEN_STATES.has(op.state)) entry.open += 1;
      usage.set(op.capability_id, entry);
    }

    // The executor's ledger against the kernel.
    if (record?.report && record.status) {
      const applied = EFFECT_APPLIED.has(record.status as ReportStatus);
      if (journaled && applied && lines !== 1) violate('ledger_matches_journal', op, `ledger says ${record.status}, journal has ${lines} lines`);
      if (journaled && !applied && lines !== 0) violate('ledger_matches_journal', op, `ledger says ${record.status}, journal has ${lines} lines`);
      if (op.report && op.report !== record.report) violate('one_report', op, 'kernel.db settled it on other report bytes than the ledger retained');
      if (applied && NO_EFFECT_STATES.has(op.state)) violate('ledger_matches_kernel', op, `ledger says ${record.status}, kernel ${op.state}`);
    } else if (record?.kind === 'claim' && (op.state === 'completed' || op.state === 'released')) {
      violate('ledger_matches_kernel', op, `kernel ${op.state} while the ledger's claim has no report`);
    }
  }

  // Each grant: usage is the sum of its holds (the kernel derives it from them), and
  // the holds say what the operations say.
  for (const grant of kernel.grants) {
    const entry = usage.get(grant.capability_id) ?? { consumed: 0, reserved: 0, completed: 0, open: 0 };
    if (entry.consumed + entry.reserved > grant.max_invocations) {
      violate('grant_within_bound', { operation_id: null }, `grant ${grant.capability_id}: ${entry.consumed} used + ${entry.reserved} held > ${grant.max_invocations}`);
    }
    if (entry.reserved !== entry.open) violate('grant_usage_is_holds', { operation_id: null }, `grant ${grant.capability_id}: ${entry.reserved} invocations held for ${entry.open} open operations`);
    if (entry.consumed < entry.completed) violate('grant_usage_is_holds', { operation_id: null }, `grant ${grant.capability_id}: ${entry.consumed} invocations used for ${entry.completed} completed operations`);
  }

  // The supervisor's log against the kernel.
  const requestById = new Map(requests.map((row) => [row.request_id, row]));
  for (const row of requests) {
    const op = byOperation.get(row.operation_id);
    if (row.phase === 'settled' || row.phase === 'refused') {
      if (!op) violate('log_matches_kernel', row, `${row.phase} (${row.outcome}) but kernel.db has no operation`);
      else if (row.outcome !== op.state) violate('log_matches_kernel', row, `${row.phase} as ${row.outcome}, kernel says ${op.state}`);
      if (row.receipt && op && !(kernel.receipts.get(op.operation_id) ?? []).includes(row.receipt)) {
        violate('log_matches_kernel', row, 'the answer carries receipt bytes kernel.db does not hold');
      }
    }
  }

  let final = 0;
  for (const requestId of options.mustBeFinal ?? []) {
    const row = requestById.get(requestId);
    const op = row ? byOperation.get(row.operation_id) : kernel.operations.find((o) => o.request_id === requestId);
    const settled = row && (row.phase === 'settled' || row.phase === 'refused');
    const unknown = op?.state === 'unknown' && op.flag !== null;
    if (settled || unknown) final += 1;
    else violate('request_final', { request_id: requestId, operation_id: op?.operation_id }, `phase ${row?.phase ?? 'missing'}, kernel ${op?.state ?? 'missing'}`);
  }

  return { violations, operations: kernel.operations.length, states, effects: [...effects.values()].reduce((a, b) => a + b, 0), final };
}
