// Explicit, safe archival (ARCHITECTURE.md §6.2, "Capacity and archival"). A claim
// leaves the live ledger only when (a) its authorization window has passed by
// max(clock, HWM), so it can never be claimed again, the mark guarding that,
// (b) it has a report, and (c) the supervisor lists it as settled by the
// kernel. It is copied into archive.db (append-only) and committed there
// first, then removed from the live ledger in a second transaction that the
// delete triggers allow only for rows verified in the archive. A crash
// between the two leaves the row in both places, never in neither; the next
// archival finds the copy and finishes the move. Lookups read the archive
// too, so an archived operation still replays its report.
import type Database from 'better-sqlite3';
import { artifactDigest } from '../../shared/artifacts/artifact.js';
import { CustodyError } from '../../shared/errors.js';
import { crashPoint } from '../../shared/fault.js';
import { nowMs } from '../../shared/clock.js';
import type { LIVE_WAITING_REASONS, NOT_ARCHIVED_REASONS } from '../../shared/protocol/executor-messages.js';
import type { Ledger } from './ledger.js';

export type NotArchivedReason = (typeof NOT_ARCHIVED_REASONS)[number];
export type LiveWaitingReason = (typeof LIVE_WAITING_REASONS)[number];

export interface ArchiveResult {
  readonly archived: number;
  readonly live: number;
  readonly notArchived: ReadonlyArray<{ readonly operation_id: string; readonly reason: NotArchivedReason }>;
}

interface LiveRow {
  operation_id: string;
  claim_id: string;
  kind: string;
  tool: string;
  authorization_digest: string;
  authorization: string;
  not_before: number;
  expires_at: number;
  claimed_at: number | null;
  recorded_at: number;
  status: string;
  report: string;
  report_digest: string;
  finished_at: number;
}

export class Archiver {
  readonly #ledger: Ledger;
  readonly #archive: Database.Database;
  readonly #permits = new Set<string>();
  readonly #readLive: Database.Statement<[string], Omit<LiveRow, 'report_digest'>>;
  readonly #copy: Database.Statement;
  readonly #readCopy: Database.Statement<[string], { claim_id: string; report_digest: string }>;
  readonly #deleteReport: Database.Statement<[string]>;
  readonly #deleteClaim: Database.Statement<[string]>;
  readonly #livePage: Database.Statement<[number, number], { seq: number; operation_id: string; expires_at: number; reported: number }>;

  constructor(ledger: Ledger, archive: Database.Database) {
    this.#ledger = ledger;
    this.#archive = archive;
    const db = ledger.db;
    // Named in the delete triggers; exists on this connection only (schema.ts).
    db.function('custody_archive_permit', { deterministic: false }, (operationId: unknown) =>
      typeof operationId === 'string' && this.#permits.has(operationId) ? 1 : 0,
    );
    this.#readLive = db.prepare(
      `SELECT c.operation_id, c.claim_id, c.kind, c.tool, c.authorization_digest, c.authorization, c.not_before, c.expires_at,
              c.claimed_at, c.recorded_at, r.status, r.report, r.finished_at
       FROM claims c JOIN reports r ON r.claim_seq = c.seq WHERE c.operation_id = ?`,
    );
    this.#copy = archive.prepare(
      `INSERT INTO archived_claims (operation_id, claim_id, kind, tool, authorization_digest, authorization, not_before, expires_at,
                                    claimed_at, recorded_at, status, report, report_digest, finished_at, archived_at)
       VALUES (@operation_id, @claim_id, @kind, @tool, @authorization_digest, @authorization, @not_before, @expires_at,
               @claimed_at, @recorded_at, @status, @report, @report_digest, @finished_at, @archived_at)`,
    );
    this.#readCopy = archive.prepare('SELECT claim_id, report_digest FROM archived_claims WHERE operation_id = ?');
    this.#deleteReport = db.prepare('DELETE FROM reports WHERE claim_seq = (SELECT seq FROM claims WHERE operation_id = ?)');
    this.#deleteClaim = db.prepare('DELETE FROM claims WHERE operation_id = ?');
    this.#livePage = db.prepare(
      `SELECT c.seq, c.operation_id, c.expires_at, r.claim_seq IS NOT NULL AS reported
       FROM claims c LEFT JOIN reports r ON r.claim_seq = c.seq WHERE c.seq > ? ORDER BY c.seq LIMIT ?`,
    );
  }

  /**
   * One page of the live ledger after `after` (a claim's seq), each entry
   * with why it may not leave yet, or null (protocol: `ledger.live`). Judged
   * by max(clock, high-water mark) without storing a mark: archive() judges
   * again, with one.
   */
  live(after: number, limit: number): { claims: Array<{ operation_id: string; waiting: LiveWaitingReason | null }>; next: number | null; live: number } {
    const now = Math.max(nowMs(), this.#ledger.highWaterMark());
    const rows = this.#livePage.all(after, limit + 1);
    const page = rows.slice(0, limit);
    return {
      claims: page.map((row) => ({ operation_id: row.operation_id, waiting: row.reported === 0 ? 'no_report' : now < row.expires_at ? 'window_open' : null })),
      next: rows.length > limit ? page[page.length - 1]!.seq : null,
      live: this.#ledger.liveCount(),
    };
  }

  archive(settled: readonly string[]): ArchiveResult {
    // The window test below is a time-based answer: store the mark first (H6, ARCHITECTURE.md §6.5).
    const now = this.#ledger.stampClock();
    const notArchived: Array<{ operation_id: string; reason: NotArchivedReason }> = [];
    const eligible: LiveRow[] = [];
    for (const operationId of new Set(settled)) {
      const record = this.#ledger.records.live(operationId);
      if (!record) {
        const reason = this.#ledger.records.archived(operationId) ? 'already_archived' : 'unknown_operation';
        notArchived.push({ operation_id: operationId, reason });
      } else if (!record.report) {
        notArchived.push({ operation_id: operationId, reason: 'no_report' });
      } else if (now < record.expiresAt) {
        notArchived.push({ operation_id: operationId, reason: 'window_open' });
      } else {
        const row = this.#readLive.get(operationId);
        // The live ledger keeps the report's bytes, not its digest (schema.ts, version 5); the archive keeps both.
        if (row) eligible.push({ ...row, report_digest: artifactDigest(row.report) });
      }
    }
    if (eligible.length > 0) {
      this.#copyToArchive(eligible, now);
      this.#removeFromLive(eligible);
    }
    return { archived: eligible.length, live: this.#ledger.liveCount(), notArchived };
  }

  #copyToArchive(rows: readonly LiveRow[], now: number): void {
    this.#archive
      .transaction(() => {
        for (const row of rows) {
          const copy = this.#readCopy.get(row.operation_id);
          if (copy) {
            // Left by an archival that died before removing the live row.
            this.#assertSameCopy(row, copy);
            continue;
          }
          this.#copy.run({ ...row, archived_at: now });
        }
        // Copied, not committed: a crash here rolls the copy back.
        crashPoint('executor', 'inside_archive_copy');
      })
      .immediate();
    crashPoint('executor', 'after_archive_copy_commit');
  }

  #removeFromLive(rows: readonly LiveRow[]): void {
    this.#ledger.db
      .transaction(() => {
        try {
          for (const row of rows) {
            const copy = this.#readCopy.get(row.operation_id);
            if (!copy) throw new CustodyError('store_corrupt', `archive lost the copy of ${row.operation_id} before its live row was removed`);
            this.#assertSameCopy(row, copy);
            this.#permits.add(row.operation_id);
            this.#deleteReport.run(row.operation_id);
            this.#deleteClaim.run(row.operation_id);
          }
        } finally {
          this.#permits.clear();
        }
      })
      .immediate();
    crashPoint('executor', 'after_archive_delete_commit');
  }

  #assertSameCopy(row: LiveRow, copy: { claim_id: string; report_digest: string }): void {
    if (copy.claim_id !== row.claim_id || copy.report_digest !== row.report_digest) {
      throw new CustodyError(
        'store_corrupt',
        `archive holds operation ${row.operation_id} with claim ${copy.claim_id}, the ledger with claim ${row.claim_id}; nothing was moved`,
      );
    }
  }
}
