// The steps that ask the kernel: reserve, start and settle. Each is
// idempotent on the kernel's side (request id and bytes), so a supervisor
// that died anywhere in a step repeats it and gets the retained answer.
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { CustodyError, isCustodyError } from '../../shared/errors.js';
import { crashPoint } from '../../shared/fault.js';
import { type Invocation, answeredOutput, authorizationBody } from '../../shared/protocol/artifacts.js';
import { type BoundRequest, parametersDigest } from '../../shared/protocol/binding.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import type { OperationState } from '../../shared/protocol/kernel-messages.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { RequestRow } from '../store/supervisor-store.js';
import { type OperationContext, askKernel } from './context.js';
import { REFUSED_STATES, SETTLED_STATES } from './outcome.js';

/** The reserve request the supervisor sends for a client request: the one its logged binding is computed from. */
export function reserveRequestOf(request: Omit<BoundRequest, 'capability_id'>): RequestOf<'reserve'> {
  return { request_id: request.request_id, subject: request.subject, tool: request.tool, arguments: request.arguments, capability_id: null, cost_units: request.cost_units };
}

/**
 * Reserve and start in one exchange (`reserve_start`, docs/PROTOCOL.md §6):
 * the supervisor writes nothing durable between the two decisions, so the
 * kernel takes both in one transaction, one commit and one round trip
 * fewer than the two messages (docs/PERFORMANCE.md, "Stop 19: reserve and
 * start in one exchange"). Each answer is handled as its own message's would be.
 */
export async function reserveStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  const chosen = await pickExecutor(ctx, row);
  const answer = await askKernel(
    ctx,
    'reserve_start',
    {
      ...reserveRequestOf({ ...row, arguments: JSON.parse(row.arguments) as JsonObject }),
      ...(chosen ? { executor_id: chosen.identityId } : {}),
      // The kernel starts it only if it reserved it under this binding (kernel-proc/decisions/reserve-start.ts).
      request_binding_hash: row.binding_hash,
    },
    row.request_id,
  );
  const reserved = answer.reserve;
  if (reserved.verdict !== 'allow' || !reserved.nonce || !reserved.expected) return afterKernelState(ctx, row, reserved.state, reserved.receipt, reserved.reason);
  if (chosen && answer.start?.verdict === 'allow') ctx.pool!.track(row.request_id, chosen.identityId, true);
  checkExpectation(ctx, row, reserved.expected);
  // In memory until the attempt is written: a repeated reserve answers the same (ARCHITECTURE.md §6.6).
  // The expectation is checked here and not kept: after the start it is the authorization's own invocation (expectedOf).
  const reservedRow = ctx.store.movePhaseLater(row.request_id, 'reserved', { nonce_id: reserved.nonce.id, receipt: reserved.receipt ?? undefined });
  // An allowed reserve always comes with its start; without one, the start step asks for it.
  return answer.start ? afterStart(ctx, reservedRow, answer.start) : reservedRow;
}

export async function startStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  if (!row.nonce_id) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} is reserved without a nonce`);
  const chosen = await pickExecutor(ctx, row);
  if (chosen) ctx.pool!.track(row.request_id, chosen.identityId, true);
  const result = await askKernel(ctx, 'start', {
    request_id: row.request_id,
    nonce_id: row.nonce_id,
    arguments: JSON.parse(row.arguments) as JsonObject,
    ...(chosen ? { executor_id: chosen.identityId } : {}),
  }, row.request_id);
  return afterStart(ctx, row, result);
}

/**
 * The executor a start is addressed to: any running executor of the tool
 * (children/pool.ts), counted in flight on it at once so that concurrent
 * requests see each other's choice; counted as routed to it by the caller
 * once the start is asked or allowed.
 */
async function pickExecutor(ctx: OperationContext, row: RequestRow) {
  const chosen = await ctx.pool?.pick(row.tool, ctx.signal);
  if (chosen) ctx.pool!.track(row.request_id, chosen.identityId);
  return chosen;
}

/** A start's answer: its authorization adopted, or the state it left the operation in. */
function afterStart(ctx: OperationContext, row: RequestRow, result: ResultOf<'start'>): Promise<RequestRow> | RequestRow {
  if (result.verdict === 'allow' && result.authorization) return adoptAuthorization(ctx, row, result.authorization);
  return afterKernelState(ctx, row, result.state, result.receipt, result.reason);
}

/** Give the kernel the signed report; its receipt settles the request. */
export async function settleStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  if (!row.authorization || !row.report) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} has no authorization or report to settle`);
  const result = await settleReport(ctx, row.authorization, row.report, row.request_id);
  // The kernel settled it; this supervisor has not recorded that yet.
  crashPoint('supervisor', 'after_report_forwarded');
  const output = JSON.stringify(result.output ?? null);
  return ctx.store.movePhaseGrouped(row.request_id, 'settled', {
    outcome: result.state,
    reason: result.reason,
    receipt: result.receipt ?? undefined,
    // Not stored a second time when the report gives the same (outcome.ts outputOf).
    output: output === JSON.stringify(answeredOutput(result.state, row.report)) ? undefined : output,
  });
}

/**
 * Give the kernel a report to settle. A report signed under an executor key
 * epoch the kernel has not pinned yet (epoch_unpinned: the executor rotated
 * and its statement has not reached the kernel, a rotation under way or cut
 * by a crash) is given again once the statements are carried (rotation.ts).
 */
export async function settleReport(ctx: OperationContext, authorization: string, report: string, requestId?: string) {
  try {
    return await askKernel(ctx, 'settle', { authorization, report }, requestId);
  } catch (error) {
    if (!isCustodyError(error, 'epoch_unpinned') || !ctx.catchUpPin) throw error;
    await ctx.catchUpPin(executorIdOf(authorization));
    return askKernel(ctx, 'settle', { authorization, report }, requestId);
  }
}

/**
 * Record a signed authorization, after checking that it binds exactly the
 * request the client made: the authorization cannot choose its own
 * expectation (ARCHITECTURE.md §6.2), so the supervisor derives it from its own log.
 */
function adoptAuthorization(ctx: OperationContext, row: RequestRow, authorization: string): RequestRow {
  const body = authorizationBody.parse(readEnvelope(authorization).envelope.body);
  checkExpectation(ctx, row, body.invocation);
  // A retried start gets the first authorization: the operation is bound to the executor it names.
  ctx.pool?.track(row.request_id, body.executor.id);
  // In memory until the attempt is written (before the execute frame) or the drive stops here (ARCHITECTURE.md §6.6).
  return ctx.store.movePhaseLater(row.request_id, 'authorized', { authorization, executor: body.executor.id });
}

function checkExpectation(ctx: OperationContext, row: RequestRow, invocation: Invocation): void {
  const mine = {
    operation_id: row.operation_id,
    request_id: row.request_id,
    request_binding_hash: row.binding_hash,
    tool: row.tool,
    parameters_digest: parametersDigest(JSON.parse(row.arguments) as JsonObject),
  };
  const differs = (Object.keys(mine) as Array<keyof typeof mine>).filter((key) => invocation[key] !== mine[key]);
  if (differs.length === 0) return;
  ctx.store.recordIncident({ child: 'kernel', kind: 'invocation_mismatch', code: 'invocation_mismatch', message: `the kernel's invocation for ${row.request_id} differs in ${differs.join(', ')}; nothing was executed`, operation_id: row.operation_id });
  throw new CustodyError('invocation_mismatch', `the kernel bound ${row.request_id} to another invocation (${differs.join(', ')}); it is not executed — an operator must look: custody trace ${row.request_id}`);
}

/**
 * A kernel answer that is not the next step. A refusal or a settlement is
 * the end; a committed start the supervisor lost track of (its log is
 * behind the kernel) is picked up from the kernel's own record of it.
 */
async function afterKernelState(ctx: OperationContext, row: RequestRow, state: OperationState, receipt: string | null, reason: string): Promise<RequestRow> {
  if (REFUSED_STATES.has(state)) return ctx.store.movePhaseGrouped(row.request_id, 'refused', { outcome: state, reason, receipt: receipt ?? undefined });
  if (SETTLED_STATES.has(state)) return ctx.store.movePhaseGrouped(row.request_id, 'settled', { outcome: state, reason, receipt: receipt ?? undefined });
  const { operation } = await askKernel(ctx, 'operation.get', { operation_id: row.operation_id, request_id: null }, row.request_id);
  if (operation?.authorization) return adoptAuthorization(ctx, row, operation.authorization);
  throw new CustodyError('outcome_unknown', `the kernel holds ${row.request_id} as ${state} (${reason}) with no authorization to carry on with; see custody trace ${row.request_id}`);
}

/**
 * The invocation the executor must see (ARCHITECTURE.md §6.2): the
 * authorization's own, which adoptAuthorization checked against this log
 * before keeping it. It is not stored a second time (`expected` holds it
 * only in rows written before that, docs/PERFORMANCE.md).
 */
export function expectedOf(row: RequestRow): Invocation {
  if (row.authorization) return authorizationBody.parse(readEnvelope(row.authorization).envelope.body).invocation;
  if (!row.expected) throw new CustodyError('internal', `supervisor.db: request ${row.request_id} has no authorization to take its expectation from`);
  return JSON.parse(row.expected) as Invocation;
}

export function executorIdOf(authorization: string): string {
  return authorizationBody.parse(readEnvelope(authorization).envelope.body).executor.id;
}
