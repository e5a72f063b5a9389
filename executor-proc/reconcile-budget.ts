// reconcile_operation asks adapters, which may write (a fence) and call out,
// so adapter reconciliations are bounded per tool and per session (ARCHITECTURE.md
// §6.2, §10) and cannot become an unbounded status oracle. The bound is a
// rate, not a session total: the supervisor re-asks an indeterminate
// operation with backoff for as long as it takes (ARCHITECTURE.md §7), and a total
// would starve it for the rest of the session once an adapter had answered
// indeterminate often enough.
import { performance } from 'node:perf_hooks';
import { nowMs } from '../shared/clock.js';
import { CustodyError } from '../shared/errors.js';

export interface ReconcileBounds {
  /** Adapter reconciliations of one tool within any window. */
  readonly perTool: number;
  /** Adapter reconciliations of all tools within any window. */
  readonly perSession: number;
  readonly windowMs: number;
}

/**
 * A sliding-window log: the times of the reconciliations still inside the
 * window, oldest first. Each list holds at most its bound, so memory stays
 * bounded by the settings. Time is monotonic: a wall clock stepped back must
 * not hold the budget empty, nor a step forward refill it.
 */
export class ReconcileBudget {
  readonly #bounds: ReconcileBounds;
  readonly #now: () => number;
  readonly #perTool = new Map<string, number[]>();
  readonly #session: number[] = [];

  constructor(bounds: ReconcileBounds, now: () => number = () => performance.now()) {
    this.#bounds = bounds;
    this.#now = now;
  }

  /** Count one adapter reconciliation of `tool`, or refuse with when the next one is allowed. */
  take(tool: string): void {
    const now = this.#now();
    const { perTool, perSession, windowMs } = this.#bounds;
    const toolLog = this.#perTool.get(tool) ?? [];
    expire(this.#session, now - windowMs);
    expire(toolLog, now - windowMs);
    const full: string[] = [];
    let waitMs = 0;
    if (this.#session.length >= perSession) {
      full.push(`this session made ${this.#session.length} adapter reconciliations in the last ${windowMs} ms (reconcile_per_session ${perSession})`);
      waitMs = Math.max(waitMs, this.#session[0]! + windowMs - now);
    }
    if (toolLog.length >= perTool) {
      full.push(`tool ${tool} made ${toolLog.length} in the last ${windowMs} ms (reconcile_per_tool ${perTool})`);
      waitMs = Math.max(waitMs, toolLog[0]! + windowMs - now);
    }
    if (full.length > 0) {
      const wait = Math.max(1, Math.ceil(waitMs));
      throw new CustodyError(
        'reconcile_budget_exhausted',
        `${full.join('; ')}; nothing was asked — the next reconciliation of ${tool} is allowed in ${wait} ms (at ${new Date(nowMs() + wait).toISOString()}), reconcile_window_ms ${windowMs}`,
      );
    }
    toolLog.push(now);
    this.#perTool.set(tool, toolLog);
    this.#session.push(now);
  }
}

/** Drop the times at or before `cutoff`: they have left the window. */
function expire(log: number[], cutoff: number): void {
  let gone = 0;
  while (gone < log.length && log[gone]! <= cutoff) gone += 1;
  if (gone > 0) log.splice(0, gone);
}
