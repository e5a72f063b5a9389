// The recovery sweep: asks the kernel for every operation that still needs a
// signed end (committed starts, awaiting reports, unknowns) and drives each
// one nobody is driving. Without it a start that was never claimed — a
// watchdog that fired early, a lost frame, an operator who abandoned a manual
// walk — would wait forever with its hold (DESIGN §6.3, last row; the model
// README's note on the kernel-side sweep).
import { toCustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import { type OperationView } from '../../shared/protocol/kernel-messages.js';
import { Backoff } from './backoff.js';
import { type OperationContext, askKernel } from './context.js';
import { type OperationDriver } from './driver.js';
import { executorIdOf } from './kernel-steps.js';

interface Pending {
  due: number;
  readonly backoff: Backoff;
}

export class RecoverySweeper {
  readonly #ctx: OperationContext;
  readonly #driver: OperationDriver;
  readonly #orphans = new Map<string, Pending>();
  #timer: NodeJS.Timeout | null = null;
  #sweeping: Promise<void> | null = null;

  constructor(ctx: OperationContext, driver: OperationDriver) {
    this.#ctx = ctx;
    this.#driver = driver;
  }

  start(): void {
    this.#timer = setInterval(() => void this.sweep(), this.#ctx.config.timing.recovery_sweep_ms);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** One sweep; overlapping calls share the sweep in progress. */
  sweep(): Promise<void> {
    this.#sweeping ??= this.#sweepOnce().finally(() => (this.#sweeping = null));
    return this.#sweeping;
  }

  async #sweepOnce(): Promise<void> {
    const ctx = this.#ctx;
    let listing: { operations: OperationView[]; now: number };
    try {
      listing = await ctx.kernel.request('recover', { limit: 1000 }, { timeoutMs: ctx.config.timing.kernel_request_ms });
    } catch (error) {
      ctx.log.debug('sweep_skipped', errorFields(error));
      return;
    }
    for (const op of listing.operations) {
      if (ctx.signal.aborted) return;
      const row = ctx.store.getRequestByOperation(op.operation_id);
      if (row && this.#driver.isDriving(row.request_id)) continue;
      const windowPassed = op.window !== null && listing.now >= op.window.expires_at;
      if (row) {
        const manual = row.kind === 'authorize';
        // A manual walk is the operator's until its window passes, unless a crash interrupted it mid-step.
        const interrupted = row.phase === 'executing' || row.phase === 'reconciling';
        if (manual && !windowPassed && !interrupted && op.state !== 'unknown') continue;
        const goal = manual || op.state === 'unknown' ? 'reconcile' : 'resume';
        this.#driver.drive(row.request_id, goal).catch((error: unknown) => ctx.log.warn('sweep_drive_failed', { request_id: row.request_id, ...errorFields(error) }));
      } else if (windowPassed || op.state === 'unknown') {
        await this.#settleOrphan(op, listing.now);
      }
    }
  }

  /**
   * An operation the kernel committed but this supervisor has no record of
   * (its request log was lost, or another client started it): ask the
   * executor once per sweep, with backoff, and give any report to the kernel.
   */
  async #settleOrphan(op: OperationView, now: number): Promise<void> {
    const ctx = this.#ctx;
    if (!op.authorization || !op.expected) return;
    const pending = this.#orphans.get(op.operation_id) ?? {
      due: 0,
      backoff: new Backoff({ initialMs: ctx.config.timing.reconcile_backoff_initial_ms, maxMs: ctx.config.timing.reconcile_backoff_max_ms }),
    };
    this.#orphans.set(op.operation_id, pending);
    if (now < pending.due) return;
    try {
      const executor = ctx.executorById(executorIdOf(op.authorization));
      const session = await executor.waitForSession(ctx.config.timing.hello_timeout_ms);
      const { report } = await session.channel.request(
        'reconcile_operation',
        { authorization: op.authorization, expected: op.expected },
        { timeoutMs: ctx.config.timing.reconcile_exchange_ms },
      );
      await askKernel(ctx, 'reconcile', { authorization: op.authorization, report });
      ctx.store.recordIncident({ child: executor.name, kind: 'orphan_settled', code: null, message: `settled ${op.request_id}, which no request of this supervisor carried`, operation_id: op.operation_id });
      this.#orphans.delete(op.operation_id);
    } catch (error) {
      pending.due = now + pending.backoff.nextDelayMs();
      ctx.log.warn('orphan_unsettled', { operation_id: op.operation_id, code: toCustodyError(error).code });
    }
  }
}
