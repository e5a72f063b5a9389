// The store-rollback witness at the moment a child comes up and while it
// serves (docs/ROLLBACK.md): a hello below the witnessed head is refused, the
// operator's way back may raise it first, and each announced head is recorded.
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { type Logger, errorFields } from '../../shared/log.js';
import type { ChildRole } from '../../shared/protocol/common.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import { killAndReap } from '../watchdog/reap.js';
import { type HeadWitnessStore, rolledBack } from './witness.js';

/** What the way back does on the refused process before its head is checked again (docs/ROLLBACK.md). */
export type RollbackRecovery = (session: ChildSession, witnessed: number) => Promise<number>;

/** The child whose head is checked, as named in a refusal. */
export interface HeadOwner {
  readonly name: string;
  readonly role: ChildRole;
  /** The child's local state directory; null for a remote child. */
  readonly storeDir: string | null;
}

/**
 * The hello's head against the witness: below it, the process is killed and
 * reaped before anything is asked of it, and the start fails with
 * store_rolled_back; at or above it (or raised there by `recovery`), it
 * becomes the witness.
 */
export async function checkHead(owner: HeadOwner, witness: HeadWitnessStore, session: ChildSession, recovery: RollbackRecovery | null, log: Logger): Promise<void> {
  const witnessed = witness.head(owner.name);
  if (session.hello.head >= witnessed) {
    witness.recordNow(owner.name, session.hello.head);
    return;
  }
  const recoveryFailed = recovery ? await tryRecovery(owner, witness, session, recovery, witnessed) : '';
  if (recoveryFailed === null) return;
  await killAndReap(session, log);
  const store = owner.storeDir ? `${owner.storeDir}/${owner.role === 'kernel' ? 'kernel.db' : 'ledger.db'}` : `(remote ${owner.role} ${owner.name})`;
  const refusal = rolledBack(owner.name, owner.role, store, session.hello.head, witnessed);
  throw recoveryFailed ? new CustodyError('store_rolled_back', refusal.message + recoveryFailed) : refusal;
}

/** Null once `recovery` raised the head to the witness (recorded); else what it left, for the refusal. */
async function tryRecovery(owner: HeadOwner, witness: HeadWitnessStore, session: ChildSession, recovery: RollbackRecovery, witnessed: number): Promise<string | null> {
  try {
    const raised = await recovery(session, witnessed);
    if (raised < witnessed) return `; recover-rollback left its head at ${raised}`;
    witness.recordNow(owner.name, raised);
    return null;
  } catch (error) {
    return `; recover-rollback failed: ${toCustodyError(error).message}`;
  }
}

/** The way back is only for a child failed because its store was refused as rolled back. */
export function assertRecoverable(name: string, state: string, failure: CustodyError | null): void {
  if (state === 'failed' && failure?.code === 'store_rolled_back') return;
  throw new CustodyError('bad_request', `${name} is ${state}${failure ? ` (${failure.code})` : ''}, not refused for a rolled-back store; there is nothing to recover`);
}

/**
 * A head frame, group-committed: the kernel's goes with the request write
 * that follows its decision, before the supervisor acts on it; an executor
 * waits for head.witnessed, sent once it is durable.
 */
export function recordHead(witness: HeadWitnessStore, name: string, head: number, log: Logger, lingerMs = 0): Promise<void> {
  const durable = witness.record(name, head, lingerMs);
  durable.catch((error: unknown) => log.error('witness_not_recorded', { head, ...errorFields(error) }));
  return durable;
}
