// reserve (ARCHITECTURE.md §6.1): check the request against its grant, the bounds,
// the budget and the nonce store; allowed, one transaction records the
// operation, its budget hold, an execution nonce and the signed receipt.
// Denied, the operation is recorded as `denied` with its receipt and no hold.
// Either way the answer is retained: the same request id with the same
// request bytes gets it back byte for byte; with other bytes, request_conflict.
import { randomHex } from '../../shared/random-hex.js';
import { canonicalBytes } from '../../shared/canonical/jcs.js';
import { CustodyError, type ErrorCode } from '../../shared/errors.js';
import { bindRequest, operationIdFor } from '../../shared/protocol/binding.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { crashPoint } from '../../shared/fault.js';
import type { UnitContext } from '../commit-queue.js';
import { chooseGrant } from '../grants.js';
import type { Kernel } from '../kernel.js';
import { executorFor } from '../pins.js';
import { argumentBytesFor } from '../../shared/protocol/kernel-settings.js';
import type { GrantRow } from '../store/grants-table.js';
import type { OperationRow } from '../store/operations-table.js';
import { expectedOf } from '../views.js';
import { nextReceiptSlot, recordReceipt, retainedDecision } from './receipts.js';

type ReserveRequest = RequestOf<'reserve'>;
type ReserveResult = ResultOf<'reserve'>;

interface Denial {
  readonly reason: ErrorCode;
  readonly message: string;
  readonly grant: GrantRow | null;
  readonly capabilityId: string | null;
}

interface Admission {
  readonly grant: GrantRow;
  readonly executorId: string;
}

export function reserve(kernel: Kernel, request: ReserveRequest, context: UnitContext): ReserveResult {
  const { parameters_digest: parameters, request_binding_hash: binding } = bindRequest(request);
  const operationId = operationIdFor(request.request_id);
  const existing = kernel.store.operations.get(operationId);
  if (existing) {
    if (existing.request_binding_hash !== binding) {
      throw new CustodyError(
        'request_conflict',
        `request id ${request.request_id} was reserved with other request bytes (binding ${existing.request_binding_hash.slice(0, 16)}…, ` +
          `this request ${binding.slice(0, 16)}…); a changed request needs a new request id`,
      );
    }
    return reserveReply(kernel, existing);
  }

  const { now } = context;
  const judged = admit(kernel, request, now);
  const denied = 'reason' in judged;
  kernel.store.operations.insert({
    operation_id: operationId,
    request_id: request.request_id,
    request_binding_hash: binding,
    subject: request.subject,
    tool: request.tool,
    parameters_digest: parameters,
    cost_units: request.cost_units,
    capability_id: judged.grant?.capability_id ?? null,
    capability_digest: judged.grant?.capability_digest ?? null,
    executor_id: denied ? null : judged.executorId,
    state: denied ? 'denied' : 'reserved',
    created_at: now,
  });
  const operation = kernel.store.operations.get(operationId)!;
  const slot = nextReceiptSlot(kernel, operationId);
  if (denied) {
    context.whenCommitted(() => kernel.log.info('reserve_denied', { operation_id: operationId, request_id: request.request_id, reason: judged.reason, message: judged.message }));
    recordReceipt(
      kernel,
      operation,
      slot,
      { decision: 'reserve', verdict: 'deny', reason: judged.reason, state: 'denied', hold: undefined, requestDigest: binding, capabilityId: judged.capabilityId },
      now,
    );
  } else {
    const hold = kernel.store.holds.place(operationId, judged.grant.capability_id, request.cost_units, now);
    kernel.store.nonces.mint(`n-${randomHex(16)}`, operationId, now, now + kernel.settings.nonce_ttl_ms);
    recordReceipt(kernel, operation, slot, { decision: 'reserve', verdict: 'allow', reason: 'ok', state: 'reserved', hold, requestDigest: binding }, now);
  }
  // A kill here must leave no trace of the reservation: the transaction never committed.
  crashPoint('kernel', 'inside_reserve_transaction');
  context.afterCommit('after_reserve_commit');
  return reserveReply(kernel, operation);
}

/** The checks, cheapest first; the first that fails names the denial. */
function admit(kernel: Kernel, request: ReserveRequest, now: number): Denial | Admission {
  const argumentBytes = canonicalBytes(request.arguments).length;
  const bound = argumentBytesFor(kernel.settings, request.tool);
  if (argumentBytes > bound) {
    return {
      reason: 'arguments_too_large',
      message: `arguments of ${request.tool} are ${argumentBytes} bytes (RFC 8785); the bound is ${bound}`,
      grant: null,
      capabilityId: request.capability_id,
    };
  }
  const choice = chooseGrant(kernel, request, now);
  if (choice.refusal) return { ...choice.refusal, grant: choice.grant, capabilityId: choice.capabilityId };
  const executor = executorFor(kernel, request.tool, operationIdFor(request.request_id));
  if (!executor) {
    return { reason: 'tool_unknown', message: `no pinned executor serves ${request.tool}`, grant: choice.grant, capabilityId: choice.grant.capability_id };
  }
  // Capacity counts live nonces only; a live nonce is never evicted to make room.
  const live = kernel.store.nonces.countLive();
  if (live >= kernel.settings.nonce_capacity) {
    return {
      reason: 'nonce_store_full',
      message: `${live} execution nonces are live; nonce_capacity is ${kernel.settings.nonce_capacity}`,
      grant: choice.grant,
      capabilityId: choice.grant.capability_id,
    };
  }
  return { grant: choice.grant, executorId: executor.executor_id };
}

/** The reserve answer, rebuilt from what was retained: identical for every retry. */
export function reserveReply(kernel: Kernel, operation: OperationRow): ReserveResult {
  const receipt = kernel.store.receipts.forRequest(operation.operation_id, operation.request_binding_hash);
  if (!receipt) throw new CustodyError('internal', `operation ${operation.operation_id} has no retained reserve receipt`);
  const nonce = receipt.verdict === 'allow' ? kernel.store.nonces.forOperation(operation.operation_id) : undefined;
  return {
    ...retainedDecision(operation.operation_id, receipt),
    nonce: nonce ? { id: nonce.nonce_id, expires_at: nonce.expires_at } : null,
    expected: receipt.verdict === 'allow' ? expectedOf(operation) : null,
  };
}
