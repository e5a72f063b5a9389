// Reading what the ledger knows about one operation, in the live ledger and
// then in the archive: a claim or a refusal, and its report if there is one.
// Lookups consult the archive too, so an archived operation still replays
// its report and can never be claimed again.
import type Database from 'better-sqlite3';
import type { ReportStatus } from '../../shared/protocol/artifacts.js';
import type { ClaimState } from '../claim-machine.js';

export interface RetainedReport {
  readonly status: ReportStatus;
  /** The exact signed bytes, replayed as they are. */
  readonly text: string;
  readonly finishedAt: number;
}

export interface OperationRecord {
  readonly operationId: string;
  readonly claimId: string;
  readonly kind: 'claim' | 'refusal';
  readonly tool: string;
  readonly authorizationDigest: string;
  readonly notBefore: number;
  readonly expiresAt: number;
  readonly claimedAt: number | null;
  readonly report: RetainedReport | null;
  readonly archived: boolean;
}

export function stateOf(record: OperationRecord | null): ClaimState {
  if (!record) return 'unclaimed';
  return record.report?.status ?? 'claimed';
}

interface Row {
  operation_id: string;
  claim_id: string;
  kind: 'claim' | 'refusal';
  tool: string;
  authorization_digest: string;
  not_before: number;
  expires_at: number;
  claimed_at: number | null;
  status: ReportStatus | null;
  report: string | null;
  finished_at: number | null;
}

const COLUMNS = 'operation_id, claim_id, kind, tool, authorization_digest, not_before, expires_at, claimed_at';

function toRecord(row: Row, archived: boolean): OperationRecord {
  return {
    operationId: row.operation_id,
    claimId: row.claim_id,
    kind: row.kind,
    tool: row.tool,
    authorizationDigest: row.authorization_digest,
    notBefore: row.not_before,
    expiresAt: row.expires_at,
    claimedAt: row.claimed_at,
    report:
      row.status !== null && row.report !== null && row.finished_at !== null
        ? { status: row.status, text: row.report, finishedAt: row.finished_at }
        : null,
    archived,
  };
}

export class RecordReader {
  readonly #live: Database.Statement<[string], Row>;
  readonly #archived: Database.Statement<[string], Row>;

  constructor(ledger: Database.Database, archive: Database.Database) {
    this.#live = ledger.prepare(
      `SELECT ${COLUMNS.split(', ').map((c) => `c.${c}`).join(', ')}, r.status, r.report, r.finished_at
       FROM claims c LEFT JOIN reports r ON r.claim_seq = c.seq WHERE c.operation_id = ?`,
    );
    this.#archived = archive.prepare(`SELECT ${COLUMNS}, status, report, finished_at FROM archived_claims WHERE operation_id = ?`);
  }

  /** The live record; inside a transaction this is the re-read. */
  live(operationId: string): OperationRecord | null {
    const row = this.#live.get(operationId);
    return row ? toRecord(row, false) : null;
  }

  archived(operationId: string): OperationRecord | null {
    const row = this.#archived.get(operationId);
    return row ? toRecord(row, true) : null;
  }

  /** Live first, then the archive. */
  find(operationId: string): OperationRecord | null {
    return this.live(operationId) ?? this.archived(operationId);
  }
}
