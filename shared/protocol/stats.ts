// The `stats` message (served by the kernel and by executors): the figures
// the supervisor's GET /metrics shows that only the child knows. They travel
// on the wire like any answer; no child writes them anywhere else.
import { z } from 'zod';
import { identifier, nonNegativeInt, positiveInt } from './common.js';

export const HOLD_STATES = ['reserved', 'released', 'consumed'] as const;

export const statsResult = z.strictObject({
  /** The kernel's budget holds by state, every state listed; an executor answers []. */
  holds: z.array(z.strictObject({ state: z.enum(HOLD_STATES), count: nonNegativeInt })).max(HOLD_STATES.length),
  /**
   * Write transactions this process committed since it started, by store and
   * by how many units each carried (a kernel batch groups decisions; an
   * executor's ledger groups the claims and reports of its operations in
   * flight). Cumulative: a
   * new process starts from nothing.
   */
  commit_batches: z.array(z.strictObject({ store: identifier, size: positiveInt, count: positiveInt })).max(2048),
});
export type StatsResult = z.infer<typeof statsResult>;

/** Cumulative batch sizes of one store, as the stats answer carries them. */
export class BatchSizes {
  readonly #counts = new Map<number, number>();
  readonly store: string;

  constructor(store: string) {
    this.store = store;
  }

  record(size: number): void {
    if (size < 1) return;
    this.#counts.set(size, (this.#counts.get(size) ?? 0) + 1);
  }

  entries(): StatsResult['commit_batches'] {
    return [...this.#counts].sort(([a], [b]) => a - b).map(([size, count]) => ({ store: this.store, size, count }));
  }
}
