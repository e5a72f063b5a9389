// Signing and retaining receipts. Every decision about an operation leaves
// one, kernel-signed and kept as its exact bytes; replies quote those bytes,
// so a replay is byte-identical and never re-signed.
import { signArtifact } from '../../shared/artifacts/artifact.js';
import { CustodyError, type ErrorCode } from '../../shared/errors.js';
import type { ReceiptBody } from '../../shared/protocol/artifacts.js';
import type { OperationState } from '../../shared/protocol/kernel-messages.js';
import type { Kernel } from '../kernel.js';
import { receiptsStillNeeded } from '../machines.js';
import type { HoldRow } from '../store/holds-table.js';
import type { OperationRow } from '../store/operations-table.js';
import type { ReceiptDecision, ReceiptRow } from '../store/receipts-table.js';

/** The next receipt of an operation: its number and id. The id is known before signing so a hold can name it. */
export interface ReceiptSlot {
  readonly seq: number;
  readonly id: string;
}

export function nextReceiptSlot(kernel: Kernel, operationId: string): ReceiptSlot {
  const seq = kernel.store.receipts.count(operationId) + 1;
  return { seq, id: `r:${operationId}:${seq}` };
}

export interface ReceiptInput {
  readonly decision: ReceiptDecision;
  readonly verdict: 'allow' | 'deny';
  readonly reason: 'ok' | ErrorCode;
  /** The operation state after the decision. */
  readonly state: OperationState;
  /** The hold after the decision; undefined when none was placed. */
  readonly hold: HoldRow | undefined;
  /** The request this receipt answers (a retry with the same digest gets it back); null for the sweep and marks. */
  readonly requestDigest: string | null;
  /** The capability named in the receipt when it differs from the operation's (a denied, unknown id). */
  readonly capabilityId?: string | null;
  readonly authorizationDigest?: string | null;
  readonly reportDigest?: string | null;
  readonly outputDigest?: string | null;
}

function holdOf(hold: HoldRow | undefined): ReceiptBody['hold'] {
  if (!hold) return { id: null, disposition: 'none', invocations: 0, cost_units_held: 0, cost_units_charged: 0 };
  return {
    id: hold.hold_id,
    disposition: hold.state,
    invocations: hold.invocations,
    cost_units_held: hold.cost_units_held,
    cost_units_charged: hold.cost_units_charged,
  };
}

/** Sign a receipt for `operation` and retain it in the slot taken for it. */
export function recordReceipt(kernel: Kernel, operation: OperationRow, slot: ReceiptSlot, input: ReceiptInput, now: number): ReceiptRow {
  const body: ReceiptBody = {
    receipt_id: slot.id,
    decision: input.decision,
    verdict: input.verdict,
    reason: input.reason,
    operation_id: operation.operation_id,
    request_id: operation.request_id,
    request_binding_hash: operation.request_binding_hash,
    tool: operation.tool,
    parameters_digest: operation.parameters_digest,
    capability_id: input.capabilityId === undefined ? operation.capability_id : input.capabilityId,
    state: input.state,
    hold: holdOf(input.hold),
    authorization_digest: input.authorizationDigest ?? null,
    report_digest: input.reportDigest ?? null,
    output_digest: input.outputDigest ?? null,
    issued_at: now,
  };
  const signed = signArtifact('receipt', body, kernel.signer);
  const row: ReceiptRow = {
    receipt_id: slot.id,
    operation_id: operation.operation_id,
    seq: slot.seq,
    decision: input.decision,
    verdict: input.verdict,
    reason: input.reason,
    state: input.state,
    hold_disposition: body.hold.disposition,
    request_digest: input.requestDigest,
    issued_at: now,
    receipt: signed.text,
  };
  kernel.store.receipts.insert(row);
  return row;
}

/**
 * A refusal that leaves the operation as it is still costs a retained
 * receipt. The history bound keeps room for the receipts the operation's life
 * cycle may still need (receiptsStillNeeded), so such refusals stop, with
 * history_full and nothing signed, before they could crowd out a settlement.
 */
export function assertHistoryRoom(kernel: Kernel, operation: OperationRow): void {
  const held = kernel.store.receipts.count(operation.operation_id);
  const bound = kernel.settings.history_per_operation;
  if (held + 1 + receiptsStillNeeded(operation.state) > bound) {
    throw new CustodyError(
      'history_full',
      `operation ${operation.operation_id} (${operation.request_id}) holds ${held} receipts; kernel.settings.history_per_operation is ${bound} ` +
        `and ${receiptsStillNeeded(operation.state)} stay reserved for its settlement, so this refusal is not retained`,
    );
  }
}

/** The decision members of an answer rebuilt from a retained receipt: identical for every retry of the request. */
export function retainedDecision(operationId: string, receipt: ReceiptRow): Pick<ReceiptRow, 'verdict' | 'reason' | 'state' | 'receipt'> & { operation_id: string } {
  return { operation_id: operationId, verdict: receipt.verdict, reason: receipt.reason, state: receipt.state, receipt: receipt.receipt };
}
