// Grants: the kernel's signed capabilities, kept as their exact bytes beside
// plain columns an operator can query. Only revocation changes a grant.
import type Database from 'better-sqlite3';
import type { GrantKey } from '../../shared/protocol/kernel-messages.js';

export interface GrantRow {
  readonly capability_id: string;
  readonly tool: string;
  readonly subject: string;
  readonly max_invocations: number;
  readonly max_cost_units: number | null;
  readonly not_before: number;
  readonly expires_at: number;
  readonly issued_at: number;
  readonly revoked_at: number | null;
  readonly capability: string;
  readonly capability_digest: string;
}

/** A key before every grant, newest first: a first page starts after it. */
const NEWEST_FIRST_START: GrantKey = { issued_at: Number.MAX_SAFE_INTEGER, capability_id: '' };

/** The key a grant.list page that ends at this grant hands on. */
export function grantKeyOf(row: GrantRow): GrantKey {
  return { issued_at: row.issued_at, capability_id: row.capability_id };
}

/** Newest first, as grant.list lists them and reserve picks among equals: issued_at descending, then capability_id (byte order, as SQLite's). */
export function byNewest(a: GrantRow, b: GrantRow): number {
  return b.issued_at - a.issued_at || (a.capability_id < b.capability_id ? -1 : a.capability_id > b.capability_id ? 1 : 0);
}

export class GrantsTable {
  readonly #get: Database.Statement<[string], GrantRow>;
  readonly #liveOf: Database.Statement<[{ tool: string; subject: string; now: number }], GrantRow>;
  readonly #newestOf: Database.Statement<[{ tool: string; subject: string }], GrantRow>;
  readonly #page: Database.Statement<[GrantKey & { limit: number }], GrantRow>;
  readonly #livePage: Database.Statement<[GrantKey & { now: number; limit: number }], GrantRow>;
  readonly #insert: Database.Statement<[Omit<GrantRow, 'revoked_at'>]>;
  readonly #revoke: Database.Statement<[{ id: string; now: number }]>;

  constructor(db: Database.Database) {
    this.#get = db.prepare('SELECT * FROM grants WHERE capability_id = ?');
    // Reserve's candidates (kernel.db version 8): grants_live finds the unexpired
    // grants of one pattern and subject; revoked ones among them are skipped here.
    this.#liveOf = db.prepare("SELECT * FROM grants WHERE tool = @tool AND subject IN (@subject, '*') AND expires_at > @now AND revoked_at IS NULL");
    // The newest grant of one pattern and subject, whatever its state: grants_newest in its order, one entry read.
    this.#newestOf = db.prepare('SELECT * FROM grants WHERE tool = @tool AND subject = @subject ORDER BY issued_at DESC, capability_id LIMIT 1');
    // grant.list pages, newest first (the order byNewest names), each after the last page's key (docs/PROTOCOL.md,
    // "Paging"): every grant (an operator's listing) in grants_by_issue's order from the key on (kernel.db
    // version 9), or the live ones through grants_expiry, their keys sorted and the page's rows read by rowid
    // (named: with a key bound too, the planner would walk grants_by_issue through every expired grant).
    this.#page = db.prepare(`
      SELECT * FROM grants WHERE issued_at <= @issued_at AND (issued_at < @issued_at OR capability_id > @capability_id)
      ORDER BY issued_at DESC, capability_id LIMIT @limit`);
    this.#livePage = db.prepare(`
      SELECT * FROM grants WHERE rowid IN (
        SELECT rowid FROM grants INDEXED BY grants_expiry WHERE expires_at > @now AND revoked_at IS NULL
          AND issued_at <= @issued_at AND (issued_at < @issued_at OR capability_id > @capability_id)
        ORDER BY issued_at DESC, capability_id LIMIT @limit)
      ORDER BY issued_at DESC, capability_id`);
    this.#insert = db.prepare(`
      INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at,
                          capability, capability_digest)
      VALUES (@capability_id, @tool, @subject, @max_invocations, @max_cost_units, @not_before, @expires_at, @issued_at,
              @capability, @capability_digest)`);
    this.#revoke = db.prepare('UPDATE grants SET revoked_at = @now WHERE capability_id = @id AND revoked_at IS NULL');
  }

  get(capabilityId: string): GrantRow | undefined {
    return this.#get.get(capabilityId);
  }

  /**
   * A page of grants newest first, those after `after` (from the newest when
   * null): all of them, or (`liveAt` a time) those neither expired nor
   * revoked then.
   */
  page(liveAt: number | null, limit: number, after: GrantKey | null): GrantRow[] {
    const key = after ?? NEWEST_FIRST_START;
    return liveAt === null ? this.#page.all({ ...key, limit }) : this.#livePage.all({ ...key, now: liveAt, limit });
  }

  /**
   * The grants a reservation of `subject` under one of `patterns` could
   * draw on now: neither expired nor revoked, newest first. Costs the live
   * grants of those patterns, never the grants that ran out before.
   */
  live(patterns: readonly string[], subject: string, now: number): GrantRow[] {
    return patterns.flatMap((tool) => this.#liveOf.all({ tool, subject, now })).sort(byNewest);
  }

  /** The newest grant of `subject` (or '*') under one of `patterns`, in any state: one index entry per pattern and subject. */
  newest(patterns: readonly string[], subject: string): GrantRow | undefined {
    let newest: GrantRow | undefined;
    for (const tool of patterns) {
      for (const who of new Set([subject, '*'])) {
        const row = this.#newestOf.get({ tool, subject: who });
        if (row && (newest === undefined || byNewest(row, newest) < 0)) newest = row;
      }
    }
    return newest;
  }

  insert(row: Omit<GrantRow, 'revoked_at'>): void {
    this.#insert.run(row);
  }

  /** Revoke once; a second revocation keeps the first time. */
  revoke(capabilityId: string, now: number): void {
    this.#revoke.run({ id: capabilityId, now });
  }
}
