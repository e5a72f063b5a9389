// Reads: operation.get, ops.list, recover, grant.list. They run in the
// write queue too, after the batch's expiry sweep, so what they show is never
// a reservation whose nonce has already run out.
import { CustodyError } from '../../shared/errors.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import type { OperationKey, OperationView } from '../../shared/protocol/kernel-messages.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import { grantKeyOf } from '../store/grants-table.js';
import { type OperationRow, operationKeyOf } from '../store/operations-table.js';
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

/** Room in a frame for its envelope and the result's other members. */
const LIST_FRAME_ROOM_BYTES = 1024;

/**
 * One page of operations. A view carries an authorization, a receipt and the
 * output, so 10 000 of them are megabytes: the page stops at what one frame
 * of this session carries, and next_after is the key of its last operation.
 */
export function listOperations(kernel: Kernel, request: RequestOf<'ops.list'>): ResultOf<'ops.list'> {
  // One row past the limit tells a last page from a full one.
  const rows = kernel.store.operations.list(request.states, request.limit + 1, request.after);
  return framePage(kernel, rows, request.limit);
}

/** Cut rows to the views that fit one frame of this session, with the key the next page starts after. */
function framePage(kernel: Kernel, rows: readonly OperationRow[], limit: number): { operations: OperationView[]; next_after: OperationKey | null } {
  const { views, next_after } = fittingViews(kernel, rows, limit, (row) => operationView(kernel, row), operationKeyOf, (row) => `operation ${row.request_id}`);
  return { operations: views, next_after };
}

/**
 * The views of `rows` (at most `limit`; one more row than that says a page
 * is not the last) that fit one frame of this session, and the key of the
 * last one when more follow. A view that does not fit one frame on its own
 * is sent alone: the channel answers frame_too_large for it
 * (docs/PROTOCOL.md), and the caller raises max_frame_bytes to list past it.
 */
function fittingViews<Row, View, Key>(
  kernel: Kernel,
  rows: readonly Row[],
  limit: number,
  view: (row: Row) => View,
  key: (row: Row) => Key,
  name: (row: Row) => string,
): { views: View[]; next_after: Key | null } {
  const views: View[] = [];
  let bytes = LIST_FRAME_ROOM_BYTES;
  for (const row of rows.slice(0, limit)) {
    const made = view(row);
    // The frame encodes its body with JSON.stringify: this is the view's size there, and a comma.
    bytes += Buffer.byteLength(JSON.stringify(made), 'utf8') + 1;
    if (bytes > kernel.maxFrameBytes) break;
    views.push(made);
  }
  if (views.length === 0 && rows.length > 0) {
    kernel.log.warn('view_too_large', { what: name(rows[0]!), max_frame_bytes: kernel.maxFrameBytes });
    views.push(view(rows[0]!));
  }
  return { views, next_after: views.length < rows.length ? key(rows[views.length - 1]!) : null };
}

/** Committed starts, awaiting reports and unknowns, oldest first: what a supervisor must drive to a signed end. */
export function recoverOperations(kernel: Kernel, request: RequestOf<'recover'>, context: UnitContext): ResultOf<'recover'> {
  const rows = kernel.store.operations.inDoubt(request.limit + 1, request.after);
  return { ...framePage(kernel, rows, request.limit), now: context.now };
}

/**
 * One page of grants, newest first. Grants are never deleted, and a service
 * that grants per session piles up expired ones: the live ones are read
 * through grants_expiry (kernel.db version 8), every grant through
 * grants_by_issue from the last page's key (version 9), and a page stops at
 * what one frame carries, where the whole list in one answer failed past
 * ~1,500 grants.
 */
export function listGrants(kernel: Kernel, request: RequestOf<'grant.list'>, context: UnitContext): ResultOf<'grant.list'> {
  const rows = kernel.store.grants.page(request.live ? context.now : null, request.limit + 1, request.after);
  const { views, next_after } = fittingViews(kernel, rows, request.limit, (row) => grantView(kernel, row), grantKeyOf, (row) => `grant ${row.capability_id}`);
  return { grants: views, next_after };
}
