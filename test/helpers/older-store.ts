// A store at an earlier schema version, holding what a real run left in a
// store at the current one: the earlier migrations create the file, the
// guard triggers step aside while the rows are copied in (each table from a
// SELECT on the source, attached as `src`), and come back with their exact
// SQL. A migration test then opens it with this build, as an upgrade would.
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { applyMigrations, type Migration } from '../../shared/store/migrations.js';

export interface OlderStore {
  /** The file to create (it must not exist). */
  readonly target: string;
  /** The current store the rows come from. */
  readonly source: string;
  /** The migrations of the earlier version (1..n). */
  readonly migrations: readonly Migration[];
  /** Per table, in insertion order: a SELECT over `src.*` giving the earlier table's columns by name. */
  readonly rows: ReadonlyArray<readonly [table: string, select: string]>;
  /** SQL functions the SELECTs use (e.g. a digest the earlier schema stored). */
  readonly functions?: Readonly<Record<string, (...args: never[]) => unknown>>;
}

export function buildOlderStore(spec: OlderStore): void {
  const db = new Database(spec.target);
  try {
    for (const [name, fn] of Object.entries(spec.functions ?? {})) db.function(name, { deterministic: true }, fn as (...args: unknown[]) => unknown);
    applyMigrations(db, 'older test store', spec.migrations, { provisioning: true });
    const triggers = db.prepare<[], { name: string; sql: string }>("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' ORDER BY rowid").all();
    db.prepare('ATTACH DATABASE ? AS src').run(spec.source);
    db.transaction(() => {
      for (const trigger of triggers) db.exec(`DROP TRIGGER "${trigger.name}"`);
      for (const [table, select] of spec.rows) {
        const columns = db
          .prepare<[], { name: string; hidden: number }>(`SELECT name, hidden FROM pragma_table_xinfo('${table}', 'main')`)
          .all()
          .filter((column) => column.hidden === 0)
          .map((column) => `"${column.name}"`)
          .join(', ');
        db.exec(`DELETE FROM main."${table}"`);
        db.exec(`INSERT INTO main."${table}" (${columns}) SELECT ${columns} FROM (${select})`);
      }
      for (const trigger of triggers) db.exec(trigger.sql);
    })();
    db.exec('DETACH DATABASE src');
  } finally {
    db.close();
  }
}

/**
 * Replace `dir`/`file` by the older store built from its rows: the current
 * one is copied whole (VACUUM INTO, the WAL included) into `scratch` as the
 * source, the original and its -wal and -shm removed, the older one written
 * in its place, private as custody keeps it.
 */
export function replaceWithOlderStore(dir: string, file: string, scratch: string, spec: Omit<OlderStore, 'target' | 'source'>): void {
  const target = path.join(dir, file);
  const source = path.join(scratch, `current-${file}`);
  fs.rmSync(source, { force: true });
  const current = new Database(target);
  current.prepare('VACUUM INTO ?').run(source);
  current.close();
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(target + suffix, { force: true });
  buildOlderStore({ ...spec, target, source });
  fs.chmodSync(target, 0o600);
}
