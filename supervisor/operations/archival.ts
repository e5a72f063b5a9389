// Archival (ARCHITECTURE.md §6.2, "Capacity and archival"): settled
// operations leave each executor's live ledger for its append-only archive,
// where they are still found and replayed. The live ledger holds at most
// `claim_capacity` claims (50,000 by default), so a service nobody archives
// refuses every execute with ledger_full once it has run that many
// operations. A pass runs on demand (`custody archive`, POST /v1/archive) and
// every `timing.archive_interval_ms` on its own (10 s by default; 0 leaves it
// to the operator). An executor that cannot be asked (failed, restarting)
// does not hold up the others: each is passed on its own.
//
// A pass: each executor lists its live ledger a page at a time, with why an
// entry may not leave yet (no report, window open). Of the others, those the
// request log shows settled on this executor (the row ends `settled` with
// the kernel's end state, written only once the kernel's settle answered)
// are known settled; the kernel is asked about the rest (an operation no
// request carries: an orphan the sweep settled, a request log restored).
// The ones settled on this executor go to `archive`, which checks them again
// and moves them to the archive. A pass costs the live ledgers, never the
// kernel's whole history (docs/PERFORMANCE.md "History on the start path"),
// and a kernel exchange only for what the log cannot answer. An entry the
// kernel has not settled is kept as not_settled.
import { setTimeout as sleep } from 'node:timers/promises';
import { type CustodyError, toCustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import { LEDGER_LIVE_PAGE_MAX } from '../../shared/protocol/executor-messages.js';
import type { ResultOf } from '../../shared/protocol/messages.js';
import type { ChildHandle } from '../children/child-handle.js';
import type { OperationContext } from './context.js';
import type { OperationState } from '../../shared/protocol/kernel-messages.js';
import type { SupervisorStore } from '../store/supervisor-store.js';
import { SETTLED_STATES } from './outcome.js';
import { Periodic } from './periodic.js';

/** Entries of an executor's live ledger read per `ledger.live` page, and kernel lookups in flight at once while a page is judged. */
const ARCHIVE_PAGE = LEDGER_LIVE_PAGE_MAX;
const ARCHIVE_LOOKUPS_IN_FLIGHT = 16;
/**
 * Operations one `archive` exchange moves. The executor copies and deletes
 * them in two transactions on its event loop, and every execute waits
 * behind them: 500 at a time (a whole page) held one-at-a-time invokes at
 * ~8x their quiet latency for the whole pass; 50 and a pause after each
 * (below), ~1.2x (docs/PERFORMANCE.md "Archival on its own").
 */
export const ARCHIVE_MOVE = 50;
/**
 * Pause after each `archive` exchange, so the pass leaves the executor to
 * the executions waiting: ARCHIVE_PAUSE_FACTOR times as long as the exchange
 * took, ARCHIVE_PAUSE_MS at least and ARCHIVE_PAUSE_MAX_MS at most. A pass
 * then holds the executor a quarter of the time at most (while exchanges
 * take under a third of a second), and less while executions keep it busy:
 * an exchange that waits behind them takes longer, and so does the pause
 * after it. One-at-a-time invokes during a pass of 8,000: a fixed 10 ms
 * pause ~2x their quiet latency, three times the exchange ~1.2x, the pass
 * ~2x as long (docs/PERFORMANCE.md "Archival on its own").
 */
export const ARCHIVE_PAUSE_MS = 10;
export const ARCHIVE_PAUSE_FACTOR = 3;
/** The longest pause: an exchange that waited seconds on a stalled executor does not hold `POST /v1/archive` three times as long. */
export const ARCHIVE_PAUSE_MAX_MS = 1000;
/** Deadline of each ledger.live exchange (a page of 500 entries) and archive exchange (ARCHIVE_MOVE operations and their writes). */
const ARCHIVE_EXCHANGE_MS = 60_000;

/** What one pass did on one executor: moved to the archive, left live, and why each kept entry stayed. */
export interface ArchivePass {
  readonly executor: string;
  readonly archived: number;
  readonly live: number;
  readonly kept: Record<string, number>;
}

export class Archival {
  readonly #ctx: OperationContext;
  readonly #executors: ReadonlyMap<string, ChildHandle>;
  readonly #passes = new Periodic(() => this.#passOnce());

  constructor(ctx: OperationContext, executors: ReadonlyMap<string, ChildHandle>) {
    this.#ctx = ctx;
    this.#executors = executors;
  }

  /** Passes every timing.archive_interval_ms from now on (none when it is 0). */
  start(): void {
    this.#passes.every(this.#ctx.config.timing.archive_interval_ms, () => void this.#scheduled());
  }

  stop(): void {
    this.#passes.stop();
  }

  /** One pass over every executor; a call while one runs shares it. */
  pass(): Promise<ArchivePass[]> {
    return this.#passes.run();
  }

  /** A pass of the timer: what it moved is logged; an executor it could not pass (logged by #passOnce) waits for the next one. */
  async #scheduled(): Promise<void> {
    // A pass still running (a large ledger, a slow kernel) is not joined again: it is logged once, by the tick that started it.
    if (this.#ctx.signal.aborted || this.#passes.running) return;
    try {
      for (const pass of await this.pass()) {
        if (pass.archived > 0) this.#ctx.log.info('archived', { executor: pass.executor, archived: pass.archived, live: pass.live, kept: pass.kept });
      }
    } catch {
      // Each failure was logged with its executor.
    }
  }

  /** Every executor in turn, each on its own: one that fails is logged and the others are still passed; then the first failure is thrown. */
  async #passOnce(): Promise<ArchivePass[]> {
    const passes: ArchivePass[] = [];
    let failure: CustodyError | null = null;
    for (const [name, executor] of this.#executors) {
      if (this.#ctx.signal.aborted) break;
      try {
        passes.push(await this.#passOn(name, executor));
      } catch (error) {
        failure ??= toCustodyError(error);
        if (!this.#ctx.signal.aborted) this.#ctx.log.warn('archive_pass_failed', { executor: name, ...errorFields(error) });
      }
    }
    if (failure !== null) throw failure;
    return passes;
  }

  async #passOn(name: string, executor: ChildHandle): Promise<ArchivePass> {
    const { kernel, store } = this.#ctx;
    const id = store.getPin(name)?.identity_id;
    const kept: Record<string, number> = {};
    const keep = (reason: string) => (kept[reason] = (kept[reason] ?? 0) + 1);
    let archived = 0;
    let live = 0;
    // A stopping service ends the pass between pages: its executors are being stopped.
    for (let after: number | null = 0; after !== null && !this.#ctx.signal.aborted; ) {
      const page: ResultOf<'ledger.live'> = await executor.request('ledger.live', { after, limit: ARCHIVE_PAGE }, { timeoutMs: ARCHIVE_EXCHANGE_MS });
      live = page.live;
      const ready: string[] = [];
      const settled: string[] = [];
      for (const claim of page.claims) {
        if (claim.waiting) keep(claim.waiting);
        else if (id !== undefined && settledInLog(store, claim.operation_id, id)) settled.push(claim.operation_id);
        else ready.push(claim.operation_id);
      }
      for (let at = 0; at < ready.length; at += ARCHIVE_LOOKUPS_IN_FLIGHT) {
        const views = await Promise.all(ready.slice(at, at + ARCHIVE_LOOKUPS_IN_FLIGHT).map((operationId) => kernel.request('operation.get', { operation_id: operationId, request_id: null })));
        for (const { operation } of views) {
          if (operation && SETTLED_STATES.has(operation.state) && operation.executor_id === id) settled.push(operation.operation_id);
          else keep('not_settled');
        }
      }
      // A few at a time: the executions queued behind one exchange run before the next.
      for (let at = 0; at < settled.length && !this.#ctx.signal.aborted; at += ARCHIVE_MOVE) {
        const started = performance.now();
        const answer = await executor.request('archive', { settled: settled.slice(at, at + ARCHIVE_MOVE) }, { timeoutMs: ARCHIVE_EXCHANGE_MS });
        archived += answer.archived;
        live = answer.live;
        for (const { reason } of answer.not_archived) keep(reason);
        // Nothing follows the pass's last exchange: POST /v1/archive answers at once.
        if (at + ARCHIVE_MOVE >= settled.length && page.next === null) break;
        const took = performance.now() - started;
        await pause(Math.min(ARCHIVE_PAUSE_MAX_MS, Math.max(ARCHIVE_PAUSE_MS, ARCHIVE_PAUSE_FACTOR * took)), this.#ctx.signal);
      }
      after = page.next;
    }
    return { executor: name, archived, live, kept };
  }
}

/** The request log's word that the kernel settled an operation on this executor: its row ended `settled`, authorized for it. */
function settledInLog(store: SupervisorStore, operationId: string, executorId: string): boolean {
  const row = store.endOf(operationId);
  return row !== undefined && row.phase === 'settled' && row.executor === executorId && SETTLED_STATES.has(row.outcome as OperationState);
}

/** Wait `ms`, or less if the service stops meanwhile. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch(() => undefined);
}
