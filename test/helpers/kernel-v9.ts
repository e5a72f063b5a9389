// kernel.db as version 9 wrote it (an operation's holds, nonce, receipts and
// report keyed by its id, not its rowid): an upgrade test turns a real run's
// store into it and lets this build migrate it (kernel-proc/store/schema.ts,
// migration 10).
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { replaceWithOlderStore } from './older-store.js';

const V9 = KERNEL_MIGRATIONS.slice(0, 9);

/**
 * Rewrite `dir`/kernel.db as the version-9 store holding the same rows. The
 * operations are written in the order of their ids, not the order they came
 * in, so that their rowids in the older store are not the ones the current
 * store gave them: a migration that paired rows by position would show.
 */
export function downgradeToV9(dir: string, scratch: string): void {
  replaceWithOlderStore(dir, 'kernel.db', scratch, {
    migrations: V9,
    rows: [
      ['kernel_identity', 'SELECT * FROM src.kernel_identity'],
      ['state_transitions', 'SELECT * FROM src.state_transitions'],
      ['grants', 'SELECT * FROM src.grants'],
      ['executor_pins', 'SELECT * FROM src.executor_pins'],
      ['operations', 'SELECT * FROM src.operations ORDER BY operation_id'],
      ['holds', 'SELECT * FROM src.holds ORDER BY operation_rowid'],
      ['nonces', 'SELECT * FROM src.nonces ORDER BY operation_rowid'],
      ['receipts', 'SELECT * FROM src.receipts ORDER BY operation_rowid, seq'],
      ['reports', 'SELECT operation_id, report FROM src.reports ORDER BY operation_rowid'],
      ['head', 'SELECT * FROM src.head'],
      ['kernel_epochs', 'SELECT * FROM src.kernel_epochs'],
    ],
  });
}
