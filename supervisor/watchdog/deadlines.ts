// The watchdog's deadlines (ARCHITECTURE.md §7 "the watchdog"): every
// execute is armed with its tool's deadline before dispatch, every
// reconcile_operation exchange with a bound of its own; only this
// supervisor's own deadline passing is the watchdog's to act on.
import type { CustodyError } from '../../shared/errors.js';
import { toolPatternCovers } from '../../shared/protocol/common.js';
import type { ChildHandle } from '../children/child-handle.js';
import { ADAPTER_DEADLINE_MARGIN_MS } from '../config/schema.js';
import { runningNow } from '../../shared/timeout.js';
import type { OperationContext } from '../operations/context.js';

/** The watchdog deadline of a tool on an executor: its own entry, else `*`, else 30 s. */
export function deadlineFor(ctx: OperationContext, executor: ChildHandle, tool: string): number {
  const config = ctx.config.executors.find((e) => e.name === executor.name);
  const deadlines = config?.deadlines_ms ?? {};
  const specific = Object.entries(deadlines).find(([pattern]) => pattern !== '*' && toolPatternCovers(pattern, tool));
  return specific?.[1] ?? deadlines['*'] ?? 30_000;
}

/** One reconcile exchange may take as long as the executor gives the tool's reconcile, plus a margin. */
export function reconcileDeadlineFor(ctx: OperationContext, executor: ChildHandle, tool: string): number {
  return Math.max(ctx.config.timing.reconcile_exchange_ms, deadlineFor(ctx, executor, tool) + ADAPTER_DEADLINE_MARGIN_MS + 5_000);
}

/**
 * Whether a failure is this supervisor's own deadline, after the whole of
 * it: a deadline_exceeded in the peer's answer, or one that came early, is not.
 * `sentAt` is on runningNow() (shared/timeout.ts): time this supervisor
 * did not run is not the executor's.
 */
export function ownDeadlinePassed(failure: CustodyError, sentAt: number | null, deadlineMs: number): boolean {
  return failure.code === 'deadline_exceeded' && sentAt !== null && runningNow() - sentAt >= deadlineMs;
}
