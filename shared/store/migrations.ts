// Forward-only schema migrations, versioned in SQLite's `user_version` so an
// operator's `PRAGMA user_version` shows where a store stands. Each step runs
// in its own write transaction with the version bump, so a crash leaves the
// store at a version it really has.
import type Database from 'better-sqlite3';
import { CustodyError, isStorageFull, isStoreBusy } from '../errors.js';
import { holdPoint } from '../fault.js';
import { type Logger, createLogger } from '../log.js';

/**
 * The event a store's opener writes on stderr before it migrates an existing
 * store. A child migrates before its hello, which may take far longer than
 * the hello timeout (one transaction over every row); its host, seeing this
 * line, waits for the hello up to its migration bound instead
 * (docs/PROTOCOL.md §5, `timing.migrate_timeout_ms`).
 */
export const MIGRATING_EVENT = 'store_migrating';

/** Where the migration events go; a child names itself (shared/child/runtime.ts). Whatever the log level: a host acts on them. */
let notices: Logger = createLogger({ pid: process.pid }, { level: 'debug' });

/** Send the migration events to `log`, which must not filter them out by level. */
export function announceMigrationsTo(log: Logger): void {
  notices = log;
}

export interface Migration {
  readonly version: number;
  readonly description: string;
  readonly sql: string;
}

export function validateMigrations(label: string, migrations: readonly Migration[]): void {
  if (migrations.length === 0) {
    throw new CustodyError('store_schema', `${label} store declares no migrations; version 1 must create the schema`);
  }
  migrations.forEach((migration, index) => {
    if (migration.version !== index + 1) {
      throw new CustodyError(
        'store_schema',
        `${label} store migration at position ${index} has version ${migration.version}, expected ${index + 1}; migrations are numbered 1..n in order`,
      );
    }
    if (migration.description.trim() === '' || migration.sql.trim() === '') {
      throw new CustodyError('store_schema', `${label} store migration ${migration.version} needs a description and SQL`);
    }
  });
}

/**
 * Bring a store from its `user_version` to the last migration. A version newer
 * than this build is refused (never downgraded); version 0 is accepted only
 * while provisioning, since an opened store at 0 was either never finished or
 * is not ours.
 */
export function applyMigrations(
  db: Database.Database,
  where: string,
  migrations: readonly Migration[],
  mode: { readonly provisioning: boolean; /** Names the store's fault cutpoints (shared/fault.ts): `<label>:during_migration`. */ readonly label?: string },
): void {
  const latest = migrations.length;
  const current = readUserVersion(db);
  if (current > latest) {
    throw new CustodyError(
      'store_schema',
      `${where} has schema version ${current}, newer than this build knows (${latest}); run the custody version that wrote it — stores are never downgraded`,
    );
  }
  if (current === 0 && !mode.provisioning) {
    throw new CustodyError(
      'store_schema',
      `${where} has no schema (user_version 0): its provisioning never completed or it is not a custody store; inspect it, move it aside and provision again`,
    );
  }
  const migrating = current > 0 && current < latest;
  const startedAt = performance.now();
  if (migrating) notices.warn(MIGRATING_EVENT, { store: where, from: current, to: latest });
  for (const migration of migrations.slice(current)) {
    const step = `${where}: migration ${migration.version} (${migration.description})`;
    const apply = db.transaction(() => {
      // Another connection may have migrated between our first read and this write lock.
      const before = readUserVersion(db);
      if (before !== migration.version - 1) {
        throw new CustodyError('store_schema', `${step} found the store moved to schema version ${before} meanwhile`);
      }
      db.exec(migration.sql);
      // A test holds the first step here, inside its transaction, to outlast a bound or be killed mid-migration.
      if (migrating && mode.label && migration.version === current + 1) holdPoint(mode.label, 'during_migration');
      const violations = db.pragma('foreign_key_check') as unknown[];
      if (violations.length > 0) {
        throw new CustodyError('store_schema', `${step} leaves ${violations.length} foreign key violation(s); rolled back`);
      }
      db.pragma(`user_version = ${migration.version}`);
    });
    try {
      apply.immediate();
    } catch (error) {
      if (error instanceof CustodyError) throw error;
      const message = error instanceof Error ? error.message : String(error);
      // A migration that rewrites a table needs room for a copy of it (and the WAL that carries the copy): out of
      // room is not a schema fault, and the store is whole at its previous version (README "Upgrading").
      if (isStorageFull(error)) {
        throw new CustodyError(
          'storage_full',
          `${step} ran out of room and was rolled back, the store still at version ${migration.version - 1} (${message}); ` +
            'a migration that rewrites a table needs about twice the store\'s size free while it runs: free space, then start again',
          { cause: error },
        );
      }
      // Another connection (an operator's sqlite3 shell) holds the lock: not a schema fault either, and the next start retries.
      if (isStoreBusy(error)) {
        throw new CustodyError(
          'store_busy',
          `${step} could not take the store's lock, which another connection holds (an open write transaction, such as one left open in a sqlite3 shell); the store is still at version ${migration.version - 1} (${message}): end that transaction, and the next start migrates it`,
          { cause: error },
        );
      }
      throw new CustodyError('store_schema', `${step} failed and was rolled back: ${message}`, { cause: error });
    }
  }
  if (migrating) {
    notices.warn('store_migrated', { store: where, from: current, to: latest, ms: Math.round(performance.now() - startedAt) });
    // A migration that rewrites a table writes all of it through the WAL, which SQLite then reuses but never
    // shrinks: left alone, a -wal file the size of the store would stay beside it for good. Copy it into the
    // store and cut it back (a reader holding it open, an operator's shell, only makes this a no-op). The
    // migration has committed: a checkpoint that fails (the file cannot grow by the copy: out of room) leaves
    // the store whole at its new version, its last commits in the WAL, which every later checkpoint retries.
    try {
      db.pragma('wal_checkpoint(TRUNCATE)');
    } catch (error) {
      notices.warn('store_checkpoint_failed', {
        store: where,
        reason: error instanceof Error ? error.message : String(error),
        code: isStorageFull(error) ? 'storage_full' : 'internal',
      });
    }
  }
}

export function readUserVersion(db: Database.Database): number {
  return db.pragma('user_version', { simple: true }) as number;
}
