// A ledger's guards are schema objects an operator could drop from the
// `sqlite3` shell (DROP TRIGGER claims_no_update). user_version alone would
// not notice, so on open every table, index, view and trigger is compared
// with what the migrations create, by its exact SQL; anything missing,
// changed or added refuses the open (ARCHITECTURE.md §6.2 "a changed schema").
import Database from 'better-sqlite3';
import { CustodyError } from '../../shared/errors.js';
import type { Migration } from '../../shared/store/sqlite-store.js';

interface SchemaObject {
  readonly type: string;
  readonly name: string;
  readonly sql: string | null;
}

const OBJECTS = `SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name`;

function objectsOf(db: Database.Database): Map<string, SchemaObject> {
  const rows = db.prepare(OBJECTS).all() as SchemaObject[];
  return new Map(rows.map((row) => [row.name, row]));
}

const expectedByMigrations = new Map<readonly Migration[], Map<string, SchemaObject>>();

function expectedObjects(migrations: readonly Migration[]): Map<string, SchemaObject> {
  let expected = expectedByMigrations.get(migrations);
  if (!expected) {
    const scratch = new Database(':memory:');
    try {
      for (const migration of migrations) scratch.exec(migration.sql);
      expected = objectsOf(scratch);
    } finally {
      scratch.close();
    }
    expectedByMigrations.set(migrations, expected);
  }
  return expected;
}

/** Refuse with store_schema unless the store holds exactly the objects its migrations create. */
export function checkSchemaObjects(db: Database.Database, where: string, migrations: readonly Migration[]): void {
  const expected = expectedObjects(migrations);
  const found = objectsOf(db);
  const faults: string[] = [];
  for (const [name, object] of expected) {
    const actual = found.get(name);
    if (!actual) faults.push(`${object.type} ${name} is missing`);
    else if (actual.type !== object.type || actual.sql !== object.sql) faults.push(`${object.type} ${name} was changed`);
  }
  for (const [name, object] of found) {
    if (!expected.has(name)) faults.push(`${object.type} ${name} was added`);
  }
  if (faults.length > 0) {
    throw new CustodyError(
      'store_schema',
      `${where}: schema differs from this build's (${faults.slice(0, 4).join('; ')}${faults.length > 4 ? `; +${faults.length - 4} more` : ''}); ` +
        'its guards may have been removed — inspect it before trusting its claims',
    );
  }
}
