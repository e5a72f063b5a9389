// The operator's way back after restoring an executor's ledger from a backup
// on purpose (docs/ROLLBACK.md, `custody recover-rollback NAME`). The ledger
// was refused with store_rolled_back; this gives it back every operation the
// supervisor knows was dispatched to it and is not settled, and every settled
// one whose window is still open (an `execute` replay of it must not find the
// ledger empty and run it again) — each carried by its kernel-signed
// authorization, which the executor verifies — so it
// records them as claims without a report (outcome unknown, never run again),
// raises its head to the witness and serves again. Those operations are then
// settled by reconciliation (the tool is asked what happened, or they stay
// `unknown` for the operator); none can become a silent "no effect".
import { canonicalBytes } from '../../shared/canonical/jcs.js';
import { CustodyError } from '../../shared/errors.js';
import { RECOVER_CLAIMS_PER_MESSAGE } from '../../shared/protocol/executor-messages.js';
import type { ChildHandle } from '../children/child-handle.js';
import { byCreation, type RequestRow, type SupervisorStore } from '../store/supervisor-store.js';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { nowMs } from '../../shared/clock.js';
import { type Invocation, authorizationBody } from '../../shared/protocol/artifacts.js';
import { expectedOf } from './kernel-steps.js';
import { FINAL_PHASES } from './phases.js';

function windowClosesAt(authorization: string): number {
  return authorizationBody.parse(readEnvelope(authorization).envelope.body).expires_at;
}

export interface RollbackRecoveryResult {
  readonly executor: string;
  readonly witnessed: number;
  readonly head: number;
  /** Operations recorded again as claims with an unknown outcome. */
  readonly recorded: readonly string[];
  /** Operations the restored ledger still held. */
  readonly already: number;
}

interface Entry {
  readonly authorization: string;
  readonly expected: Invocation;
}

export async function recoverRollback(store: SupervisorStore, executor: ChildHandle, maxFrameBytes: number): Promise<RollbackRecoveryResult> {
  const pin = store.getPin(executor.name);
  if (!pin) throw new CustodyError('not_found', `no executor named ${executor.name} is pinned`);
  const now = nowMs();
  const kept: RequestRow[] = [];
  for await (const rows of store.requestsDispatchedTo(pin.identity_id)) {
    for (const row of rows) if (!FINAL_PHASES.has(row.phase) || windowClosesAt(row.authorization!) > now) kept.push(row);
  }
  const entries: Entry[] = byCreation(kept).map((row) => ({ authorization: row.authorization!, expected: expectedOf(row) }));
  const recorded: string[] = [];
  let already = 0;
  let head = 0;
  let witnessed = 0;
  await executor.recoverRollback(async (session, witness) => {
    witnessed = witness;
    const chunks = chunk(entries, Math.floor(maxFrameBytes / 2));
    for (const [index, claims] of chunks.entries()) {
      const last = index === chunks.length - 1;
      const answer = await session.channel.request('ledger.recover', { claims, raise_head_to: last ? witness : 0 }, { timeoutMs: 60_000 });
      recorded.push(...answer.recorded);
      already += answer.already;
      head = answer.head;
    }
    return head;
  });
  store.recordIncident({
    child: executor.name,
    kind: 'rollback_recovered',
    code: 'store_rolled_back',
    message:
      `custody recover-rollback ${executor.name}: ${recorded.length} witnessed operation(s) recorded again as claims with an unknown outcome ` +
      `(${recorded.join(', ') || 'none'}), ${already} still held by the restored ledger; head raised to ${head} (witness ${witnessed}). ` +
      'Reconcile them (custody reconcile NAME); any the tool cannot account for stay unknown for you to settle.',
  });
  return { executor: executor.name, witnessed, head, recorded, already };
}

/** At most RECOVER_CLAIMS_PER_MESSAGE entries and about `bytes` per message; always at least one message (it raises the head). */
function chunk(entries: readonly Entry[], bytes: number): Entry[][] {
  const chunks: Entry[][] = [[]];
  let size = 0;
  for (const entry of entries) {
    const entryBytes = canonicalBytes(entry).length + 16;
    const current = chunks[chunks.length - 1]!;
    if (current.length > 0 && (current.length >= RECOVER_CLAIMS_PER_MESSAGE || size + entryBytes > bytes)) {
      chunks.push([entry]);
      size = entryBytes;
    } else {
      current.push(entry);
      size += entryBytes;
    }
  }
  return chunks;
}
