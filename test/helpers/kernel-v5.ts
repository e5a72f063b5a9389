// kernel.db as version 5 wrote it (before the report moved out of the
// operations row and the receipt columns were read from the receipt's
// bytes): an upgrade test turns a real run's store into it and lets this
// build migrate it (kernel-proc/store/schema.ts, migration 6).
import { createHash } from 'node:crypto';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { replaceWithOlderStore } from './older-store.js';

const V5 = KERNEL_MIGRATIONS.slice(0, 5);
/** The digest version 5 stored beside each receipt. */
export const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

/** What version 5 kept in operations.output: the completed report's output as JSON text (decisions/settle.ts before version 6). */
function v5Output(state: string, report: string | null): string | null {
  if (state !== 'completed' || report === null) return null;
  const output = (JSON.parse(report) as { body: { output: unknown } }).body.output;
  return output === null ? null : JSON.stringify(output);
}

/** Rewrite `dir`/kernel.db as the version-5 store holding the same operations, receipts and reports. */
export function downgradeToV5(dir: string, scratch: string): void {
  replaceWithOlderStore(dir, 'kernel.db', scratch, {
    migrations: V5,
    functions: { sha256: (text: string) => sha256(text), v5_output: (state: string, report: string | null) => v5Output(state, report) },
    rows: [
      ['kernel_identity', 'SELECT * FROM src.kernel_identity'],
      ['state_transitions', 'SELECT * FROM src.state_transitions'],
      ['grants', 'SELECT * FROM src.grants'],
      ['executor_pins', 'SELECT * FROM src.executor_pins'],
      ['operations', 'SELECT o.*, r.report, v5_output(o.state, r.report) AS output FROM src.operations o LEFT JOIN src.reports r ON r.operation_id = o.operation_id ORDER BY o.rowid'],
      ['holds', 'SELECT * FROM src.holds ORDER BY rowid'],
      ['nonces', 'SELECT * FROM src.nonces ORDER BY rowid'],
      ['receipts', 'SELECT *, sha256(receipt) AS digest FROM src.receipts ORDER BY rowid'],
      ['head', 'SELECT * FROM src.head'],
      ['kernel_epochs', 'SELECT * FROM src.kernel_epochs'],
    ],
  });
}

