// mark_unknown: the supervisor's reconciliation proved nothing (the adapter
// said indeterminate). The operation leaves the committed start for
// `unknown` with a signed receipt; its hold stays reserved (ARCHITECTURE.md §6.4:
// unknown ⇒ hold held) and a report retained later still settles it (H4a, ARCHITECTURE.md §6.5).
import { CustodyError } from '../../shared/errors.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import { OPERATION_MACHINE } from '../machines.js';
import { operationView } from '../views.js';
import { nextReceiptSlot, recordReceipt } from './receipts.js';

export function markUnknown(kernel: Kernel, request: RequestOf<'mark_unknown'>, context: UnitContext): ResultOf<'mark_unknown'> {
  const { store } = kernel;
  const operation = store.operations.get(request.operation_id);
  if (!operation) throw new CustodyError('operation_unknown', `no operation ${request.operation_id}`);
  // Already unknown, or settled meanwhile (a report won the race): nothing to mark; the view says where it stands.
  if (operation.state === 'unknown' || OPERATION_MACHINE.isTerminal(operation.state)) {
    return { operation: operationView(kernel, operation) };
  }
  const { now } = context;
  const slot = nextReceiptSlot(kernel, operation.operation_id);
  const flag = request.reason.trim() === '' ? 'outcome unknown: reconciliation proved nothing' : request.reason;
  store.operations.move(operation, 'unknown', now, flag);
  recordReceipt(
    kernel,
    operation,
    slot,
    {
      decision: 'unknown',
      verdict: 'deny',
      reason: 'outcome_unknown',
      state: 'unknown',
      hold: store.holds.forOperation(operation.operation_id),
      requestDigest: null,
      authorizationDigest: operation.authorization_digest,
    },
    now,
  );
  context.whenCommitted(() => kernel.log.warn('operation_unknown', { operation_id: operation.operation_id, reason: flag }));
  context.afterCommit('after_mark_unknown_commit');
  return { operation: operationView(kernel, store.operations.get(operation.operation_id)!) };
}
