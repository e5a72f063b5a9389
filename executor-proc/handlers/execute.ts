// execute_once (ARCHITECTURE.md §6.2 steps 1–5), in this order and no other:
//   1 verify the authorization and the arguments (no time check); arguments
//     the adapter refuses (its byte bound, its schema) are refused for good:
//     a refusal under the claims' unique key and a signed never_claimed
//     report carrying the code and the adapter's message, replayed on retry;
//   2 look up: a report is replayed, a refusal refused, a claim with no
//     report is outcome_unknown — all before any window check (H5, ARCHITECTURE.md §6.5);
//   3 claim in one BEGIN IMMEDIATE transaction that re-reads and checks the
//     window against max(clock, HWM) (H2, H6) — shared with the other claims
//     asked for in the same turn (ledger.ts), and awaited until durable;
//   4 run the adapter with no transaction open;
//   5 sign and retain the report in a second transaction (grouped likewise),
//     then answer once it is durable.
import { nowMs } from '../../shared/clock.js';
import { crashPoint } from '../../shared/fault.js';
import { CustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import { cutText } from '../../shared/text/cut.js';
import { REPORT_REFUSAL_MESSAGE_MAX_CHARS, type ReportStatus } from '../../shared/protocol/artifacts.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { checkArguments, type VerifiedAuthorization, verifyAuthorization } from '../authorization.js';
import { type ExecutorContext, type InFlightEffect, deadlineFor, runnableAdapter, withinDeadline } from '../context.js';
import { pausePoint, pauseTogether } from '../fault-pause.js';
import type { OperationRecord } from '../ledger/records.js';
import type { AdapterDescriptor } from '../adapters/contract.js';
import { runEffect, type EffectEnd } from './effect.js';
import { reportSigner } from '../report.js';
import { answerRecord, replayable, retainObservation } from './answers.js';

type ExecuteResult = ResultOf<'execute'>;

export async function executeOnce(context: ExecutorContext, body: RequestOf<'execute'>, frameId: string): Promise<ExecuteResult> {
  // Step 1.
  const verified = verifyAuthorization(body.authorization, body.expected, context.ledger);
  checkArguments(verified.invocation, body.arguments);
  // A rotation retired the executor epoch it is addressed to, or the kernel key that signed it:
  // refused for good with a signed report (one claimed before the rotation is answered from the ledger instead).
  const retired = context.ledger.retiredReason(verified.subject.signedUnder);
  if (retired) return dropIfAsked(context, body, refuseBeforeClaim(context, verified, epochRetired(verified, retired)));
  const descriptor = runnableAdapter(context, verified.invocation.tool);
  const refused = await argumentRefusal(context, descriptor, body.arguments, verified.invocation.parameters_digest);
  if (refused) return dropIfAsked(context, body, refuseBeforeClaim(context, verified, refused));

  // Step 2 (H5, ARCHITECTURE.md §6.5): the lookup comes before any window check, so a
  // retained report replays even after the window, and a claim with no
  // report is never run again.
  const known = context.ledger.records.find(verified.subject.operationId);
  if (known) return dropIfAsked(context, body, answerRecord(known, verified));

  await pausePoint('pause_before_claim');
  await held(context, 'pause_claims_together', verified.subject.operationId);

  // Step 3. Resolves once the transaction holding the claim is durable; the
  // after_claim cutpoint fires there, before any claim of the batch is answered.
  const claim = await context.ledger.claimDurable(verified.subject);
  switch (claim.kind) {
    case 'existing':
      return dropIfAsked(context, body, answerRecord(claim.record, verified));
    case 'window_not_open':
      throw windowNotOpen(verified, claim.now);
    case 'window_closed':
      throw windowClosed(verified, claim.now);
    case 'full': {
      const { claimCapacity, refusalReserve } = context.ledger.config;
      throw new CustodyError(
        'ledger_full',
        `ledger holds ${claim.live} of ${claimCapacity} claims (${refusalReserve} kept for refusals); nothing was claimed — settled claims leave once their window has passed (the service archives every timing.archive_interval_ms; custody archive does it now), then ask again with the same name`,
      );
    }
    case 'epoch_retired':
      // A rotation committed while this execute waited (pause_before_claim): refused like one retired before.
      return dropIfAsked(context, body, refuseBeforeClaim(context, verified, epochRetired(verified, claim.why)));
    case 'claimed':
      break;
  }
  // The witness exists before the effect (docs/ROLLBACK.md): a ledger restored
  // from before this claim is refused at its next hello, never asked "did it
  // run?" and answering "never claimed".
  await context.witness.announceAndWait(context.ledger.head(), deadlineFor(context, descriptor), claim.record.operationId);

  // Steps 4 and 5.
  const ended = await runTracked(context, descriptor, claim.record, verified, body, frameId);
  return dropIfAsked(context, body, ended);
}

export async function validateArguments(context: ExecutorContext, descriptor: AdapterDescriptor, args: Record<string, unknown>): Promise<void> {
  const call = context.host.call({ type: 'validate', tool: descriptor.tool, arguments: args });
  const answer = await withinDeadline(call.answer, deadlineFor(context, descriptor));
  if (answer === undefined) {
    // A refusal before any claim, with its own code: deadline_exceeded is the supervisor's watchdog's alone.
    throw new CustodyError('argument_check_timeout', `adapter ${descriptor.tool} did not check its arguments within ${deadlineFor(context, descriptor)} ms; nothing was claimed, so the operation can be reconciled as never claimed`);
  }
  if (!answer.ok) throw answer.error.code === 'indeterminate' ? new CustodyError('adapter_failed', answer.error.message) : answer.error;
}

/** Codes of the adapter's verdict on the arguments themselves: the authorization binds them, so it holds for good. */
const ARGUMENT_REFUSALS: ReadonlySet<string> = new Set(['arguments_invalid', 'arguments_too_large']);

/**
 * The adapter's refusal of these arguments, or null when it admits them; any other failure is thrown.
 * Arguments the same adapter host admitted at arguments.check (they hash to `parameters`, checked above)
 * are not asked again (admitted-arguments.ts).
 */
async function argumentRefusal(context: ExecutorContext, descriptor: AdapterDescriptor, args: Record<string, unknown>, parameters: string): Promise<CustodyError | null> {
  if (context.admitted.take(descriptor.tool, parameters, context.host.generation)) return null;
  try {
    await validateArguments(context, descriptor, args);
    return null;
  } catch (error) {
    if (error instanceof CustodyError && ARGUMENT_REFUSALS.has(error.code)) return error;
    throw error;
  }
}

/** The refusal of an authorization a key rotation retired before it was claimed. */
export function epochRetired(verified: VerifiedAuthorization, why: string): CustodyError {
  return new CustodyError(
    'epoch_retired',
    `operation ${verified.subject.operationId} was never claimed: ${why}; it is refused with a signed report so its hold is released — authorize it again under a new name`,
  );
}

/**
 * Arguments refused before any claim (or an authorization a rotation retired): record a refusal under the claims'
 * unique key and sign its never_claimed report with the cause, in one
 * transaction (the ledger's `refuse`, window open or not), so no claim can
 * ever follow and the kernel releases the hold with the cause as its reason.
 * A retry finds the refusal and replays the same report.
 */
function refuseBeforeClaim(context: ExecutorContext, verified: VerifiedAuthorization, cause: CustodyError): ExecuteResult {
  const { config } = context.ledger;
  const operationId = verified.subject.operationId;
  const refusal = { code: cause.code, message: cutText(cause.message, REPORT_REFUSAL_MESSAGE_MAX_CHARS) };
  const sign = reportSigner(
    context.signer,
    config,
    { authorizationDigest: verified.subject.authorizationDigest, status: 'never_claimed', output: null, costUnits: null, refusal },
    context.reportBound,
  );
  const outcome = context.ledger.refuse(verified.subject, sign);
  switch (outcome.kind) {
    case 'refused': {
      const report = outcome.record.report;
      if (!report) throw new CustodyError('store_corrupt', `refusal of ${operationId} has no report`);
      context.log.info(cause.code === 'epoch_retired' ? 'epoch_retired' : 'arguments_refused', { operation_id: operationId, refusal_id: outcome.record.claimId, code: cause.code });
      return { report: report.text, status: report.status, replayed: false };
    }
    case 'existing':
      // Refused before (a retry), or claimed before the adapter changed its mind: what the ledger holds stands.
      if (outcome.record.kind === 'refusal') {
        const replay = replayable(outcome.record, verified);
        if (replay) return replay;
      }
      return answerRecord(outcome.record, verified);
    case 'full':
      throw new CustodyError(
        'ledger_full',
        `ledger holds ${outcome.live} of ${config.claimCapacity} claims and refusals, the refusal reserve included; the arguments were refused (${cause.code}: ${cause.message}) but the refusal could not be recorded — settled claims leave once their window has passed (the service archives every timing.archive_interval_ms; custody archive does it now)`,
      );
  }
}

// The time in both messages is max(clock, high-water mark), already stored:
// what the answer was judged by, not the wall clock.
function windowNotOpen(verified: VerifiedAuthorization, now: number): CustodyError {
  const { not_before: notBefore, expires_at: expiresAt } = verified.artifact.body;
  return new CustodyError(
    'window_not_open',
    `operation ${verified.subject.operationId}: now (${now}) is before its window [${notBefore}, ${expiresAt}) opens, ${notBefore - now} ms from now; nothing was claimed — execute it again at or after ${notBefore}`,
  );
}

/** How far behind the high-water mark the clock must be for a refusal to say that the mark, not the clock, closed the window. */
const CLOCK_BEHIND_MARK_NOTE_MS = 60_000;

function windowClosed(verified: VerifiedAuthorization, now: number): CustodyError {
  const { not_before: notBefore, expires_at: expiresAt } = verified.artifact.body;
  // A clock that ran ahead and was corrected leaves the mark ahead of it: say so, or every refusal reads as a mystery.
  const clock = nowMs();
  const behind = now - clock;
  const why =
    behind > CLOCK_BEHIND_MARK_NOTE_MS && clock < expiresAt
      ? ` — this executor's clock is ${Math.round(behind / 1000)} s behind the latest time it has answered by (it ran ahead and was set back), and windows are judged at that time until the clock passes it (docs/RELIABILITY.md, fault model)`
      : '';
  return new CustodyError(
    'outside_window',
    `operation ${verified.subject.operationId}: now (${now}, never earlier than the clock high-water mark) is past its window [${notBefore}, ${expiresAt}), which closed at ${expiresAt}; this ledger holds no claim of it and none can be made now — reconcile it (its tool is asked first, when it can be, before never_claimed is signed)${why}`,
  );
}

/**
 * Steps 4 and 5. The effect stays listed in flight until the adapter host
 * answers, past the request's deadline if need be: `cancel` can still reach
 * it, and reconcile_operation knows it may still happen.
 */
async function runTracked(
  context: ExecutorContext,
  descriptor: AdapterDescriptor,
  claim: OperationRecord,
  verified: VerifiedAuthorization,
  body: RequestOf<'execute'>,
  frameId: string,
): Promise<ExecuteResult> {
  const started = runEffect(context, descriptor, claim.operationId, body.arguments);
  let endStatus!: (status: ReportStatus | null) => void;
  const effect: InFlightEffect = {
    operationId: claim.operationId,
    tool: descriptor.tool,
    hostCallId: started.hostCallId,
    cancellable: descriptor.cancellable,
    cancelRequested: false,
    ended: new Promise((resolve) => (endStatus = resolve)),
  };
  context.inFlight.set(frameId, effect);
  const unlist = () => {
    if (context.inFlight.get(frameId) === effect) context.inFlight.delete(frameId);
  };
  const deadline = deadlineFor(context, descriptor);
  const end = await withinDeadline(started.end, deadline);
  if (end === undefined) {
    // Still running in the adapter host: what it ends with later is still
    // the truth, and is retained then if this process still has its ledger.
    void started.end.then(async (late) => {
      unlist();
      endStatus(await retainLate(context, verified, late));
    });
    throw new CustodyError(
      'adapter_still_running',
      `adapter ${descriptor.tool} did not finish operation ${claim.operationId} within ${deadline} ms; the claim stays and is never run again — reconcile it`,
    );
  }
  unlist();
  try {
    const result = await finish(context, verified, claim, end, effect.cancelRequested);
    endStatus(result.status);
    return result;
  } catch (error) {
    endStatus(null);
    throw error;
  }
}

async function retainLate(context: ExecutorContext, verified: VerifiedAuthorization, late: EffectEnd): Promise<ReportStatus | null> {
  if (late.kind !== 'observed' || !context.isOpen()) return null;
  try {
    return (await retainObservation(context, verified, late.status, late.output, late.costUnits, 'late')).status;
  } catch (error) {
    context.log.error('late_report_not_retained', { operation_id: verified.subject.operationId, ...errorFields(error) });
    return null;
  }
}

async function finish(context: ExecutorContext, verified: VerifiedAuthorization, claim: OperationRecord, end: EffectEnd, cancelRequested: boolean): Promise<ExecuteResult> {
  if (end.kind === 'unclear') {
    context.log.warn('outcome_unknown', { operation_id: claim.operationId, reason: end.reason });
    throw new CustodyError('outcome_unknown', `operation ${claim.operationId}: ${end.reason}; the claim stays and is never run again — reconcile it`);
  }
  if (end.cancelled && !cancelRequested) context.log.warn('adapter_cancelled_unasked', { operation_id: claim.operationId });
  crashPoint('executor', 'after_effect');
  await held(context, 'pause_reports_together', claim.operationId);
  // Step 5. The after_report cutpoint fires once the batch holding the report is durable.
  let answer: ExecuteResult;
  try {
    answer = await retainObservation(context, verified, end.status, end.output, end.costUnits, 'execute');
  } catch (error) {
    // The adapter answered but its report could not be kept (store busy, lock lost): the claim stands alone.
    context.log.error('report_not_retained', { operation_id: claim.operationId, status: end.status, ...errorFields(error) });
    throw new CustodyError('outcome_unknown', `operation ${claim.operationId} ended ${end.status} but its report could not be retained; reconcile it`, { cause: error });
  }
  return answer;
}

/** A pause point every operation arriving at it waits at together (fault-pause.ts); nothing unless a test armed it. */
async function held(context: ExecutorContext, cutpoint: string, operationId: string): Promise<void> {
  const gate = pauseTogether(cutpoint);
  if (!gate) return;
  context.log.info('fault_held', { cutpoint, operation_id: operationId });
  await gate;
}

/** The lost-reply drill (ARCHITECTURE.md §6.3): the report is retained; the process dies before the reply. */
function dropIfAsked(context: ExecutorContext, body: RequestOf<'execute'>, result: ExecuteResult): ExecuteResult {
  if (body.drop_reply) {
    context.log.warn('reply_dropped', { status: result.status, replayed: result.replayed });
    context.dropReply();
  }
  return result;
}
