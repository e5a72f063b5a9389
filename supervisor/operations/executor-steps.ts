// The steps that ask an executor: execute, under the watchdog, and
// reconcile_operation, which never re-runs an effect and is asked again
// until it yields a signed report.
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { type JsonObject } from '../../shared/protocol/common.js';
import { toolPatternCovers } from '../../shared/protocol/common.js';
import { type ChildHandle } from '../children/child-handle.js';
import { type RequestRow } from '../store/supervisor-store.js';
import { Backoff } from './backoff.js';
import { type OperationContext, isTransportFailure } from './context.js';
import { expectedOf } from './kernel-steps.js';

/** The drill's exit status: the executor retained its report and deliberately did not answer. */
export const DROP_REPLY_EXIT = 75;

/** The watchdog deadline of a tool on an executor: its own entry, else `*`, else 30 s. */
export function deadlineFor(ctx: OperationContext, executor: ChildHandle, tool: string): number {
  const config = ctx.config.executors.find((e) => e.name === executor.name);
  const deadlines = config?.deadlines_ms ?? {};
  const specific = Object.entries(deadlines).find(([pattern]) => pattern !== '*' && toolPatternCovers(pattern, tool));
  return specific?.[1] ?? deadlines['*'] ?? 30_000;
}

export interface ExecuteOptions {
  readonly dropReply: boolean;
}

/**
 * Send execute with the tool's deadline armed before dispatch. On expiry the
 * watchdog tries a cooperative cancel (short grace), then kills the
 * executor's process group and waits for the reap; the request moves to
 * `reconciling`, where a fresh session is asked (exactly one exchange per
 * attempt). Any other failure to learn the outcome also moves it there.
 */
export async function executeStep(ctx: OperationContext, row: RequestRow, options: ExecuteOptions): Promise<RequestRow> {
  const { authorization } = row;
  if (!authorization || !row.executor) throw new Error(`request ${row.request_id} has no authorization`);
  const executor = ctx.executorById(row.executor);
  row = ctx.store.movePhase(row.request_id, 'executing');
  ctx.store.countAttempt(row.request_id);
  const deadline = deadlineFor(ctx, executor, row.tool);
  const session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
  const frameId = `exec-${row.operation_id.slice(0, 16)}-${row.attempts + 1}`;
  const answer = session.channel.request(
    'execute',
    { authorization, expected: expectedOf(row), arguments: JSON.parse(row.arguments) as JsonObject, drop_reply: options.dropReply },
    { id: frameId, timeoutMs: deadline },
  );
  try {
    const result = await answer;
    return ctx.store.movePhase(row.request_id, 'reported', { report: result.report });
  } catch (error) {
    const failure = toCustodyError(error);
    // Our deadline passed, or the executor's own did first and the adapter is still running:
    // either way something may still be acting, and the watchdog stops it.
    if (failure.code === 'deadline_exceeded' || failure.code === 'adapter_still_running') {
      await fireWatchdog(ctx, executor, row, frameId, deadline);
    } else if (options.dropReply && isTransportFailure(failure)) {
      const exit = await session.exited;
      if (exit.code === DROP_REPLY_EXIT) {
        ctx.store.recordIncident({ child: executor.name, kind: 'reply_dropped', code: 'reply_dropped', message: 'lost-reply drill: the executor exited 75 after retaining its report', operation_id: row.operation_id });
        throw new CustodyError('reply_dropped', `${executor.name} retained the report of ${row.request_id} and exited ${DROP_REPLY_EXIT} without replying (drill)`);
      }
    }
    if (failure.code === 'outside_window' && /not yet|before/.test(failure.message)) throw failure;
    ctx.log.info('execute_unanswered', { request_id: row.request_id, code: failure.code });
    return ctx.store.movePhase(row.request_id, 'reconciling', { reason: failure.code });
  }
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
  await executor.killAndReap(`watchdog: ${row.request_id} past its ${deadline} ms deadline`);
  ctx.store.recordIncident({ child: executor.name, kind: 'watchdog_kill', code: null, message: `killed and reaped ${executor.name} for ${row.request_id}`, operation_id: row.operation_id });
}

/**
 * Ask the executor what became of the operation, one exchange at a time on
 * a live session, until a signed report comes back. An `indeterminate`
 * answer marks the operation unknown at the kernel (listed for the
 * operator) and is asked again with backoff: asking never re-runs an effect.
 */
export async function reconcileStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  const { authorization } = row;
  if (!authorization || !row.executor) throw new Error(`request ${row.request_id} has no authorization to reconcile`);
  const executor = ctx.executorById(row.executor);
  const backoff = new Backoff({ initialMs: ctx.config.timing.reconcile_backoff_initial_ms, maxMs: ctx.config.timing.reconcile_backoff_max_ms, signal: ctx.signal });
  let markedUnknown = false;
  for (;;) {
    try {
      const session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
      const result = await session.channel.request(
        'reconcile_operation',
        { authorization, expected: expectedOf(row) },
        { timeoutMs: ctx.config.timing.reconcile_exchange_ms },
      );
      ctx.store.recordIncident({ child: executor.name, kind: 'reconciled', code: null, message: `reconcile_operation: ${result.status}${result.replayed ? ' (retained report)' : ''}`, operation_id: row.operation_id });
      return ctx.store.movePhase(row.request_id, 'reported', { report: result.report });
    } catch (error) {
      const failure = toCustodyError(error);
      ctx.log.warn('reconcile_unanswered', { request_id: row.request_id, code: failure.code, attempt: backoff.attempts + 1 });
      if (failure.code === 'indeterminate' && !markedUnknown) {
        markedUnknown = true;
        await markUnknown(ctx, row, failure);
      } else if (failure.code === 'deadline_exceeded') {
        // A hung exchange: the next attempt gets a fresh session.
        await executor.killAndReap(`reconcile_operation for ${row.request_id} unanswered`);
      } else if (!isTransportFailure(failure) && failure.code !== 'indeterminate' && failure.code !== 'reconcile_budget_exhausted') {
        ctx.store.recordIncident({ child: executor.name, kind: 'reconcile_refused', code: failure.code, message: failure.message, operation_id: row.operation_id });
        if (!markedUnknown) {
          markedUnknown = true;
          await markUnknown(ctx, row, failure);
        }
      }
      if (executor.state === 'failed') throw failure;
      await backoff.wait();
    }
  }
}

async function markUnknown(ctx: OperationContext, row: RequestRow, cause: CustodyError): Promise<void> {
  ctx.store.recordIncident({ child: row.executor, kind: 'outcome_unknown', code: cause.code, message: `operator attention: ${cause.message}`, operation_id: row.operation_id });
  try {
    await ctx.kernel.request('mark_unknown', { operation_id: row.operation_id, reason: `${cause.code}: ${cause.message}`.slice(0, 512) }, { timeoutMs: ctx.config.timing.kernel_request_ms });
  } catch (error) {
    ctx.log.warn('mark_unknown_failed', { request_id: row.request_id, code: toCustodyError(error).code });
  }
}
