// The steps that ask the kernel: reserve, start and settle. Each is
// idempotent on the kernel's side (request id and bytes), so a supervisor
// that died anywhere in a step repeats it and gets the retained answer.
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { type Invocation, authorizationBody } from '../../shared/protocol/artifacts.js';
import { type JsonObject } from '../../shared/protocol/common.js';
import { type RequestRow } from '../store/supervisor-store.js';
import { type OperationContext, askKernel } from './context.js';

export async function reserveStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  const result = await askKernel(ctx, 'reserve', {
    request_id: row.request_id,
    subject: row.subject,
    tool: row.tool,
    arguments: JSON.parse(row.arguments) as JsonObject,
    capability_id: null,
    cost_units: row.cost_units,
  });
  if (result.verdict === 'allow' && result.nonce) {
    return ctx.store.movePhase(row.request_id, 'reserved', {
      nonce_id: result.nonce.id,
      expected: JSON.stringify(result.expected),
      receipt: result.receipt ?? undefined,
    });
  }
  // A retried reserve of an operation that has moved on answers with its current state.
  if (result.verdict === 'allow') return afterKernelState(ctx, row, result.state, result.receipt, result.reason);
  return ctx.store.movePhase(row.request_id, 'refused', { outcome: result.state, reason: result.reason, receipt: result.receipt ?? undefined });
}

export async function startStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  if (!row.nonce_id) throw new Error(`request ${row.request_id} is reserved without a nonce`);
  const result = await askKernel(ctx, 'start', {
    request_id: row.request_id,
    nonce_id: row.nonce_id,
    arguments: JSON.parse(row.arguments) as JsonObject,
  });
  if (result.verdict === 'allow' && result.authorization) {
    return ctx.store.movePhase(row.request_id, 'authorized', {
      authorization: result.authorization,
      expected: JSON.stringify(result.expected ?? JSON.parse(row.expected ?? 'null')),
      executor: executorIdOf(result.authorization),
    });
  }
  return afterKernelState(ctx, row, result.state, result.receipt, result.reason);
}

/** Give the kernel the signed report; its receipt settles the request. */
export async function settleStep(ctx: OperationContext, row: RequestRow): Promise<RequestRow> {
  if (!row.authorization || !row.report) throw new Error(`request ${row.request_id} has no authorization or report to settle`);
  const result = await askKernel(ctx, 'reconcile', { authorization: row.authorization, report: row.report });
  return ctx.store.movePhase(row.request_id, 'settled', {
    outcome: result.state,
    reason: result.reason,
    receipt: result.receipt ?? undefined,
    output: result.output === null ? undefined : JSON.stringify(result.output),
  });
}

/** A kernel answer that is not the next step: record it as the end, or as refused. */
function afterKernelState(ctx: OperationContext, row: RequestRow, state: string, receipt: string | null, reason: string): RequestRow {
  const refusedStates = new Set(['denied', 'start_denied', 'expired']);
  if (refusedStates.has(state)) {
    return ctx.store.movePhase(row.request_id, 'refused', { outcome: state, reason, receipt: receipt ?? undefined });
  }
  return ctx.store.movePhase(row.request_id, 'settled', { outcome: state, reason, receipt: receipt ?? undefined });
}

export function executorIdOf(authorization: string): string {
  const { envelope } = readEnvelope(authorization);
  return authorizationBody.parse(envelope.body).executor.id;
}

export function expectedOf(row: RequestRow): Invocation {
  if (!row.expected) throw new Error(`request ${row.request_id} has no recorded expectation`);
  return JSON.parse(row.expected) as Invocation;
}
