// An execute past its deadline (ARCHITECTURE.md §7 "the watchdog"): a
// cooperative cancel within the grace, else the executor's process group is
// killed and reaped (supervisor/watchdog/reap.ts). The kill is deliberate: a
// fresh session follows at once, uncounted, and the request goes on to
// reconciliation (reconcile-exchange.ts), which asks that fresh session.
import { toCustodyError } from '../../shared/errors.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import type { ChildHandle } from '../children/child-handle.js';
import type { OperationContext } from '../operations/context.js';
import type { RequestRow } from '../store/supervisor-store.js';

/** The execute frame `frameId` for `row` ran past `deadline` ms: cancel it, or kill and reap its executor. */
export async function expireExecute(ctx: OperationContext, executor: ChildHandle, row: RequestRow, frameId: string, deadline: number): Promise<void> {
  const session = executor.session;
  ctx.store.recordIncident({
    child: executor.name,
    kind: 'watchdog',
    code: 'deadline_exceeded',
    message: `${row.tool} for ${row.request_id} ran past its ${deadline} ms deadline`,
    operation_id: row.operation_id,
  });
  if (session && (await cancelled(ctx, session, row, frameId))) return;
  await executor.killAndReap(`watchdog: ${row.request_id} past its ${deadline} ms deadline`, { deliberate: true });
  ctx.store.recordIncident({ child: executor.name, kind: 'watchdog_kill', code: null, message: `killed and reaped ${executor.name} for ${row.request_id}`, operation_id: row.operation_id });
}

/** Ask the executor to cancel the execute, waiting at most timing.cancel_grace_ms; true once it says it did. */
async function cancelled(ctx: OperationContext, session: ChildSession, row: RequestRow, frameId: string): Promise<boolean> {
  try {
    const { cancelled } = await session.channel.request('cancel', { target: frameId }, { timeoutMs: ctx.config.timing.cancel_grace_ms });
    if (cancelled) ctx.log.info('watchdog_cancelled', { request_id: row.request_id });
    return cancelled;
  } catch (error) {
    ctx.log.info('watchdog_cancel_refused', { request_id: row.request_id, code: toCustodyError(error).code });
    return false;
  }
}
