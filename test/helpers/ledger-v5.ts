// ledger.db as version 5 wrote it (a report keyed by its operation id and
// numbered on its own): an upgrade test turns a real ledger into it and lets
// this build migrate it (executor-proc/ledger/schema.ts, migration 6).
import fs from 'node:fs';
import path from 'node:path';
import { LEDGER_MIGRATIONS } from '../../executor-proc/ledger/schema.js';
import { LEDGER_FILE } from '../../executor-proc/ledger/stores.js';
import { replaceWithOlderStore } from './older-store.js';

/**
 * Rewrite `dir`/ledger.db as the version-5 store holding the same rows. The
 * reports are numbered in the order of their operation ids, not their
 * claims', so that a migration pairing a report with a claim by number
 * would show.
 */
export function downgradeLedgerToV5(dir: string, scratch: string): void {
  const file = path.join(dir, LEDGER_FILE);
  replaceWithOlderStore(dir, LEDGER_FILE, scratch, {
    migrations: LEDGER_MIGRATIONS.slice(0, 5),
    // The config row names the file it belongs to: the rebuilt one.
    functions: { file_dev: () => fs.statSync(file).dev, file_ino: () => fs.statSync(file).ino },
    rows: [
      ['config', 'SELECT *, file_dev() AS file_dev, file_ino() AS file_ino FROM (SELECT id, executor_id, public_key, key_epoch, kernel_public_key, claim_capacity, refusal_reserve, provisioned_at FROM src.config)'],
      ['clock', 'SELECT * FROM src.clock'],
      ['claims', 'SELECT * FROM src.claims ORDER BY seq'],
      ['reports', 'SELECT row_number() OVER (ORDER BY operation_id) AS seq, * FROM src.reports ORDER BY operation_id'],
      ['head', 'SELECT * FROM src.head'],
      ['claims_count', 'SELECT * FROM src.claims_count'],
      ['key_epochs', 'SELECT * FROM src.key_epochs'],
      ['kernel_epochs', 'SELECT * FROM src.kernel_epochs'],
    ],
  });
}
