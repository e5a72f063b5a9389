// The steps that ask an executor: execute, under the watchdog
// (supervisor/watchdog/), and reconcile_operation, which never re-runs an
// effect and is asked again until it yields a signed report.
import { setTimeout as sleep } from 'node:timers/promises';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { CHILD_EXIT } from '../../shared/exit-codes.js';
import { crashPoint } from '../../shared/fault.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import { authorizationBody } from '../../shared/protocol/artifacts.js';
import { nowMs } from '../../shared/clock.js';
import { runningNow, withTimeout } from '../../shared/timeout.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import type { ChildHandle } from '../children/child-handle.js';
import type { RequestRow } from '../store/supervisor-store.js';
import { deadlineFor, ownDeadlinePassed, reconcileDeadlineFor } from '../watchdog/deadlines.js';
import { expireExecute } from '../watchdog/expire.js';
import { type ReconcileTarget, reconcileExchange } from '../watchdog/reconcile-exchange.js';
import { type OperationContext, askKernel, isTransportFailure, retryBackoff } from './context.js';
import { executorIdOf, expectedOf } from './kernel-steps.js';

/** Answers that prove the executor did not act on the request: nothing about it is in doubt. */
const NOT_ACTED_UPON: ReadonlySet<string> = new Set(['too_many_in_flight', 'shutting_down', 'window_not_open']);

function usableExecutor(ctx: OperationContext, row: RequestRow): ChildHandle {
  if (!row.executor) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} has no executor`);
  const executor = ctx.executorById(row.executor);
  // A failed executor answers nothing until it is restarted (custody restart CHILD, or
  // after restart.failed_cooldown_s); asking again would only add incidents.
  if (executor.state === 'failed') {
    const failure = executor.failure ?? new CustodyError('child_failed', `${executor.name} is failed`);
    throw new CustodyError(failure.code, `${failure.message}; restart it with custody restart ${executor.name}, then ask again with the same name`, { cause: failure });
  }
  return executor;
}

export interface ExecuteOptions {
  readonly dropReply: boolean;
}

/**
 * Send execute with the tool's deadline armed before dispatch. The request
 * is `executing` only from the moment its frame is written: waiting for a
 * session or for room on the executor is not in doubt, and is retried. On
 * expiry the watchdog (supervisor/watchdog/expire.ts) tries a cooperative
 * cancel (short grace), then kills the executor's process group and waits
 * for it to be gone; the request
 * moves to `reconciling`, where a fresh session is asked. Any other failure
 * to learn the outcome also moves it there.
 */
export async function executeStep(ctx: OperationContext, row: RequestRow, options: ExecuteOptions): Promise<RequestRow> {
  const { authorization } = row;
  if (!authorization) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} has no authorization`);
  const executor = usableExecutor(ctx, row);
  const deadline = deadlineFor(ctx, executor, row.tool);
  const backoff = retryBackoff(ctx);
  let keysGiven = false;
  let skewSaid = false;
  for (;;) {
    const release = await executor.slots.acquire(ctx.signal);
    let frameId = '';
    let sentAt = 0;
    let session: ChildSession | null = null;
    try {
      session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
      row = await ctx.store.startAttemptGrouped(row.request_id);
      frameId = `exec-${row.operation_id.slice(0, 16)}-${row.attempts}`;
      sentAt = runningNow();
      const result = await executor.send(
        session,
        'execute',
        { authorization, expected: expectedOf(row), arguments: JSON.parse(row.arguments) as JsonObject, drop_reply: options.dropReply },
        { id: frameId, timeoutMs: deadline, requestId: row.request_id },
      );
      // In memory until the settlement is written: the executor replays this report byte for byte (ARCHITECTURE.md §6.6).
      return ctx.store.movePhaseLater(row.request_id, 'reported', { report: result.report });
    } catch (error) {
      const failure = toCustodyError(error);
      // Parked while waiting (it crashed a child before): it stays where it is.
      if (failure.code === 'request_quarantined') throw failure;
      // Not sent because supervisor.db is full: the caller is told; asking again (or the sweep) resumes it.
      if (!frameId && failure.code === 'storage_full') throw failure;
      // Refused before any claim: the kernel rotated and its statement has not reached this executor. Once given, ask again.
      if (failure.code === 'kernel_key_unpinned' && !keysGiven && (await giveKernelKeys(ctx, executor, row.request_id))) {
        keysGiven = true;
        continue;
      }
      if (!frameId || NOT_ACTED_UPON.has(failure.code)) {
        // Not sent, or refused before the executor did anything: ask again.
        if (executor.state === 'failed' || ctx.signal.aborted) throw failure;
        if (nowMs() >= windowOf(authorization).expires_at) return await ctx.store.movePhaseGrouped(row.request_id, 'reconciling', { reason: 'window passed before execute' });
        ctx.log.info('execute_not_sent', { request_id: row.request_id, code: failure.code });
        if (failure.code === 'window_not_open' && !skewSaid) skewSaid = sayClockSkew(ctx, executor, row, authorization, failure);
        await (failure.code === 'window_not_open' ? untilWindowOpens(authorization) : backoff.wait());
        continue;
      }
      // Only this channel's own timeout, after the whole deadline, is the watchdog's: a deadline_exceeded in the answer is the peer's.
      const ownDeadline = ownDeadlinePassed(failure, sentAt, deadline);
      return await afterExecuteFailure(ctx, executor, row, { failure, frameId, deadline, ownDeadline, dropReply: options.dropReply, session });
    } finally {
      release();
    }
  }
}

interface FailureContext {
  readonly failure: CustodyError;
  readonly frameId: string;
  readonly deadline: number;
  /** This supervisor's deadline passed (not an error the executor answered with). */
  readonly ownDeadline: boolean;
  readonly dropReply: boolean;
  /** The session the execute was sent on. */
  readonly session: ChildSession | null;
}

async function afterExecuteFailure(ctx: OperationContext, executor: ChildHandle, row: RequestRow, f: FailureContext): Promise<RequestRow> {
  // Our deadline passed, or the executor's own did first and the adapter is still running:
  // either way something may still be acting, and the watchdog stops it. An executor's
  // argument_check_timeout is a refusal before any claim: nothing acts, nothing is killed,
  // and reconciliation closes the operation as never claimed.
  if (f.ownDeadline || f.failure.code === 'adapter_still_running') {
    await expireExecute(ctx, executor, row, f.frameId, f.deadline);
  } else if (f.dropReply && isTransportFailure(f.failure)) {
    const exit = f.session ? await withTimeout(f.session.exited, 5_000, () => null) : null;
    if (exit?.code === CHILD_EXIT.dropReply) {
      ctx.store.recordIncident({ child: executor.name, kind: 'reply_dropped', code: 'reply_dropped', message: `lost-reply drill: the executor exited ${CHILD_EXIT.dropReply} after retaining its report`, operation_id: row.operation_id });
      throw new CustodyError('reply_dropped', `${executor.name} retained the report of ${row.request_id} and exited ${CHILD_EXIT.dropReply} without replying (drill)`);
    }
  }
  // The executor's words too: an outside_window refusal says when a clock set back behind its mark closed the window.
  ctx.log.info('execute_unanswered', { request_id: row.request_id, code: f.failure.code, message: f.failure.message });
  return ctx.store.movePhaseGrouped(row.request_id, 'reconciling', { reason: f.failure.code });
}

function windowOf(authorization: string): { not_before: number; expires_at: number } {
  return authorizationBody.parse(readEnvelope(authorization).envelope.body);
}

/** How far apart two processes' clocks may be before a window not yet open is said to an operator. */
export const CLOCK_SKEW_SAID_MS = 2_000;

/**
 * The executor says the window has not opened: the kernel's clock that
 * signed it runs ahead of the executor's. Said once per request (a warning
 * and an incident, with how far ahead by this supervisor's clock): the
 * execute waits for the window, which may be long after its caller gave up,
 * and was logged only as info every 5 s without a word of why. Returns
 * whether it was said.
 */
function sayClockSkew(ctx: OperationContext, executor: ChildHandle, row: RequestRow, authorization: string, failure: CustodyError): boolean {
  const { not_before } = windowOf(authorization);
  const ahead = not_before - nowMs();
  if (ahead < CLOCK_SKEW_SAID_MS && ahead > -CLOCK_SKEW_SAID_MS) return false;
  const message =
    ahead > 0
      ? `the kernel signed ${row.request_id}'s window to open at ${new Date(not_before).toISOString()}, ${Math.round(ahead / 1000)} s ahead of this supervisor's clock: the kernel's clock runs ahead. The execute waits for the window; set the clocks right (NTP)`
      : `${executor.name} says ${row.request_id}'s window, open since ${new Date(not_before).toISOString()} by this supervisor's clock, has not opened: its clock runs ${Math.round(-ahead / 1000)} s or more behind the kernel's. The execute waits for the window; set the clocks right (NTP)`;
  ctx.log.warn('clock_skew', { request_id: row.request_id, executor: executor.name, not_before, ahead_ms: ahead, message, executor_says: failure.message });
  ctx.store.recordIncident({ child: executor.name, kind: 'clock_skew', code: failure.code, message, operation_id: row.operation_id });
  return true;
}

/** Wait until the authorization's window opens (bounded: a skewed clock is re-checked every 5 s). */
function untilWindowOpens(authorization: string): Promise<void> {
  return sleep(Math.min(Math.max(windowOf(authorization).not_before - nowMs(), 50), 5_000));
}

/**
 * Reconcile a request this supervisor carries: ask until a signed report
 * comes back (reconcileOperation), then record it for the kernel.
 */
export async function reconcileStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  const { authorization } = row;
  if (!authorization) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} has no authorization to reconcile`);
  const executor = usableExecutor(ctx, row);
  const report = await reconcileOperation(ctx, executor, { requestId: row.request_id, operationId: row.operation_id, tool: row.tool, authorization, expected: expectedOf(row) });
  return ctx.store.movePhaseGrouped(row.request_id, 'reported', { report });
}

/**
 * The one reconcile_operation step, for the driver and the recovery sweep
 * alike: ask the executor what became of the operation, one exchange at a
 * time (the watchdog's reconcileExchange: a slot, a live session, the tool's
 * reconcile deadline, a hung exchange killed so the next attempt gets a
 * fresh session). An answer that proves nothing marks the operation unknown at the
 * kernel (listed for the operator) and is asked again with backoff until a
 * signed report comes back: asking never re-runs an effect (race H4 (ARCHITECTURE.md §6.5):
 * giving up after one exchange leaves holds stuck). Throws only when the
 * executor is failed or the service stops.
 */
export async function reconcileOperation(ctx: OperationContext, executor: ChildHandle, target: ReconcileTarget): Promise<string> {
  const backoff = retryBackoff(ctx);
  const exchangeMs = reconcileDeadlineFor(ctx, executor, target.tool);
  let markedUnknown = false;
  let keysGiven = false;
  for (;;) {
    const answer = await reconcileExchange(ctx, executor, target, exchangeMs);
    if ('report' in answer) return answer.report;
    const { failure } = answer;
    if (failure.code === 'request_quarantined') throw failure;
    if (failure.code === 'kernel_key_unpinned' && !keysGiven && (await giveKernelKeys(ctx, executor, target.requestId))) {
      keysGiven = true;
      continue;
    }
    ctx.log.warn('reconcile_unanswered', { request_id: target.requestId, code: failure.code, attempt: backoff.attempts + 1 });
    if (executor.state === 'failed' || ctx.signal.aborted) throw failure;
    // A hung exchange killed the executor: the next attempt gets a fresh session.
    if (!answer.hung && !markedUnknown && provesNothing(failure)) {
      if (failure.code !== 'indeterminate') {
        ctx.store.recordIncident({ child: executor.name, kind: 'reconcile_refused', code: failure.code, message: failure.message, operation_id: target.operationId });
      }
      markedUnknown = await markUnknown(ctx, target, failure);
    }
    await backoff.wait();
  }
}

/**
 * Give the executor the kernel's rotation statements (kernel_key_unpinned);
 * true once it has them. Asked once per step: a second refusal is an
 * authorization no pinned kernel key signed, and goes the way of any other.
 */
async function giveKernelKeys(ctx: OperationContext, executor: ChildHandle, requestId: string): Promise<boolean> {
  if (!ctx.giveKernelKeys) return false;
  try {
    await ctx.giveKernelKeys(executor);
    return true;
  } catch (error) {
    ctx.log.warn('kernel_keys_not_given', { request_id: requestId, executor: executor.name, code: toCustodyError(error).code });
    return false;
  }
}

/**
 * An answer from the executor that proves nothing about the outcome (not a
 * lost channel, not the reconcile bound, not its ledger locked from a sqlite3
 * shell for a moment: those are only asked again).
 */
function provesNothing(failure: CustodyError): boolean {
  return !isTransportFailure(failure) && failure.code !== 'reconcile_budget_exhausted' && failure.code !== 'store_busy';
}

/** Tell the kernel the outcome is unknown (its hold stays); true once the kernel has it. */
async function markUnknown(ctx: OperationContext, target: ReconcileTarget, cause: CustodyError): Promise<boolean> {
  try {
    await askKernel(ctx, 'mark_unknown', { operation_id: target.operationId, reason: `${cause.code}: ${cause.message}`.slice(0, 512) }, target.requestId);
    crashPoint('supervisor', 'after_mark_unknown_sent');
  } catch (error) {
    ctx.log.warn('mark_unknown_failed', { request_id: target.requestId, code: toCustodyError(error).code });
    return false;
  }
  ctx.store.recordIncident({ child: executorIdOf(target.authorization), kind: 'outcome_unknown', code: cause.code, message: `operator attention: ${cause.message}`, operation_id: target.operationId });
  return true;
}
