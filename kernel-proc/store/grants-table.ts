// Grants: the kernel's signed capabilities, kept as their exact bytes beside
// plain columns an operator can query. Only revocation changes a grant.
import type Database from 'better-sqlite3';

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

export class GrantsTable {
  readonly #get: Database.Statement<[string], GrantRow>;
  readonly #all: Database.Statement<[], GrantRow>;
  readonly #insert: Database.Statement<[Omit<GrantRow, 'revoked_at'>]>;
  readonly #revoke: Database.Statement<[{ id: string; now: number }]>;

  constructor(db: Database.Database) {
    this.#get = db.prepare('SELECT * FROM grants WHERE capability_id = ?');
    // Newest first: that is the order an operator lists them in and the order reserve picks among equals.
    this.#all = db.prepare('SELECT * FROM grants ORDER BY issued_at DESC, capability_id');
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

  all(): GrantRow[] {
    return this.#all.all();
  }

  insert(row: Omit<GrantRow, 'revoked_at'>): void {
    this.#insert.run(row);
  }

  /** Revoke once; a second revocation keeps the first time. */
  revoke(capabilityId: string, now: number): void {
    this.#revoke.run({ id: capabilityId, now });
  }
}
