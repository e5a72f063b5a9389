// Carries client requests through reserve → start → execute → settle, from
// whatever point the stores say they reached. One drive at a time per
// request: a second caller waits for the first and then continues from the
// phase it left, so the supervisor never races itself on an operation.
import { CustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import { bindRequest, operationIdFor } from '../../shared/protocol/binding.js';
import { type RequestRow, quarantinedError } from '../store/supervisor-store.js';
import { type OperationContext, askKernel } from './context.js';
import { executeStep, reconcileStep } from './executor-steps.js';
import { expectedOf, reserveRequestOf, reserveStep, settleStep, startStep } from './kernel-steps.js';
import { type Action, type Goal, goalAfterRelease, stepFor } from './drive-table.js';
import { FINAL_PHASES } from './phases.js';

export interface SubmitRequest {
  readonly kind: 'invoke' | 'authorize';
  readonly request_id: string;
  readonly tool: string;
  readonly subject: string;
  readonly arguments: JsonObject;
  readonly cost_units: number;
}

export type { Goal } from './drive-table.js';

/** The work steps that are one call from a request's row to its next row. */
const ONE_CALL_STEPS = {
  reserve: reserveStep,
  start: startStep,
  reconcile: reconcileStep,
  settle: settleStep,
} as const satisfies Partial<Record<Action, (ctx: OperationContext, row: RequestRow) => Promise<RequestRow>>>;

function isOneCall(action: Action): action is keyof typeof ONE_CALL_STEPS {
  return Object.hasOwn(ONE_CALL_STEPS, action);
}

export class OperationDriver {
  readonly #ctx: OperationContext;
  readonly #running = new Map<string, Promise<RequestRow>>();
  /** Requests whose drive waits on a reconciliation (executor-steps.ts reconcileOperation: asked again with backoff until a report proves the outcome). */
  readonly #reconciling = new Set<string>();
  /** Requests in submit(), between its call and their drive's start. */
  #logging = 0;

  constructor(ctx: OperationContext) {
    this.#ctx = ctx;
  }

  /** Requests being driven right now. */
  get active(): number {
    return this.#running.size;
  }

  /** Requests being driven right now or being logged to be (submit before its drive starts). */
  get driving(): number {
    return this.#running.size + this.#logging;
  }

  /**
   * Of those, the ones waiting on a reconciliation: an operation in doubt may
   * be asked about for hours (a tool that cannot see its resource, an
   * executor's host away), and such operations must not keep new work out
   * (api/request-bound.ts). They are listed for the operator.
   */
  get inDoubt(): number {
    return this.#reconciling.size;
  }

  isDriving(requestId: string): boolean {
    return this.#running.has(requestId);
  }

  /** Log a client request (or find the same one again) and carry it to its goal. */
  async submit(request: SubmitRequest): Promise<RequestRow> {
    // The binding of the very reserve request the kernel will be sent (kernel-steps.ts).
    const binding = bindRequest(reserveRequestOf(request)).request_binding_hash;
    // Counted from the call (before any await) until the drive below is in #running: api/request-bound.ts hands its place over.
    this.#logging++;
    let row: RequestRow;
    try {
      // Durable before the kernel hears of it (a grouped commit, shared/store/group-commit.ts).
      row = await this.#ctx.store.logRequestGrouped({
        request_id: request.request_id,
        operation_id: operationIdFor(request.request_id),
        kind: request.kind,
        tool: request.tool,
        subject: request.subject,
        arguments: JSON.stringify(request.arguments),
        cost_units: request.cost_units,
        binding_hash: binding,
      });
    } finally {
      this.#logging--;
    }
    if (row.binding_hash !== binding || row.kind !== request.kind) {
      throw new CustodyError('request_conflict', `request id ${request.request_id} was already used for a different ${row.kind} request; nothing was done for this one: give it an id of its own (a name you keep, so a retry finds it), or see the first with custody trace ${request.request_id}`);
    }
    return this.drive(row.request_id, request.kind);
  }

  /** Carry an existing request toward a goal. */
  drive(requestId: string, goal: Goal, options: { dropReply?: boolean } = {}): Promise<RequestRow> {
    const previous = this.#running.get(requestId) ?? Promise.resolve(null);
    const next = previous
      .catch(() => null)
      .then(() => this.#run(requestId, goal, options.dropReply ?? false))
      .finally(() => {
        if (this.#running.get(requestId) === next) {
          this.#running.delete(requestId);
          const row = this.#ctx.store.getRequest(requestId);
          this.#ctx.pool?.release(requestId, row?.report !== null && row?.report !== undefined);
        }
      });
    this.#running.set(requestId, next);
    return next;
  }

  /** Resume every request the log holds open (after a supervisor restart). */
  resumeAll(): void {
    for (const row of this.#ctx.store.openRequests()) {
      this.#ctx.log.info('request_resumed', { request_id: row.request_id, phase: row.phase, kind: row.kind });
      this.drive(row.request_id, 'resume').catch((error: unknown) => {
        this.#ctx.log.warn('resume_failed', { request_id: row.request_id, ...errorFields(error) });
      });
    }
  }

  /**
   * Walk a request to where its goal stops, then make durable whatever it
   * learned in memory on the way (ARCHITECTURE.md §6.6): an answer is given
   * only from a durable row. A stopping service's walk leaves its in-memory
   * moves unwritten; the next start asks again.
   */
  async #run(requestId: string, goal: Goal, dropReply: boolean): Promise<RequestRow> {
    const row = await this.#walk(requestId, goal, dropReply);
    return this.#ctx.signal.aborted ? row : this.#ctx.store.persist(row);
  }

  async #walk(requestId: string, goal: Goal, dropReply: boolean): Promise<RequestRow> {
    const ctx = this.#ctx;
    let row = this.#get(requestId);
    let carriedAs = goal;
    let executed = false;
    let worked = false;
    for (;;) {
      const action = stepFor(row.phase, carriedAs, row.kind);
      // A stopping service leaves an open request where it is; answers for ended or parked ones still stand.
      if (ctx.signal.aborted && !FINAL_PHASES.has(row.phase) && row.phase !== 'quarantined') return row;
      if (isOneCall(action)) {
        if (action === 'reconcile') this.#reconciling.add(requestId);
        try {
          row = await ONE_CALL_STEPS[action](ctx, row);
        } finally {
          this.#reconciling.delete(requestId);
        }
        worked = true;
        continue;
      }
      switch (action) {
        case 'execute':
          if (executed) return row;
          executed = true;
          if (row.executor) ctx.pool?.track(row.request_id, row.executor);
          row = await executeStep(ctx, row, { dropReply });
          break;
        case 'await_reconcile':
          row = await ctx.store.movePhaseGrouped(row.request_id, 'reconciling');
          break;
        case 'release':
          // Only on entry: a request this drive itself parked stays parked.
          if (worked) throw quarantinedError(row);
          row = ctx.store.releaseQuarantined(requestId);
          ctx.log.warn('quarantine_released', { request_id: requestId, phase: row.phase });
          carriedAs = goalAfterRelease(row.authorization !== null);
          break;
        case 'stop':
          return row;
        case 'replay_execute':
          return executed || !row.report ? row : this.#replayExecute(row);
        case 'reaffirm_receipt':
          return this.#reaffirmReceipt(row);
        case 'not_reported':
          throw new CustodyError('outcome_unknown', `${row.request_id} has no signed report yet (phase ${row.phase}); run it with custody execute ${row.request_id}, or close it with custody reconcile ${row.request_id}`);
        case 'quarantined':
          throw quarantinedError(row);
        default:
          throw new CustodyError('internal', `the drive table names a step the driver does not take: ${String(action satisfies never)}`);
      }
      worked = true;
    }
  }

  /** `report` on a request already at its end asks the kernel again, which must answer byte-identically. */
  async #reaffirmReceipt(row: RequestRow): Promise<RequestRow> {
    if (!row.authorization || !row.report || !row.receipt) return row;
    const again = await askKernel(this.#ctx, 'settle', { authorization: row.authorization, report: row.report });
    if (again.receipt !== row.receipt) {
      this.#ctx.store.recordIncident({ child: 'kernel', kind: 'receipt_mismatch', code: 'internal', message: `a repeated settle of ${row.request_id} returned different receipt bytes`, operation_id: row.operation_id });
      throw new CustodyError('internal', `the kernel's repeated receipt for ${row.request_id} differs from the retained one`);
    }
    return row;
  }

  /** Execute again after a report is retained: the executor must replay the identical bytes. */
  async #replayExecute(row: RequestRow): Promise<RequestRow> {
    if (!row.authorization || !row.executor) return row;
    const executor = this.#ctx.executorById(row.executor);
    const result = await executor.request('execute', {
      authorization: row.authorization,
      expected: expectedOf(row),
      arguments: JSON.parse(row.arguments) as JsonObject,
      drop_reply: false,
    });
    if (result.report !== row.report) {
      this.#ctx.store.recordIncident({ child: executor.name, kind: 'report_mismatch', code: 'internal', message: `a repeated execute of ${row.request_id} returned different report bytes`, operation_id: row.operation_id });
      throw new CustodyError('internal', `the executor's replayed report for ${row.request_id} differs from the retained one`);
    }
    return row;
  }

  #get(requestId: string): RequestRow {
    const row = this.#ctx.store.getRequest(requestId);
    if (!row) throw new CustodyError('operation_unknown', `no operation named ${requestId}`);
    return row;
  }
}
