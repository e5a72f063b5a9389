// One reconcile_operation exchange (ARCHITECTURE.md §7 "the watchdog"): in a
// slot of the executor, on a live session (the fresh one after a kill),
// bounded by the tool's reconcile deadline. A hung exchange (this
// supervisor's own deadline passed) kills and reaps the executor, so the next
// exchange gets a fresh session. Asking never re-runs an effect; whoever
// calls this asks again until a signed report comes back (ARCHITECTURE.md
// §6.5, H4: supervisor/operations/executor-steps.ts reconcileOperation).
import { type CustodyError, toCustodyError } from '../../shared/errors.js';
import type { Invocation } from '../../shared/protocol/artifacts.js';
import type { ChildHandle } from '../children/child-handle.js';
import type { OperationContext } from '../operations/context.js';
import { ownDeadlinePassed } from './deadlines.js';
import { runningNow } from '../../shared/timeout.js';

/** What a reconcile asks about: one authorized operation, whether or not a request of this supervisor carries it. */
export interface ReconcileTarget {
  /** The client's request id (the operation name), for logs and incidents. */
  readonly requestId: string;
  readonly operationId: string;
  readonly tool: string;
  readonly authorization: string;
  readonly expected: Invocation;
}

/** A signed report, or why none came back (`hung`: the exchange outlived its bound and the executor was killed). */
export type ExchangeAnswer = { readonly report: string } | { readonly failure: CustodyError; readonly hung: boolean };

/** One exchange bounded by `exchangeMs`; rejects only when no slot can be had (the service stops). */
export async function reconcileExchange(ctx: OperationContext, executor: ChildHandle, target: ReconcileTarget, exchangeMs: number): Promise<ExchangeAnswer> {
  const release = await executor.slots.acquire(ctx.signal);
  let sentAt: number | null = null;
  try {
    const session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
    sentAt = runningNow();
    const result = await executor.send(session, 'reconcile_operation', { authorization: target.authorization, expected: target.expected }, { timeoutMs: exchangeMs, requestId: target.requestId });
    ctx.store.recordIncident({ child: executor.name, kind: 'reconciled', code: null, message: `reconcile_operation: ${result.status}${result.replayed ? ' (retained report)' : ''}`, operation_id: target.operationId });
    return { report: result.report };
  } catch (error) {
    const failure = toCustodyError(error);
    const hung = ownDeadlinePassed(failure, sentAt, exchangeMs);
    // A failed executor has no process to kill; a stopping service kills its own.
    if (hung && executor.state !== 'failed' && !ctx.signal.aborted) await killHung(ctx, executor, target, exchangeMs);
    return { failure, hung };
  } finally {
    release();
  }
}

async function killHung(ctx: OperationContext, executor: ChildHandle, target: ReconcileTarget, exchangeMs: number): Promise<void> {
  const why = `reconcile_operation for ${target.requestId} unanswered within ${exchangeMs} ms`;
  ctx.store.recordIncident({ child: executor.name, kind: 'reconcile_kill', code: 'deadline_exceeded', message: `${why}; killing ${executor.name}`, operation_id: target.operationId });
  await executor.killAndReap(why, { deliberate: true });
}
