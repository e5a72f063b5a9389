// Expiry of reservations whose nonce outlived its TTL (ARCHITECTURE.md §6.1): the
// operation becomes `expired`, the nonce `expired`, the hold is released, and
// a signed expiry receipt says so. Runs before every batch of requests (lazily,
// on access) and on a timer. Only a `reserved` operation expires, and
// `expired` is terminal, so a late start can never release the hold again
// (race H1 (ARCHITECTURE.md §6.5)).
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import type { NonceRow } from '../store/nonces-table.js';
import type { OperationRow } from '../store/operations-table.js';
import { nextReceiptSlot, recordReceipt } from './receipts.js';

export function expireOperation(kernel: Kernel, operation: OperationRow, nonce: NonceRow, now: number): void {
  const { store } = kernel;
  const slot = nextReceiptSlot(kernel, operation.operation_id);
  store.operations.move(operation, 'expired', now);
  store.nonces.close(nonce, 'expired', now);
  const hold = store.holds.forOperation(operation.operation_id);
  if (hold) store.holds.settle(hold, 'released', 0, now, slot.id);
  recordReceipt(
    kernel,
    operation,
    slot,
    {
      decision: 'expiry',
      verdict: 'deny',
      reason: 'nonce_expired',
      state: 'expired',
      hold: store.holds.forOperation(operation.operation_id),
      requestDigest: null,
    },
    now,
  );
}

/** Expire every reservation whose nonce has run out; returns how many. */
export function sweepExpired(kernel: Kernel, context: UnitContext): number {
  const { store } = kernel;
  const due = store.nonces.expired(context.now, kernel.settings.nonce_capacity);
  for (const nonce of due) {
    const operation = store.operations.get(nonce.operation_id)!;
    expireOperation(kernel, operation, nonce, context.now);
  }
  if (due.length > 0) {
    context.whenCommitted(() => kernel.log.info('reservations_expired', { count: due.length }));
    context.afterCommit('after_sweep_commit');
  }
  return due.length;
}
