// Key rotation at the executor (docs/PROTOCOL.md §12):
//   key.rotate      — the next key is made here and never leaves this
//                     process; the current key signs the statement that names
//                     it; the ledger commits the new epoch with the statement
//                     (key_epochs), and only then is the pair promoted over
//                     executor.key, overwriting the retired private key
//                     (state.ts finishes a promotion a crash cut). From then
//                     on every report is signed under the new epoch, and an
//                     authorization addressed to an older epoch that was
//                     never claimed is refused with a signed epoch_retired
//                     report (execute.ts).
//   key.statements  — the statements past an epoch, so a pin that missed a
//                     rotation (a crash between here and the kernel) catches up;
//   kernel.rotated  — the kernel key is re-pinned only through statements
//                     that verify, in order, from the kernel key pinned now.
import { signRotation, verifyChain } from '../../shared/artifacts/rotation.js';
import { createPendingKeyPair, discardPendingKey, promotePendingKey } from '../../shared/crypto/key-files.js';
import { CustodyError } from '../../shared/errors.js';
import { crashPoint } from '../../shared/fault.js';
import { nowMs } from '../../shared/clock.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { ROTATION_STATEMENTS_MAX } from '../../shared/protocol/rotation-messages.js';
import { keepStatementsIfPossible } from '../key-statements.js';
import { KEY_BASENAME } from '../state.js';
import type { ExecutorContext } from '../context.js';

export function rotateKey(context: ExecutorContext): ResultOf<'key.rotate'> {
  if (!context.isOpen()) throw new CustodyError('shutting_down', 'the executor is closing; rotate it once it serves again');
  const { ledger } = context;
  const current = ledger.epochs.current('key_epochs');
  if (current.public_key !== context.signer.publicKeyHex) {
    throw new CustodyError('internal', `executor signs with ${context.signer.publicKeyHex.slice(0, 16)}…, its ledger records ${current.public_key.slice(0, 16)}… at epoch ${current.epoch}`);
  }
  // Everything from here to the promotion is synchronous: no claim or report interleaves with it.
  const next = createPendingKeyPair(context.dir, KEY_BASENAME);
  const statement = signRotation(context.signer, { role: 'executor', id: ledger.config.executorId, epoch: current.epoch }, next.publicKeyHex, nowMs());
  try {
    ledger.recordEpoch('key_epochs', current.epoch + 1, next.publicKeyHex, statement.text);
  } catch (error) {
    discardPendingKey(context.dir, KEY_BASENAME);
    throw error;
  }
  crashPoint('executor', 'after_key_rotation_commit');
  // Beside the key, outside the ledger: a ledger restored from before this rotation catches up from it (key-statements.ts).
  // Never fatal here: the epoch is committed, and the signer must follow it.
  keepStatementsIfPossible(context.dir, ledger.db, (event, fields) => context.log.warn(event, fields));
  promotePendingKey(context.dir, KEY_BASENAME);
  context.signer = next;
  context.log.info('key_rotated', { executor_id: ledger.config.executorId, key_epoch: current.epoch + 1, retired_epoch: current.epoch, public_key: next.publicKeyHex });
  return { key_epoch: current.epoch + 1, public_key: next.publicKeyHex, statement: statement.text };
}

export function keyStatements(context: ExecutorContext, body: RequestOf<'key.statements'>): ResultOf<'key.statements'> {
  const rows = context.ledger.epochs.all('key_epochs');
  const current = rows.at(-1)!;
  const statements = rows.filter((row) => row.epoch > body.after_epoch && row.statement !== null).slice(0, ROTATION_STATEMENTS_MAX).map((row) => row.statement!);
  return { key_epoch: current.epoch, public_key: current.public_key, statements };
}

export function kernelRotated(context: ExecutorContext, body: RequestOf<'kernel.rotated'>): ResultOf<'kernel.rotated'> {
  const { ledger } = context;
  const pinned = ledger.epochs.current('kernel_epochs');
  const { end, applied } = verifyChain({ role: 'kernel', id: 'kernel', epoch: pinned.epoch, publicKey: pinned.public_key }, body.statements);
  for (const statement of applied) {
    ledger.recordEpoch('kernel_epochs', statement.body.new_epoch, statement.body.new_public_key, statement.text);
    context.log.info('kernel_key_repinned', { kernel_epoch: statement.body.new_epoch, retired_epoch: statement.body.old_epoch, public_key: statement.body.new_public_key });
  }
  return { kernel_epoch: end.epoch, kernel_public_key: end.publicKey };
}
