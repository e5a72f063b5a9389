// Paging by key, against the store's own statements (docs/PROTOCOL.md,
// "Paging"): ops.list with and without states, recover, and grant.list of
// every grant and of the live ones, each paged a few entries at a time over
// entries that share their time (ties are broken by id), while entries leave
// and join the listing between pages. Whatever happens between pages, a
// listing holds no entry twice, keeps the message's order, and holds every
// entry that was in it throughout; with nothing happening it is exactly the
// whole listing read at once.
import Database from 'better-sqlite3';
import { expect } from 'chai';
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import { type GrantRow, GrantsTable, grantKeyOf } from '../../kernel-proc/store/grants-table.js';
import { type OperationRow, OperationsTable, operationKeyOf } from '../../kernel-proc/store/operations-table.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { applyMigrations } from '../../shared/store/migrations.js';

/** Between two pages: nothing, or entries leaving and joining the listing. */
const change = fc.record({ leave: fc.array(fc.nat(), { maxLength: 3 }), join: fc.array(fc.integer({ min: 1, max: 6 }), { maxLength: 2 }) });
const plan = fc.record({
  // Few distinct times: most entries share theirs with others.
  times: fc.array(fc.integer({ min: 1, max: 6 }), { maxLength: 30 }),
  limit: fc.integer({ min: 1, max: 4 }),
  changes: fc.array(change, { maxLength: 12 }),
});

const idOf = (n: number) => createHash('sha256').update(`paged-${n}`).digest('hex');

/** Page `page` to the end, each page after the last one's key; `between` runs after each page. */
function pageAll<Row, Key>(page: (after: Key | null) => Row[], limit: number, keyOf: (row: Row) => Key, between: (index: number) => void): Row[] {
  const listed: Row[] = [];
  let after: Key | null = null;
  for (let index = 0; ; index++) {
    // A key that does not move past its page would page forever: each page must list one entry at least.
    if (index > 200) throw new Error('paging does not end');
    // As the kernel asks: one row past the limit says the page is not the last.
    const rows = page(after);
    listed.push(...rows.slice(0, limit));
    if (rows.length <= limit) return listed;
    after = keyOf(rows[limit - 1]!);
    between(index);
  }
}

function withStore<T>(run: (db: Database.Database) => T): T {
  const db = new Database(':memory:');
  try {
    applyMigrations(db, 'paging', KERNEL_MIGRATIONS, { provisioning: true });
    return run(db);
  } finally {
    db.close();
  }
}

/** The listing's invariants: no entry twice, the order kept, every entry there throughout listed. */
function expectSound(listed: readonly string[], ordered: (a: string, b: string) => boolean, throughout: readonly string[]): void {
  expect(new Set(listed).size, 'no entry twice').to.equal(listed.length);
  for (let i = 1; i < listed.length; i++) expect(ordered(listed[i - 1]!, listed[i]!), `${listed[i - 1]} before ${listed[i]}`).to.equal(true);
  const seen = new Set(listed);
  expect(throughout.filter((id) => !seen.has(id)), 'every entry there throughout').to.deep.equal([]);
}

describe('kernel-proc: listings paged by key while entries come and go', () => {
  /** Operations, each created reserved, some started (dispatch_committed); `selected` names the states a listing asks for. */
  function operationsCase(kind: 'every' | 'reserved' | 'in doubt') {
    fc.assert(
      fc.property(plan, fc.array(fc.boolean(), { maxLength: 30 }), ({ times, limit, changes }, started) =>
        withStore((db) => {
          const table = new OperationsTable(db);
          let made = 0;
          const create = (at: number, start: boolean) => {
            const id = idOf(made++);
            db.prepare(`INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, state, created_at, updated_at)
                        VALUES (?, ?, 'h', 'agent', 'a/b', 'p', 0, 'reserved', ?, ?)`).run(id, `req-${made}`, at, at);
            if (start) db.prepare("UPDATE operations SET state = 'dispatch_committed' WHERE operation_id = ?").run(id);
            return id;
          };
          times.forEach((at, i) => create(at, started[i] ?? false));
          const states = kind === 'reserved' ? ['reserved'] : kind === 'in doubt' ? ['dispatch_committed', 'awaiting_report', 'unknown'] : null;
          const select = () =>
            (db.prepare('SELECT operation_id, created_at, state FROM operations').all() as Array<{ operation_id: string; created_at: number; state: string }>).filter(
              (row) => states === null || states.includes(row.state),
            );
          const at = new Map((db.prepare('SELECT operation_id, created_at FROM operations').all() as Array<{ operation_id: string; created_at: number }>).map((row) => [row.operation_id, row.created_at]));
          const newestFirst = kind !== 'in doubt';
          // The message's order: created_at (descending for ops.list, ascending for recover), then operation_id ascending.
          const ordered = (a: string, b: string) => {
            const [ta, tb] = [at.get(a)!, at.get(b)!];
            return ta === tb ? a < b : newestFirst ? ta > tb : ta < tb;
          };
          const whole = kind === 'in doubt' ? table.inDoubt(10_000, null) : table.list(states as never, 10_000, null);
          const page = (after: ReturnType<typeof operationKeyOf> | null): Array<Pick<OperationRow, 'operation_id' | 'created_at'>> =>
            kind === 'in doubt' ? table.inDoubt(limit + 1, after) : table.list(states as never, limit + 1, after);

          // Nothing between pages: the whole listing, page by page.
          expect(pageAll(page, limit, operationKeyOf, () => undefined).map((row) => row.operation_id)).to.deep.equal(whole.map((row) => row.operation_id));

          // Entries leave (a reserved one started or expired; one in doubt completed) and join (created; a reserved one started) between pages.
          const before = new Set(select().map((row) => row.operation_id));
          const listed = pageAll(page, limit, operationKeyOf, (index) => {
            const { leave, join } = changes[index] ?? { leave: [], join: [] };
            const current = select();
            for (const pick of leave) {
              const row = current[pick % Math.max(1, current.length)];
              if (row === undefined) continue;
              const to = row.state === 'reserved' ? (kind === 'in doubt' ? 'dispatch_committed' : 'expired') : row.state === 'dispatch_committed' ? 'completed' : null;
              if (to !== null) db.prepare('UPDATE operations SET state = ? WHERE operation_id = ? AND state = ?').run(to, row.operation_id, row.state);
            }
            for (const time of join) at.set(create(time, kind === 'in doubt'), time);
          }).map((row) => row.operation_id);
          const after = new Set(select().map((row) => row.operation_id));
          // Moves go one way (reserved, dispatch_committed, completed): in the selection at both ends is in it throughout.
          expectSound(listed, ordered, [...before].filter((id) => after.has(id)));
        }),
      ),
      { numRuns: 150 },
    );
  }

  it('ops.list of every operation', () => operationsCase('every'));
  it('ops.list of the reserved operations, which leave as they start or expire', () => operationsCase('reserved'));
  it('recover, oldest first, over operations that start and settle', () => operationsCase('in doubt'));

  it('grant.list of every grant and of the live ones, while grants are revoked and issued', () => {
    fc.assert(
      fc.property(plan, fc.boolean(), ({ times, limit, changes }, live) =>
        withStore((db) => {
          const table = new GrantsTable(db);
          const NOW = 100;
          let made = 0;
          const issue = (at: number) => {
            const id = `cap-${String((made * 7919) % 1009).padStart(4, '0')}-${made++}`;
            table.insert({ capability_id: id, tool: 'a/*', subject: '*', max_invocations: 1, max_cost_units: null, not_before: 0, expires_at: NOW + 10, issued_at: at, capability: '{}', capability_digest: '0'.repeat(64) });
            return id;
          };
          const at = new Map(times.map((time) => [issue(time), time]));
          const select = () => (db.prepare('SELECT * FROM grants').all() as GrantRow[]).filter((row) => !live || row.revoked_at === null);
          const ordered = (a: string, b: string) => (at.get(a) === at.get(b) ? a < b : at.get(a)! > at.get(b)!);
          const page = (after: ReturnType<typeof grantKeyOf> | null) => table.page(live ? NOW : null, limit + 1, after);
          const whole = table.page(live ? NOW : null, 10_000, null).map((row) => row.capability_id);
          expect(pageAll(page, limit, grantKeyOf, () => undefined).map((row) => row.capability_id)).to.deep.equal(whole);

          const before = new Set(select().map((row) => row.capability_id));
          const listed = pageAll(page, limit, grantKeyOf, (index) => {
            const { leave, join } = changes[index] ?? { leave: [], join: [] };
            const current = select().filter((row) => row.revoked_at === null);
            for (const pick of leave) {
              const row = current[pick % Math.max(1, current.length)];
              if (row !== undefined) table.revoke(row.capability_id, NOW);
            }
            for (const time of join) at.set(issue(time), time);
          }).map((row) => row.capability_id);
          const after = new Set(select().map((row) => row.capability_id));
          expectSound(listed, ordered, [...before].filter((id) => after.has(id)));
        }),
      ),
      { numRuns: 150 },
    );
  });
});
