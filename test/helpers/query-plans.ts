// What a store's statements read, for the tests that hold its indexes
// (docs/PERFORMANCE.md "History on the start path"): the SQL every
// `prepare` received while a store opened, and each one's query plan.
import Database from 'better-sqlite3';

/** Every SQL text prepared while `open` runs (the stores prepare theirs when they open). */
export function preparedWhile(open: () => void): string[] {
  const seen: string[] = [];
  // Called with its own `this` below; taken from the descriptor, not as a loose method.
  const prepare = Object.getOwnPropertyDescriptor(Database.prototype, 'prepare')!.value as Database.Database['prepare'];
  Database.prototype.prepare = function (this: Database.Database, source: string) {
    seen.push(source);
    return prepare.call(this, source);
  } as typeof prepare;
  try {
    open();
  } finally {
    Database.prototype.prepare = prepare;
  }
  return [...new Set(seen)];
}

/** EXPLAIN QUERY PLAN of `sql` on `db`, every parameter bound to NULL: one line per step. */
export function queryPlan(db: Database.Database, sql: string): string[] {
  const named = [...new Set([...sql.matchAll(/@(\w+)/g)].map((m) => m[1]!))];
  const statement = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
  const params = named.length > 0 ? [Object.fromEntries(named.map((name) => [name, null]))] : Array.from({ length: (sql.match(/\?/g) ?? []).length }, () => null);
  return (statement.all(...params) as Array<{ detail: string }>).map((row) => row.detail);
}

/**
 * The steps of a plan that read a table row by row: a SCAN by no index. A
 * plan names a table by its alias when the statement gives one (`FROM
 * claims c` plans as `SCAN c`), so every such step counts, whatever it names.
 */
export function rowByRow(plan: readonly string[]): string[] {
  return plan.filter((detail) => /^SCAN /.test(detail) && !/ USING (COVERING )?INDEX /.test(detail) && !/VIRTUAL TABLE|CONSTANT ROW/.test(detail));
}

/**
 * Run a migration's SQL on `db` statement by statement up to `until` (the
 * part before it must be plain statements, no trigger bodies), reading the
 * plan of each `INSERT INTO <table>` before it runs. Also names every index
 * created on a table after that table was filled: building it sorts all of
 * the table's keys at once.
 */
export function copyPlans(db: Database.Database, sql: string, until: string): { plans: Map<string, string>; indexedAfterACopy: string[] } {
  const plans = new Map<string, string>();
  const indexedAfterACopy: string[] = [];
  for (const chunk of sql.slice(0, sql.indexOf(until)).split(/;\n/)) {
    const statement = chunk.replace(/^\s*(--[^\n]*\n\s*)*/, '').trim();
    if (statement === '') continue;
    const copy = /^INSERT INTO (\w+)/.exec(statement);
    if (copy) plans.set(copy[1]!, queryPlan(db, statement).join('; '));
    const index = /^CREATE INDEX \w+ ON (\w+)/.exec(statement);
    if (index && plans.has(index[1]!)) indexedAfterACopy.push(statement);
    db.exec(statement);
  }
  return { plans, indexedAfterACopy };
}
