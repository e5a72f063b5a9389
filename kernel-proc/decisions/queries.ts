// Reads: operation.get, ops.list, recover, grant.list. They run in the
// write queue too, after the batch's expiry sweep, so what they show is never
// a reservation whose nonce has already run out.
import { CustodyError } from '../../shared/errors.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { type RequestOf, type ResultOf } from '../../shared/protocol/messages.js';
import { type UnitContext } from '../commit-queue.js';
import { type Kernel } from '../kernel.js';
import { grantView, operationView } from '../views.js';

export function getOperation(kernel: Kernel, request: RequestOf<'operation.get'>): ResultOf<'operation.get'> {
  const byRequest = request.request_id === null ? null : operationIdFor(request.request_id);
  if (request.operation_id === null && byRequest === null) {
    throw new CustodyError('bad_request', 'operation.get needs an operation_id or a request_id');
  }
  if (request.operation_id !== null && byRequest !== null && request.operation_id !== byRequest) {
    throw new CustodyError('bad_request', `request id ${request.request_id} names operation ${byRequest}, not ${request.operation_id}`);
  }
  const operation = kernel.store.operations.get(request.operation_id ?? byRequest!);
  if (!operation) return { operation: null, receipts: [] };
  return {
    operation: operationView(kernel, operation),
    receipts: kernel.store.receipts.all(operation.operation_id).map((row) => row.receipt),
  };
}

export function listOperations(kernel: Kernel, request: RequestOf<'ops.list'>): ResultOf<'ops.list'> {
  return { operations: kernel.store.operations.list(request.states, request.limit).map((row) => operationView(kernel, row)) };
}

/** Committed starts, awaiting reports and unknowns: what a supervisor must drive to a signed end. */
export function recoverOperations(kernel: Kernel, request: RequestOf<'recover'>, context: UnitContext): ResultOf<'recover'> {
  return { operations: kernel.store.operations.inDoubt(request.limit).map((row) => operationView(kernel, row)), now: context.now };
}

export function listGrants(kernel: Kernel): ResultOf<'grant.list'> {
  return { grants: kernel.store.grants.all().map((row) => grantView(kernel, row)) };
}
