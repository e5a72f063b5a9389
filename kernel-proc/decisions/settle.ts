// settle (ARCHITECTURE.md §6.1): an authentic report settles its operation. An
// effect (completed, reconciled_applied) consumes the hold, charging the
// realized cost and releasing the rest; no effect (failed_before_effect,
// reconciled_not_applied, never_claimed) releases it, with the refusal's
// code as the reason when the executor refused the arguments. A report that breaks a
// settlement rule — a claim outside the window, a realized cost above the
// hold — is a finalization deny, flagged for an operator. The settlement and
// its receipt are retained: repeating the same settle returns the
// byte-identical receipt.
import { type SignedArtifact, artifactDigest } from '../../shared/artifacts/artifact.js';
import { canonicalDigest } from '../../shared/canonical/digest.js';
import { CustodyError, type ErrorCode } from '../../shared/errors.js';
import { EFFECT_APPLIED } from '../../shared/protocol/artifacts.js';
import type { JsonValue } from '../../shared/protocol/common.js';
import type { OperationState } from '../../shared/protocol/kernel-messages.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import { type HoldState, OPERATION_MACHINE, SETTLEABLE_STATES } from '../machines.js';
import type { HoldRow } from '../store/holds-table.js';
import type { ReceiptRow } from '../store/receipts-table.js';
import { nextReceiptSlot, recordReceipt, retainedDecision } from './receipts.js';
import { type AuthenticAuthorization, checkAuthorization, checkReport } from './report-check.js';

type SettleResult = ResultOf<'settle'>;

interface Outcome {
  /** The operation's hold as judged, before the settlement moves it. */
  readonly held: HoldRow;
  readonly state: OperationState;
  readonly verdict: 'allow' | 'deny';
  readonly reason: 'ok' | ErrorCode;
  readonly hold: Exclude<HoldState, 'reserved'>;
  readonly charged: number;
  readonly flag: string | null;
}

export function settle(kernel: Kernel, request: RequestOf<'settle'>, context: UnitContext): SettleResult {
  const authentic = checkAuthorization(kernel, request.authorization);
  const { operation } = authentic;
  const requestDigest = canonicalDigest({
    custody: 'custody.settle.v1',
    authorization_digest: authentic.authorization.digest,
    report_digest: artifactDigest(request.report),
  });
  // A repeated settle is recognised by its bytes first: the retained receipt, even if a pin moved on since.
  const answered = kernel.store.receipts.forRequest(operation.operation_id, requestDigest);
  if (answered) return settleReply(operation.operation_id, operation.output, answered);
  if (OPERATION_MACHINE.isTerminal(operation.state)) {
    throw new CustodyError(
      'operation_terminal',
      `operation ${operation.request_id} is already ${operation.state}; another report cannot settle it again`,
    );
  }
  if (!SETTLEABLE_STATES.includes(operation.state)) {
    throw new CustodyError('illegal_transition', `operation ${operation.request_id} is ${operation.state}; only a committed start is settled`);
  }
  const report = checkReport(kernel, authentic, request.report);
  return recordSettlement(kernel, authentic, report, requestDigest, context);
}

function judge(kernel: Kernel, authentic: AuthenticAuthorization, report: SignedArtifact<'report'>): Outcome {
  const { not_before: opens, expires_at: closes } = authentic.authorization.body;
  const body = report.body;
  const held = kernel.store.holds.forOperation(authentic.operation.operation_id)!;
  const applied = EFFECT_APPLIED.has(body.status);
  if (body.claimed_at !== null && (body.claimed_at < opens || body.claimed_at >= closes)) {
    // The executor claimed outside its window: whatever it did was not authorized. An effect still uses the budget.
    return {
      held,
      state: 'finalization_denied',
      verdict: 'deny',
      reason: 'report_outside_window',
      hold: applied ? 'consumed' : 'released',
      charged: applied ? held.cost_units_held : 0,
      flag: `report_outside_window: claimed at ${body.claimed_at}, window [${opens}, ${closes}); status ${body.status}`,
    };
  }
  // Arguments the executor refused before any claim: the receipt's reason is the refusal's code (checked in report-check).
  if (!applied) return { held, state: 'released', verdict: 'allow', reason: (body.refusal?.code as ErrorCode | undefined) ?? 'ok', hold: 'released', charged: 0, flag: null };
  // A report without a realized cost is charged the whole hold: the executor did not say it cost less.
  const realized = body.realized_cost_units ?? held.cost_units_held;
  if (realized > held.cost_units_held) {
    return {
      held,
      state: 'finalization_denied',
      verdict: 'deny',
      reason: 'cost_exceeded',
      hold: 'consumed',
      charged: held.cost_units_held,
      flag: `cost_exceeded: realized ${realized} cost units, hold ${held.cost_units_held}; ${realized - held.cost_units_held} not charged`,
    };
  }
  return { held, state: 'completed', verdict: 'allow', reason: 'ok', hold: 'consumed', charged: realized, flag: null };
}

function recordSettlement(
  kernel: Kernel,
  authentic: AuthenticAuthorization,
  report: SignedArtifact<'report'>,
  requestDigest: string,
  context: UnitContext,
): SettleResult {
  const { store } = kernel;
  const { now } = context;
  const { operation } = authentic;
  const outcome = judge(kernel, authentic, report);
  const slot = nextReceiptSlot(kernel, operation.operation_id);
  const output = outcome.state === 'completed' && report.body.output !== null ? JSON.stringify(report.body.output) : null;
  store.operations.settle(operation, outcome.state, { report: report.text, report_digest: report.digest, flag: outcome.flag }, now);
  store.holds.settle(outcome.held, outcome.hold, outcome.charged, now, slot.id);
  const receipt = recordReceipt(
    kernel,
    operation,
    slot,
    {
      decision: outcome.verdict === 'allow' ? 'completion' : 'finalization',
      verdict: outcome.verdict,
      reason: outcome.reason,
      state: outcome.state,
      hold: store.holds.forOperation(operation.operation_id),
      requestDigest,
      authorizationDigest: authentic.authorization.digest,
      reportDigest: report.digest,
      outputDigest: report.body.output_digest,
    },
    now,
  );
  context.whenCommitted(() =>
    kernel.log[outcome.verdict === 'allow' ? 'info' : 'warn']('operation_settled', { operation_id: operation.operation_id, status: report.body.status, state: outcome.state, reason: outcome.reason, flag: outcome.flag }),
  );
  context.afterCommit('after_settle_commit');
  // The output as a repeated settle reads it back from the stored report.
  return settleReply(operation.operation_id, output, receipt);
}

/** The settle answer from the retained receipt and the operation's output (JSON text, read from its report). */
function settleReply(operationId: string, storedOutput: string | null, receipt: ReceiptRow): SettleResult {
  return {
    ...retainedDecision(operationId, receipt),
    // The guarded value is handed out only with an allowed, completed settlement.
    output: receipt.state === 'completed' && storedOutput !== null ? (JSON.parse(storedOutput) as JsonValue) : null,
  };
}
