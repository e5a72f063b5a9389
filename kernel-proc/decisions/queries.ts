// Reads: operation.get, ops.list, recover, grant.list. They run in the
// write queue too, after the batch's expiry sweep, so what they show is never
// a reservation whose nonce has already run out.
import { CustodyError } from '../../shared/errors.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import { grantKeyOf } from '../store/grants-table.js';
import { operationKeyOf } from '../store/operations-table.js';
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
export const LIST_FRAME_ROOM_BYTES = 1024;

/**
 * Rows a page reads first, and at least each time after. A page stops at
 * what one frame carries (~400 operation views, ~3,000 listed operations):
 * reading all of `limit` (up to 10,000) to send a few hundred read and threw
 * away the rest, and a listing of 20,000 operations cost the kernel ~1 ms
 * each (docs/PERFORMANCE.md "A listing reads entries").
 */
export const PAGE_READ_ROWS = 256;

/**
 * One page of listed operations: each is its row's few columns
 * (listedOperation), so no report, receipt, hold or nonce is read for it.
 */
export function listOperations(kernel: Kernel, request: RequestOf<'ops.list'>): ResultOf<'ops.list'> {
  const { views, next_after } = fittingViews(
    kernel,
    (after, limit) => kernel.store.operations.list(request.states, limit, after),
    request.after,
    request.limit,
    (row) => row,
    operationKeyOf,
    (row) => `operation ${row.request_id}`,
  );
  return { operations: views, next_after };
}

/**
 * The views of the rows after `after` (at most `limit`) that fit one frame of
 * this session, and the key of the last one when more follow; `read(after,
 * n)` returns the next n rows in the listing's order. The first read asks
 * for `readRows` (PAGE_READ_ROWS), each next one for as many as the frame's
 * room holds at the mean size of the views so far (`readRows` at least),
 * each one row more to tell a last page from a full one; reading stops where
 * the frame is full. Few reads, not one per `readRows`: a listing by state
 * sorts the keys past `after` on each read (operations-table.ts). The reads
 * run in one synchronous turn of the kernel's write queue, so they see one
 * state. A view that does not fit one frame on its own is sent alone: the
 * channel answers frame_too_large for it (docs/PROTOCOL.md), and the caller
 * raises max_frame_bytes to list past it.
 */
export function fittingViews<Row, View, Key>(
  kernel: Pick<Kernel, 'maxFrameBytes' | 'log'>,
  read: (after: Key | null, limit: number) => readonly Row[],
  after: Key | null,
  limit: number,
  view: (row: Row) => View,
  key: (row: Row) => Key,
  name: (row: Row) => string,
  readRows = PAGE_READ_ROWS,
): { views: View[]; next_after: Key | null } {
  if (!(limit >= 1)) throw new CustodyError('internal', `a page of ${limit} entries would never end`);
  const views: View[] = [];
  let bytes = LIST_FRAME_ROOM_BYTES;
  let from = after;
  for (;;) {
    // The frame's room left, at the mean size of the views so far (none yet: readRows).
    const fitting = views.length === 0 ? readRows : Math.ceil((kernel.maxFrameBytes - bytes) / ((bytes - LIST_FRAME_ROOM_BYTES) / views.length));
    const wanted = Math.min(Math.max(readRows, fitting), limit - views.length);
    const rows = read(from, wanted + 1);
    for (const row of rows.slice(0, wanted)) {
      const made = view(row);
      // The frame encodes its body with JSON.stringify: this is the view's size there, and a comma.
      bytes += Buffer.byteLength(JSON.stringify(made), 'utf8') + 1;
      if (bytes > kernel.maxFrameBytes) {
        if (views.length > 0) return { views, next_after: from };
        kernel.log.warn('view_too_large', { what: name(row), max_frame_bytes: kernel.maxFrameBytes });
        return { views: [made], next_after: rows.length > 1 ? key(row) : null };
      }
      views.push(made);
      from = key(row);
    }
    if (rows.length <= wanted) return { views, next_after: null };
    if (views.length === limit) return { views, next_after: from };
  }
}

/** Committed starts, awaiting reports and unknowns, oldest first: what a supervisor must drive to a signed end. */
export function recoverOperations(kernel: Kernel, request: RequestOf<'recover'>, context: UnitContext): ResultOf<'recover'> {
  const { views, next_after } = fittingViews(
    kernel,
    (after, limit) => kernel.store.operations.inDoubt(limit, after),
    request.after,
    request.limit,
    (row) => operationView(kernel, row),
    operationKeyOf,
    (row) => `operation ${row.request_id}`,
  );
  return { operations: views, next_after, now: context.now };
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
  const { views, next_after } = fittingViews(
    kernel,
    (after, limit) => kernel.store.grants.page(request.live ? context.now : null, limit, after),
    request.after,
    request.limit,
    (row) => grantView(kernel, row),
    grantKeyOf,
    (row) => `grant ${row.capability_id}`,
  );
  return { grants: views, next_after };
}
