// Provisioning and opening the executor's two stores: ledger.db (live
// claims, refusals, reports, the clock) and archive.db (what archival moved
// out). Two doors, never one: provisioning refuses anything already there,
// opening refuses anything missing, changed, loose, copied or swapped, and no
// path creates a replacement to get past an error (ARCHITECTURE.md §6.2).
import path from 'node:path';
import type Database from 'better-sqlite3';
import { CustodyError, isCustodyError } from '../../shared/errors.js';
import { openStore, provisionStore, storeFileIdentity, type StoreSpec } from '../../shared/store/sqlite-store.js';
import { ARCHIVE_MIGRATIONS, LEDGER_MIGRATIONS } from './schema.js';
import { checkSchemaObjects } from './schema-check.js';

export const LEDGER_FILE = 'ledger.db';
export const ARCHIVE_FILE = 'archive.db';

export interface LedgerConfig {
  readonly executorId: string;
  readonly publicKey: string;
  readonly keyEpoch: number;
  readonly kernelPublicKey: string;
  readonly claimCapacity: number;
  readonly refusalReserve: number;
}

export interface ExecutorStores {
  readonly ledger: Database.Database;
  /** The ledger's path and the file it named when opened: a claim checks the path still names it. */
  readonly ledgerFile: { readonly path: string; readonly dev: number; readonly ino: number };
  readonly archive: Database.Database;
  readonly config: LedgerConfig;
}

export interface ProvisionRequest {
  readonly dir: string;
  readonly config: LedgerConfig;
  readonly now: number;
}

/**
 * What serving expects of the ledger; undefined members are not checked. The
 * key epoch is not among them: rotation moves it (key_epochs), so a setting
 * that names another epoch is information, reported by the caller.
 */
export interface OpenExpectation {
  /** The kernel's first key, pinned at provision: later ones come only through rotation statements (kernel_epochs). */
  readonly kernelPublicKey: string;
  /** The key in executor.key: must be the current epoch's (key_epochs). */
  readonly publicKey?: string;
  /** Information only: never compared (see above). */
  readonly keyEpoch?: number | undefined;
  readonly executorId: string | undefined;
  readonly claimCapacity: number | undefined;
  readonly refusalReserve: number | undefined;
}

const ledgerSpec = (dir: string): StoreSpec => ({ label: 'ledger', dir, file: LEDGER_FILE, migrations: LEDGER_MIGRATIONS });
const archiveSpec = (dir: string): StoreSpec => ({ label: 'archive', dir, file: ARCHIVE_FILE, migrations: ARCHIVE_MIGRATIONS });

export function provisionStores(request: ProvisionRequest): ExecutorStores {
  const { dir, config, now } = request;
  const ledger = provisionStore(ledgerSpec(dir));
  try {
    const file = storeFileIdentity(path.join(dir, LEDGER_FILE));
    ledger.transaction(() => {
      ledger
        .prepare(
          `INSERT INTO config (id, executor_id, public_key, key_epoch, kernel_public_key, claim_capacity, refusal_reserve, file_dev, file_ino, provisioned_at)
           VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(config.executorId, config.publicKey, config.keyEpoch, config.kernelPublicKey, config.claimCapacity, config.refusalReserve, file.dev, file.ino, now);
      ledger.prepare('INSERT INTO clock (id, hwm_ms) VALUES (1, ?)').run(now);
      ledger.prepare('INSERT INTO key_epochs (epoch, public_key, statement, created_at) VALUES (?, ?, NULL, ?)').run(config.keyEpoch, config.publicKey, now);
      ledger.prepare('INSERT INTO kernel_epochs (epoch, public_key, statement, created_at) VALUES (1, ?, NULL, ?)').run(config.kernelPublicKey, now);
    }).immediate();
    const archive = provisionStore(archiveSpec(dir));
    const archiveFile = storeFileIdentity(path.join(dir, ARCHIVE_FILE));
    archive
      .prepare('INSERT INTO config (id, executor_id, public_key, key_epoch, file_dev, file_ino, created_at) VALUES (1, ?, ?, ?, ?, ?, ?)')
      .run(config.executorId, config.publicKey, config.keyEpoch, archiveFile.dev, archiveFile.ino, now);
    return { ledger, archive, config, ledgerFile: { path: path.join(dir, LEDGER_FILE), dev: file.dev, ino: file.ino } };
  } catch (error) {
    ledger.close();
    throw error;
  }
}

export function openStores(dir: string, expect: OpenExpectation): ExecutorStores {
  const ledger = openOrMissing(ledgerSpec(dir));
  let archive: Database.Database | undefined;
  try {
    checkSchemaObjects(ledger, `ledger ${path.join(dir, LEDGER_FILE)}`, LEDGER_MIGRATIONS);
    const config = readLedgerConfig(ledger, dir);
    checkExpectation(ledger, config, expect, dir);
    archive = openOrMissing(archiveSpec(dir));
    checkSchemaObjects(archive, `archive ${path.join(dir, ARCHIVE_FILE)}`, ARCHIVE_MIGRATIONS);
    checkArchiveConfig(archive, config, dir);
    const file = storeFileIdentity(path.join(dir, LEDGER_FILE));
    return { ledger, archive, config, ledgerFile: { path: path.join(dir, LEDGER_FILE), dev: file.dev, ino: file.ino } };
  } catch (error) {
    archive?.close();
    ledger.close();
    throw error;
  }
}

function openOrMissing(spec: StoreSpec): Database.Database {
  try {
    return openStore(spec);
  } catch (error) {
    if (isCustodyError(error, 'store_missing')) {
      throw new CustodyError(
        'ledger_missing',
        `${spec.label} ${path.join(spec.dir, spec.file)} does not exist; provision this executor first — a missing ledger is never recreated, since that would forget its claims`,
        { cause: error },
      );
    }
    throw error;
  }
}

interface ConfigRow {
  executor_id: string;
  public_key: string;
  key_epoch: number;
  kernel_public_key: string;
  claim_capacity: number;
  refusal_reserve: number;
  file_dev: number;
  file_ino: number;
}

function readLedgerConfig(ledger: Database.Database, dir: string): LedgerConfig {
  const file = path.join(dir, LEDGER_FILE);
  const row = ledger.prepare('SELECT * FROM config WHERE id = 1').get() as ConfigRow | undefined;
  if (!row) throw new CustodyError('store_schema', `ledger ${file} has no config row; its provisioning never completed`);
  checkFileIdentity(file, row, 'ledger');
  return {
    executorId: row.executor_id,
    publicKey: row.public_key,
    keyEpoch: row.key_epoch,
    kernelPublicKey: row.kernel_public_key,
    claimCapacity: row.claim_capacity,
    refusalReserve: row.refusal_reserve,
  };
}

function checkFileIdentity(file: string, row: { file_dev: number; file_ino: number }, label: string): void {
  const found = storeFileIdentity(file);
  if (found.dev !== row.file_dev || found.ino !== row.file_ino) {
    throw new CustodyError(
      'store_identity',
      `${label} ${file} is not the file that was provisioned (recorded device ${row.file_dev} inode ${row.file_ino}, found device ${found.dev} inode ${found.ino}): ` +
        'a copied or swapped ledger could replay or forget claims, so it is refused; restore the original file',
    );
  }
}

function checkExpectation(ledger: Database.Database, config: LedgerConfig, expect: OpenExpectation, dir: string): void {
  const file = path.join(dir, LEDGER_FILE);
  if (config.kernelPublicKey !== expect.kernelPublicKey) {
    throw new CustodyError(
      'identity_mismatch',
      `ledger ${file} was provisioned for kernel key ${config.kernelPublicKey.slice(0, 16)}…, the session names ${expect.kernelPublicKey.slice(0, 16)}…; the kernel's first key is fixed at provision and later ones come only through rotation statements`,
    );
  }
  const mismatches: string[] = [];
  if (expect.publicKey !== undefined) {
    const current = ledger.prepare('SELECT public_key FROM key_epochs ORDER BY epoch DESC LIMIT 1').get() as { public_key: string } | undefined;
    if (current?.public_key !== expect.publicKey) {
      mismatches.push(`current public key ${current?.public_key.slice(0, 16) ?? 'none'}… in the ledger, ${expect.publicKey.slice(0, 16)}… in executor.key`);
    }
  }
  const compare = (what: string, recorded: string | number, wanted: string | number | undefined) => {
    if (wanted !== undefined && wanted !== recorded) mismatches.push(`${what} ${recorded} in the ledger, ${wanted} in the settings`);
  };
  compare('executor_id', config.executorId, expect.executorId);
  compare('claim_capacity', config.claimCapacity, expect.claimCapacity);
  compare('refusal_reserve', config.refusalReserve, expect.refusalReserve);
  if (mismatches.length > 0) {
    // Capacity and reserve are fixed when the ledger is made: an operator raising them after ledger_full is told the way back and the way on.
    const back = [
      expect.claimCapacity !== undefined && expect.claimCapacity !== config.claimCapacity ? `executors[].claim_capacity back to ${config.claimCapacity}` : null,
      expect.refusalReserve !== undefined && expect.refusalReserve !== config.refusalReserve ? `executors[].settings.refusal_reserve back to ${config.refusalReserve}` : null,
    ].filter((text) => text !== null);
    const advice = back.length > 0 ? `; both are fixed when the ledger is made: set custody.json ${back.join(' and ')}, and make room with custody archive` : '';
    throw new CustodyError('ledger_identity', `ledger ${file} belongs to another identity: ${mismatches.join('; ')}${advice}`);
  }
}

function checkArchiveConfig(archive: Database.Database, config: LedgerConfig, dir: string): void {
  const file = path.join(dir, ARCHIVE_FILE);
  const row = archive.prepare('SELECT * FROM config WHERE id = 1').get() as
    | { executor_id: string; public_key: string; key_epoch: number; file_dev: number; file_ino: number }
    | undefined;
  if (!row) throw new CustodyError('store_schema', `archive ${file} has no config row; its provisioning never completed`);
  checkFileIdentity(file, row, 'archive');
  if (row.executor_id !== config.executorId || row.public_key !== config.publicKey || row.key_epoch !== config.keyEpoch) {
    throw new CustodyError(
      'ledger_identity',
      `archive ${file} belongs to ${row.executor_id} epoch ${row.key_epoch}, the ledger to ${config.executorId} epoch ${config.keyEpoch}`,
    );
  }
}
