// reconcile_operation (ARCHITECTURE.md §6.2): say, with a signed report, what became
// of an authorization, without ever running its effect.
//   a retained report        → replay it (H5, ARCHITECTURE.md §6.5);
//   a claim with no report   → ask the adapter; retain reconciled_applied or
//                              reconciled_not_applied, or answer
//                              indeterminate and keep the claim;
//   nothing at all           → ask the adapter first when it can reconcile
//                              (a durable one fences): "applied" contradicts
//                              the ledger (one restored from a backup with the
//                              other stores, docs/ROLLBACK.md), so nothing is
//                              signed and it stays in doubt; otherwise record a
//                              refusal under the claims' unique key and sign
//                              never_claimed, window open or not (H4b,
//                              ARCHITECTURE.md §6.5), so no claim can follow
//                              and the kernel can release the hold.
import { CustodyError } from '../../shared/errors.js';
import { crashPoint } from '../../shared/fault.js';
import type { RequestOf } from '../../shared/protocol/messages.js';
import { AdapterHost } from '../adapters/host-client.js';
import { type VerifiedAuthorization, verifyAuthorization } from '../authorization.js';
import { type ExecutorContext, deadlineFor, effectRunning, withinDeadline } from '../context.js';
import type { OperationRecord } from '../ledger/records.js';
import type { AdapterDescriptor } from '../adapters/contract.js';
import { reportSigner } from '../report.js';
import { type ReportAnswer, replayable, retainObservation } from './answers.js';
import { epochRetired } from './execute.js';
import { cutText, wellFormedValue } from '../../shared/text/cut.js';
import { REPORT_REFUSAL_MESSAGE_MAX_CHARS } from '../../shared/protocol/artifacts.js';

export async function reconcileOperation(context: ExecutorContext, body: RequestOf<'reconcile_operation'>): Promise<ReportAnswer> {
  const verified = verifyAuthorization(body.authorization, body.expected, context.ledger);
  const known = context.ledger.records.find(verified.subject.operationId);
  if (known) return replayable(known, verified) ?? askAdapter(context, verified, known);

  const { config } = context.ledger;
  // Never claimed under an epoch a rotation retired: the report says so (the kernel's receipt carries epoch_retired).
  const retired = context.ledger.retiredReason(verified.subject.signedUnder);
  if (!retired) await worldAgrees(context, verified);
  const refusalCause = retired ? epochRetired(verified, retired) : null;
  const sign = reportSigner(
    context.signer,
    config,
    {
      authorizationDigest: verified.subject.authorizationDigest,
      status: 'never_claimed',
      output: null,
      costUnits: null,
      ...(refusalCause ? { refusal: { code: refusalCause.code, message: cutText(refusalCause.message, REPORT_REFUSAL_MESSAGE_MAX_CHARS) } } : {}),
    },
    context.reportBound,
  );
  const refusal = context.ledger.refuse(verified.subject, sign);
  switch (refusal.kind) {
    case 'refused': {
      const report = refusal.record.report;
      if (!report) throw new CustodyError('store_corrupt', `refusal of ${verified.subject.operationId} has no report`);
      context.log.info('never_claimed', { operation_id: verified.subject.operationId, refusal_id: refusal.record.claimId });
      crashPoint('executor', 'after_never_claimed_commit');
      return { report: report.text, status: report.status, replayed: false };
    }
    case 'existing':
      // A claim committed between the lookup and the refusal transaction.
      return replayable(refusal.record, verified) ?? askAdapter(context, verified, refusal.record);
    case 'full':
      throw new CustodyError(
        'ledger_full',
        `ledger holds ${refusal.live} of ${config.claimCapacity} claims and refusals, the refusal reserve included; settled claims leave once their window has passed (the service archives every timing.archive_interval_ms; custody archive does it now), then this refusal is recorded`,
      );
  }
}

/**
 * Before "never claimed" is signed for an operation this ledger holds no
 * claim of, the tool, when its adapter can reconcile, is asked what it holds
 * (a durable adapter fences, so "not applied" stays true). A ledger restored
 * together with the other stores (no head can tell, docs/ROLLBACK.md) has
 * forgotten claims whose effects happened; signing never_claimed for one of
 * those would release its hold as "no effect". When the tool says applied,
 * nothing is signed: the operation stays `unknown` with its hold (the effect
 * happened, so the hold is rightly spent) and the contradiction is logged
 * once; this process answers so again without asking the tool (no reconcile
 * budget spent on it, however often the supervisor asks). When the adapter
 * gives no answer (a deadline, an error) it is asked again later; when it
 * answers that it cannot tell, the ledger's word stands, as for an adapter
 * without reconcile.
 */
async function worldAgrees(context: ExecutorContext, verified: VerifiedAuthorization): Promise<void> {
  const { operationId } = verified.subject;
  const { tool } = verified.invocation;
  const descriptor = context.host.descriptors.get(tool);
  if (!descriptor || descriptor.contract === null || !descriptor.reconcilable) return;
  // A ledger restored under this very process is refused as such first (the process is replaced, its hello refused).
  context.ledger.assertCurrent();
  const doubt = (why: string) =>
    new CustodyError('indeterminate', `operation ${operationId} (${tool}): this ledger holds no claim of it, but ${why}; nothing is signed and it stays unknown`);
  const contradicted = contradictionsOf(context);
  const applied = 'the tool says it was applied: this ledger lost its claim (restored from a backup with the other stores? docs/ROLLBACK.md)';
  if (contradicted.has(operationId)) throw doubt(applied);
  const result = await reconcileWithAdapter(context, descriptor, operationId, doubt);
  if (result.outcome === 'applied') {
    remember(contradicted, operationId);
    context.log.error('ledger_contradicted', {
      operation_id: operationId,
      tool,
      message: `the tool says operation ${operationId} was applied, but this ledger never claimed it: the ledger lost the claim (restored from a backup with the other stores? docs/ROLLBACK.md); nothing is signed, and it stays unknown with its hold, which the effect spent`,
    });
    throw doubt(applied);
  }
  if (result.outcome === 'indeterminate') context.log.warn('never_claimed_unconfirmed', { operation_id: operationId, tool, reason: result.reason });
}

/** Operations a tool said were applied though this ledger never claimed them, per executor process; at most this many kept. */
export const CONTRADICTIONS_KEPT = 10_000;
const contradictions = new WeakMap<ExecutorContext, Set<string>>();

function contradictionsOf(context: ExecutorContext): Set<string> {
  let set = contradictions.get(context);
  if (!set) contradictions.set(context, (set = new Set()));
  return set;
}

export function remember(set: Set<string>, operationId: string): void {
  set.add(operationId);
  // The oldest goes first: it is asked of the tool again, no more.
  if (set.size > CONTRADICTIONS_KEPT) set.delete(set.values().next().value!);
}

/** Ask the adapter about an operation (a durable adapter fences it); no answer in time, or a malformed one, is `fail`'s error. */
async function reconcileWithAdapter(context: ExecutorContext, descriptor: AdapterDescriptor, operationId: string, fail: (why: string) => CustodyError) {
  const { tool } = descriptor;
  context.reconcileBudget.take(tool);
  const call = context.host.call({ type: 'reconcile', tool, operation_key: operationId });
  const deadline = deadlineFor(context, descriptor);
  const answer = await withinDeadline(call.answer, deadline);
  if (answer === undefined) throw fail(`the adapter did not answer within ${deadline} ms`);
  if (!answer.ok) throw fail(answer.error.message);
  let result;
  try {
    result = AdapterHost.reconcileResult(answer.value);
  } catch (error) {
    throw fail((error as Error).message);
  }
  context.log.info('reconcile_observed', { operation_id: operationId, tool, outcome: result.outcome });
  return result;
}

async function askAdapter(context: ExecutorContext, verified: VerifiedAuthorization, claim: OperationRecord): Promise<ReportAnswer> {
  const { operationId, tool } = claim;
  const descriptor = context.host.descriptors.get(tool);
  const indeterminate = (why: string) =>
    new CustodyError('indeterminate', `operation ${operationId} (${tool}): ${why}; the claim stays without a report and is never run again`);
  if (!descriptor || descriptor.contract === null) throw indeterminate('no adapter with a contract serves this tool now');
  const running = effectRunning(context, operationId);
  if (descriptor.contract === 'read_only' && !descriptor.reconcilable) {
    // A read-only call has no effect to find; once it is not running, "not applied" is true.
    if (running) throw indeterminate('the read-only call is still running in this executor');
    return retainObservation(context, verified, 'reconciled_not_applied', null, null, 'reconcile');
  }
  if (!descriptor.reconcilable) throw indeterminate(`a ${descriptor.contract} adapter without reconcile cannot tell`);
  // Only a durable adapter promises to fence (H3, ARCHITECTURE.md §6.5); any other cannot make
  // not_applied true while its own effect may still be about to happen.
  if (descriptor.contract !== 'durable' && running) throw indeterminate('its effect is still running in this executor and the adapter cannot fence');

  const result = await reconcileWithAdapter(context, descriptor, operationId, indeterminate);
  switch (result.outcome) {
    case 'applied':
      return retainObservation(context, verified, 'reconciled_applied', wellFormedValue(result.output ?? null), null, 'reconcile');
    case 'not_applied':
      return retainObservation(context, verified, 'reconciled_not_applied', null, null, 'reconcile');
    case 'indeterminate':
      throw indeterminate(`the adapter cannot tell: ${result.reason}`);
  }
}
