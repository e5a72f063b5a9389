// The recovery sweep: asks the kernel for every operation that still needs a
// signed end (committed starts, awaiting reports, unknowns) and drives each
// one nobody is driving. Without it a start that was never claimed — a
// watchdog that fired early, a lost frame, an operator who abandoned a manual
// walk — would wait forever with its hold (ARCHITECTURE.md §6.3, last row; the model
// README's note on the kernel-side sweep).
import { toCustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import type { OperationKey, OperationView } from '../../shared/protocol/kernel-messages.js';
import type { ResultOf } from '../../shared/protocol/messages.js';
import type { Backoff } from './backoff.js';
import { Periodic } from './periodic.js';
import { type OperationContext, retryBackoff } from './context.js';
import type { OperationDriver } from './driver.js';
import { reconcileOperation } from './executor-steps.js';
import { executorIdOf, settleReport } from './kernel-steps.js';

/** An operation the sweep will not touch again before `due` (its last attempt failed). */
interface Pending {
  due: number;
  readonly backoff: Backoff;
}

/** One sweep's listing: `roundEnded` when it reached the newest operation in doubt (the next sweep starts from the oldest). */
interface InDoubt {
  readonly operations: OperationView[];
  readonly now: number;
  readonly roundEnded: boolean;
}

export class RecoverySweeper {
  readonly #ctx: OperationContext;
  readonly #driver: OperationDriver;
  /** Per operation, when the sweep may try again after a failed attempt. */
  readonly #pending = new Map<string, Pending>();
  /** Operations whose executor is failed, already reported once. */
  readonly #parked = new Set<string>();
  /** Requests #carryUnlisted drove that failed, by request id: when it may drive each again (its own backoff, kept across rounds). */
  readonly #carried = new Map<string, Pending>();
  /** Orphans being reconciled now (each until a report comes back). */
  readonly #orphans = new Set<string>();
  readonly #sweeps = new Periodic(() => this.#sweepOnce());
  /**
   * Where the next sweep's listing starts: null from the oldest, else after
   * the last operation the previous sweep looked at, when it stopped at
   * bounds.recovery_sweep_operations with more in doubt. Without it, that
   * many old operations nobody can move (an executor failed, walks an
   * operator holds, quarantined requests) would hide every newer one from
   * every sweep.
   */
  #resumeAfter: OperationKey | null = null;
  /** The operations the sweeps have listed since one started from the oldest. */
  readonly #seenThisRound = new Set<string>();

  constructor(ctx: OperationContext, driver: OperationDriver) {
    this.#ctx = ctx;
    this.#driver = driver;
  }

  start(): void {
    this.#sweeps.every(this.#ctx.config.timing.recovery_sweep_ms, () => void this.sweep());
  }

  stop(): void {
    this.#sweeps.stop();
  }

  /** One sweep; overlapping calls share the sweep in progress. */
  sweep(): Promise<void> {
    return this.#sweeps.run();
  }

  async #sweepOnce(): Promise<void> {
    const ctx = this.#ctx;
    let listing: InDoubt;
    try {
      listing = await this.#listInDoubt();
    } catch (error) {
      ctx.log.debug('sweep_skipped', errorFields(error));
      return;
    }
    // What is no longer in doubt is forgotten once the sweeps since the oldest have reached the newest: they have seen all that is.
    if (listing.roundEnded) {
      for (const id of this.#pending.keys()) if (!this.#seenThisRound.has(id)) this.#pending.delete(id);
      for (const id of this.#parked) if (!this.#seenThisRound.has(id)) this.#parked.delete(id);
    }
    for (const op of listing.operations) {
      if (ctx.signal.aborted) return;
      // Backoffs run on the monotonic clock (shared/clock.ts); the kernel's `now` is for the signed windows only.
      if (performance.now() < (this.#pending.get(op.operation_id)?.due ?? 0)) continue;
      if (this.#executorFailed(op)) continue;
      const row = ctx.store.getRequestByOperation(op.operation_id);
      if (row && this.#driver.isDriving(row.request_id)) continue;
      // Parked by an operator's rule (quarantine.ts): its hold stays until they release it.
      if (row?.phase === 'quarantined') continue;
      const windowPassed = op.window !== null && listing.now >= op.window.expires_at;
      if (row) {
        // A manual walk is the operator's until its window passes, unless a crash interrupted it mid-step.
        const manual = row.kind === 'authorize';
        const interrupted = row.phase === 'executing' || row.phase === 'reconciling';
        if (manual && !windowPassed && !interrupted && op.state !== 'unknown') continue;
        const goal = manual || op.state === 'unknown' ? 'reconcile' : 'resume';
        this.#driver.drive(row.request_id, goal).then(
          () => this.#pending.delete(op.operation_id),
          (error: unknown) => {
            this.#postpone(op.operation_id);
            ctx.log.warn('sweep_drive_failed', { request_id: row.request_id, ...errorFields(error) });
          },
        );
      } else if ((windowPassed || op.state === 'unknown') && !this.#orphans.has(op.operation_id)) {
        this.#settleOrphan(op);
      }
    }
    this.#carryUnlisted();
  }

  /**
   * Open requests the kernel cannot list as in doubt, that no drive carries:
   * one never reserved (its reserve met kernel.db locked from a sqlite3
   * shell, or a full disk), and one the kernel settled while the supervisor
   * could not write that down. Each waited for the next start, which resumes
   * every open request: an invoke answered 503 "ask again" then ran days
   * later, after its caller had sent it again under a new name. Carried on
   * now, with the same backoff as the kernel's operations in doubt; an
   * operator's manual walk is left where they left it.
   */
  #carryUnlisted(): void {
    const ctx = this.#ctx;
    const listed = new Set<string>();
    for (const row of ctx.store.requestsBeforeOrAfterKernel(ctx.config.bounds.recovery_sweep_operations)) {
      if (ctx.signal.aborted) return;
      listed.add(row.request_id);
      // A manual walk (custody authorize, execute, report) stops where its operator left it; one bound to a failed executor waits for it.
      if (row.kind === 'authorize' || this.#driver.isDriving(row.request_id) || (row.executor !== null && this.#executorState(row.executor).failed)) continue;
      if (performance.now() < (this.#carried.get(row.request_id)?.due ?? 0)) continue;
      ctx.log.info('request_carried_on', { request_id: row.request_id, phase: row.phase });
      this.#driver.drive(row.request_id, 'resume').then(
        () => this.#carried.delete(row.request_id),
        (error: unknown) => {
          this.#postpone(row.request_id, this.#carried);
          ctx.log.warn('sweep_drive_failed', { request_id: row.request_id, ...errorFields(error) });
        },
      );
    }
    // A request no longer listed has ended (or been parked): its backoff goes with it.
    for (const id of this.#carried.keys()) if (!listed.has(id)) this.#carried.delete(id);
  }

  /** An executor by its pinned identity: failed, or no longer configured (failed for every purpose here), and its name. */
  #executorState(executorId: string): { failed: boolean; configured: boolean; name: string } {
    try {
      const executor = this.#ctx.executorById(executorId);
      return { failed: executor.state === 'failed', configured: true, name: executor.name };
    } catch {
      return { failed: true, configured: false, name: executorId };
    }
  }

  /**
   * The operations the kernel holds in doubt, page by page (each page cut to
   * one frame), oldest first from where the last sweep stopped, at most
   * bounds.recovery_sweep_operations of them.
   */
  async #listInDoubt(): Promise<InDoubt> {
    const ctx = this.#ctx;
    const most = ctx.config.bounds.recovery_sweep_operations;
    const operations: OperationView[] = [];
    const from = this.#resumeAfter;
    if (from === null) this.#seenThisRound.clear();
    let after: OperationKey | null = from;
    let now: number;
    // Each page starts after the last one's key: an operation settled while this reads (a drive of the last sweep) leaves the set without shifting another past a page's end.
    do {
      const page: ResultOf<'recover'> = await ctx.kernel.request('recover', { limit: Math.min(1000, most - operations.length), after }, { timeoutMs: ctx.config.timing.kernel_request_ms });
      operations.push(...page.operations);
      now = page.now;
      after = page.next_after;
    } while (after !== null && operations.length < most);
    // Stopped at the bound with more in doubt: the next sweep goes on from here; at the end, it starts again from the oldest.
    this.#resumeAfter = after;
    for (const op of operations) this.#seenThisRound.add(op.operation_id);
    return { operations, now, roundEnded: after === null };
  }

  /** Back off what failed its last attempt (an operation in `#pending`, a carried request in `#carried`), so a refusal is not repeated every sweep (`due` on performance.now()). */
  #postpone(id: string, backoffs: Map<string, Pending> = this.#pending): void {
    const pending = backoffs.get(id) ?? { due: 0, backoff: retryBackoff(this.#ctx) };
    pending.due = performance.now() + pending.backoff.nextDelayMs();
    backoffs.set(id, pending);
  }

  /** An operation whose executor is failed waits for an operator; said once, not every sweep. */
  #executorFailed(op: OperationView): boolean {
    if (!op.executor_id) return false;
    const { failed, configured, name } = this.#executorState(op.executor_id);
    if (failed && !this.#parked.has(op.operation_id)) {
      this.#parked.add(op.operation_id);
      // Its claims are in that executor's ledger alone: no other executor may run or answer for them.
      const message = configured
        ? `${op.request_id} waits for executor ${name}, which is failed; it is retried after restart.failed_cooldown_s, or now with: custody restart ${name}`
        : `${op.request_id} was started on the executor with identity ${name}, which custody.json no longer lists; only its ledger can say what became of it, so no other executor runs it. Put that executor back in custody.json (its directory, ledger and key unchanged) and restart custody: the operation is then reconciled`;
      this.#ctx.store.recordIncident({
        child: op.executor_id,
        kind: 'waiting_for_executor',
        code: configured ? 'child_failed' : 'executor_unknown',
        message,
        operation_id: op.operation_id,
      });
    }
    return failed;
  }

  /**
   * An operation the kernel committed but this supervisor has no record of
   * (its request log was lost, or another client started it): reconcile it
   * through the same step as a carried request (a slot, the tool's reconcile
   * deadline, a hung exchange killed, backoff until a signed report), in the
   * background, and give the report to the kernel.
   */
  #settleOrphan(op: OperationView): void {
    const ctx = this.#ctx;
    const { authorization, expected } = op;
    if (!authorization || !expected) return;
    this.#orphans.add(op.operation_id);
    const settle = async () => {
      const executor = ctx.executorById(executorIdOf(authorization));
      const report = await reconcileOperation(ctx, executor, { requestId: op.request_id, operationId: op.operation_id, tool: op.tool, authorization, expected });
      await settleReport(ctx, authorization, report);
      ctx.store.recordIncident({ child: executor.name, kind: 'orphan_settled', code: null, message: `settled ${op.request_id}, which no request of this supervisor carried`, operation_id: op.operation_id });
      this.#pending.delete(op.operation_id);
    };
    settle()
      .catch((error: unknown) => {
        this.#postpone(op.operation_id);
        ctx.log.warn('orphan_unsettled', { operation_id: op.operation_id, code: toCustodyError(error).code });
      })
      .finally(() => this.#orphans.delete(op.operation_id));
  }
}
