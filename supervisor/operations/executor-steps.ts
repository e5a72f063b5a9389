// The steps that ask an executor: execute, under the watchdog, and
// reconcile_operation, which never re-runs an effect and is asked again
// until it yields a signed report.
import { setTimeout as sleep } from 'node:timers/promises';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { CHILD_EXIT } from '../../shared/exit-codes.js';
import { crashPoint } from '../../shared/fault.js';
import { type JsonObject, toolPatternCovers } from '../../shared/protocol/common.js';
import { type Invocation } from '../../shared/protocol/artifacts.js';
import { authorizationBody } from '../../shared/protocol/artifacts.js';
import { nowMs } from '../../shared/clock.js';
import { withTimeout } from '../../shared/timeout.js';
import { type ChildSession } from '../../shared/child/spawn.js';
import { type ChildHandle } from '../children/child-handle.js';
import { ADAPTER_DEADLINE_MARGIN_MS } from '../children/specs.js';
import { type RequestRow } from '../store/supervisor-store.js';
import { type OperationContext, askKernel, isTransportFailure, retryBackoff } from './context.js';
import { executorIdOf, expectedOf } from './kernel-steps.js';

/** Answers that prove the executor did not act on the request: nothing about it is in doubt. */
const NOT_ACTED_UPON: ReadonlySet<string> = new Set(['too_many_in_flight', 'shutting_down', 'window_not_open']);

/** The watchdog deadline of a tool on an executor: its own entry, else `*`, else 30 s. */
export function deadlineFor(ctx: OperationContext, executor: ChildHandle, tool: string): number {
  const config = ctx.config.executors.find((e) => e.name === executor.name);
  const deadlines = config?.deadlines_ms ?? {};
  const specific = Object.entries(deadlines).find(([pattern]) => pattern !== '*' && toolPatternCovers(pattern, tool));
  return specific?.[1] ?? deadlines['*'] ?? 30_000;
}

/** One reconcile exchange may take as long as the executor gives the tool's reconcile, plus a margin. */
function reconcileDeadlineFor(ctx: OperationContext, executor: ChildHandle, tool: string): number {
  return Math.max(ctx.config.timing.reconcile_exchange_ms, deadlineFor(ctx, executor, tool) + ADAPTER_DEADLINE_MARGIN_MS + 5_000);
}

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
 * expiry the watchdog tries a cooperative cancel (short grace), then kills
 * the executor's process group and waits for it to be gone; the request
 * moves to `reconciling`, where a fresh session is asked. Any other failure
 * to learn the outcome also moves it there.
 */
export async function executeStep(ctx: OperationContext, row: RequestRow, options: ExecuteOptions): Promise<RequestRow> {
  const { authorization } = row;
  if (!authorization) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} has no authorization`);
  const executor = usableExecutor(ctx, row);
  const deadline = deadlineFor(ctx, executor, row.tool);
  const backoff = retryBackoff(ctx);
  for (;;) {
    const release = await executor.slots.acquire(ctx.signal);
    let frameId = '';
    let sentAt = 0;
    let session: ChildSession | null = null;
    try {
      session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
      row = await ctx.store.startAttemptGrouped(row.request_id);
      frameId = `exec-${row.operation_id.slice(0, 16)}-${row.attempts}`;
      sentAt = performance.now();
      const result = await executor.send(
        session,
        'execute',
        { authorization, expected: expectedOf(row), arguments: JSON.parse(row.arguments) as JsonObject, drop_reply: options.dropReply },
        { id: frameId, timeoutMs: deadline, requestId: row.request_id },
      );
      return await ctx.store.movePhaseGrouped(row.request_id, 'reported', { report: result.report });
    } catch (error) {
      const failure = toCustodyError(error);
      // Parked while waiting (it crashed a child before): it stays where it is.
      if (failure.code === 'request_quarantined') throw failure;
      // Not sent because supervisor.db is full: the caller is told; asking again (or the sweep) resumes it.
      if (!frameId && failure.code === 'storage_full') throw failure;
      if (!frameId || NOT_ACTED_UPON.has(failure.code)) {
        // Not sent, or refused before the executor did anything: ask again.
        if (executor.state === 'failed' || ctx.signal.aborted) throw failure;
        if (nowMs() >= windowOf(authorization).expires_at) return await ctx.store.movePhaseGrouped(row.request_id, 'reconciling', { reason: 'window passed before execute' });
        ctx.log.info('execute_not_sent', { request_id: row.request_id, code: failure.code });
        await (failure.code === 'window_not_open' ? untilWindowOpens(authorization) : backoff.wait());
        continue;
      }
      // Only this channel's own timeout, after the whole deadline, is the watchdog's: a deadline_exceeded in the answer is the peer's.
      const ownDeadline = failure.code === 'deadline_exceeded' && performance.now() - sentAt >= deadline;
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
    await fireWatchdog(ctx, executor, row, f.frameId, f.deadline);
  } else if (f.dropReply && isTransportFailure(f.failure)) {
    const exit = f.session ? await withTimeout(f.session.exited, 5_000, () => null) : null;
    if (exit?.code === CHILD_EXIT.dropReply) {
      ctx.store.recordIncident({ child: executor.name, kind: 'reply_dropped', code: 'reply_dropped', message: `lost-reply drill: the executor exited ${CHILD_EXIT.dropReply} after retaining its report`, operation_id: row.operation_id });
      throw new CustodyError('reply_dropped', `${executor.name} retained the report of ${row.request_id} and exited ${CHILD_EXIT.dropReply} without replying (drill)`);
    }
  }
  ctx.log.info('execute_unanswered', { request_id: row.request_id, code: f.failure.code });
  return ctx.store.movePhaseGrouped(row.request_id, 'reconciling', { reason: f.failure.code });
}

function windowOf(authorization: string): { not_before: number; expires_at: number } {
  return authorizationBody.parse(readEnvelope(authorization).envelope.body);
}

/** Wait until the authorization's window opens (bounded: a skewed clock is re-checked every 5 s). */
function untilWindowOpens(authorization: string): Promise<void> {
  return sleep(Math.min(Math.max(windowOf(authorization).not_before - nowMs(), 50), 5_000));
}

async function fireWatchdog(ctx: OperationContext, executor: ChildHandle, row: RequestRow, frameId: string, deadline: number): Promise<void> {
  const session = executor.session;
  ctx.store.recordIncident({
    child: executor.name,
    kind: 'watchdog',
    code: 'deadline_exceeded',
    message: `${row.tool} for ${row.request_id} ran past its ${deadline} ms deadline`,
    operation_id: row.operation_id,
  });
  if (session) {
    try {
      const { cancelled } = await session.channel.request('cancel', { target: frameId }, { timeoutMs: ctx.config.timing.cancel_grace_ms });
      if (cancelled) {
        ctx.log.info('watchdog_cancelled', { request_id: row.request_id });
        return;
      }
    } catch (error) {
      ctx.log.info('watchdog_cancel_refused', { request_id: row.request_id, code: toCustodyError(error).code });
    }
  }
  await executor.killAndReap(`watchdog: ${row.request_id} past its ${deadline} ms deadline`, { deliberate: true });
  ctx.store.recordIncident({ child: executor.name, kind: 'watchdog_kill', code: null, message: `killed and reaped ${executor.name} for ${row.request_id}`, operation_id: row.operation_id });
}

/** What a reconcile asks about: one authorized operation, whether or not a request of this supervisor carries it. */
export interface ReconcileTarget {
  /** The client's request id (the operation name), for logs and incidents. */
  readonly requestId: string;
  readonly operationId: string;
  readonly tool: string;
  readonly authorization: string;
  readonly expected: Invocation;
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
 * time, each in a slot of the executor and on a live session, each bounded
 * by the tool's reconcile deadline; a hung exchange (this supervisor's own
 * deadline passed) kills the executor so the next attempt gets a fresh
 * session. An answer that proves nothing marks the operation unknown at the
 * kernel (listed for the operator) and is asked again with backoff until a
 * signed report comes back: asking never re-runs an effect (race H4 (ARCHITECTURE.md §6.5):
 * giving up after one exchange leaves holds stuck). Throws only when the
 * executor is failed or the service stops.
 */
export async function reconcileOperation(ctx: OperationContext, executor: ChildHandle, target: ReconcileTarget): Promise<string> {
  const backoff = retryBackoff(ctx);
  const exchangeMs = reconcileDeadlineFor(ctx, executor, target.tool);
  let markedUnknown = false;
  for (;;) {
    const release = await executor.slots.acquire(ctx.signal);
    let sentAt: number | null = null;
    try {
      const session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
      sentAt = performance.now();
      const result = await executor.send(session, 'reconcile_operation', { authorization: target.authorization, expected: target.expected }, { timeoutMs: exchangeMs, requestId: target.requestId });
      ctx.store.recordIncident({ child: executor.name, kind: 'reconciled', code: null, message: `reconcile_operation: ${result.status}${result.replayed ? ' (retained report)' : ''}`, operation_id: target.operationId });
      return result.report;
    } catch (error) {
      const failure = toCustodyError(error);
      if (failure.code === 'request_quarantined') throw failure;
      ctx.log.warn('reconcile_unanswered', { request_id: target.requestId, code: failure.code, attempt: backoff.attempts + 1 });
      if (executor.state === 'failed' || ctx.signal.aborted) throw failure;
      if (failure.code === 'deadline_exceeded' && sentAt !== null && performance.now() - sentAt >= exchangeMs) {
        // A hung exchange: the next attempt gets a fresh session.
        ctx.store.recordIncident({
          child: executor.name,
          kind: 'reconcile_kill',
          code: 'deadline_exceeded',
          message: `reconcile_operation for ${target.requestId} unanswered within ${exchangeMs} ms; killing ${executor.name}`,
          operation_id: target.operationId,
        });
        await executor.killAndReap(`reconcile_operation for ${target.requestId} unanswered within ${exchangeMs} ms`, { deliberate: true });
      } else if (!isTransportFailure(failure) && failure.code !== 'reconcile_budget_exhausted' && !markedUnknown) {
        if (failure.code !== 'indeterminate') {
          ctx.store.recordIncident({ child: executor.name, kind: 'reconcile_refused', code: failure.code, message: failure.message, operation_id: target.operationId });
        }
        markedUnknown = await markUnknown(ctx, target, failure);
      }
    } finally {
      release();
    }
    await backoff.wait();
  }
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
