// Answers built from what the ledger holds: a retained report replayed as
// its exact bytes (never re-signed), a refusal, an unknown outcome; and the
// retention of a new observation, where an earlier report, if any, stands.
import { CustodyError } from '../../shared/errors.js';
import type { ReportStatus } from '../../shared/protocol/artifacts.js';
import type { JsonValue } from '../../shared/protocol/common.js';
import type { ResultOf } from '../../shared/protocol/messages.js';
import type { VerifiedAuthorization } from '../authorization.js';
import { contradicts } from '../claim-machine.js';
import type { ExecutorContext } from '../context.js';
import type { ReportSigner } from '../ledger/ledger.js';
import type { OperationRecord } from '../ledger/records.js';
import { reportSigner } from '../report.js';

export type ReportAnswer = ResultOf<'execute'>;

/** The retained report of this authorization, or null when the operation has none yet. */
export function replayable(record: OperationRecord, verified: VerifiedAuthorization): ReportAnswer | null {
  if (record.authorizationDigest !== verified.subject.authorizationDigest) {
    throw new CustodyError(
      'invocation_mismatch',
      `operation ${record.operationId} was ${record.kind === 'claim' ? 'claimed' : 'refused'} under authorization ${record.authorizationDigest.slice(0, 16)}…, ` +
        `not ${verified.subject.authorizationDigest.slice(0, 16)}…; one operation is claimed once`,
    );
  }
  return record.report ? { report: record.report.text, status: record.report.status, replayed: true } : null;
}

/** Step 2 of execute_once for an operation the ledger already knows. */
export function answerRecord(record: OperationRecord, verified: VerifiedAuthorization): ReportAnswer {
  const replay = replayable(record, verified);
  if (record.kind === 'refusal') {
    throw new CustodyError(
      'never_claimed',
      `operation ${record.operationId} was closed as never claimed (refusal ${record.claimId}); it can never be claimed — reconcile_operation returns its signed report`,
    );
  }
  if (replay) return replay;
  throw new CustodyError(
    'outcome_unknown',
    `operation ${record.operationId} was claimed at ${record.claimedAt} (claim ${record.claimId}) and has no report; it is never run again — reconcile it`,
  );
}

/** Cutpoints that fire once a new report of each source is durable (docs/RELIABILITY.md). */
const RETAINED_CUTPOINTS: Record<'execute' | 'late' | 'reconcile', readonly string[]> = {
  execute: ['after_report'],
  late: [],
  reconcile: ['after_reconciled_report_commit'],
};

/**
 * Sign and retain what the adapter showed, in the ledger's next grouped
 * transaction, and answer once it is durable; when a report is already
 * there, it stands.
 */
export async function retainObservation(
  context: ExecutorContext,
  verified: VerifiedAuthorization,
  status: ReportStatus,
  output: JsonValue | null,
  costUnits: number | null,
  source: 'execute' | 'late' | 'reconcile',
): Promise<ReportAnswer> {
  const { operationId, authorizationDigest } = verified.subject;
  const bound = context.reportBound;
  const omitted = (outputBytes: number) =>
    context.log.warn('report_output_omitted', { operation_id: operationId, status, output_bytes: outputBytes, report_max_bytes: bound.bytes, report_max_depth: bound.depth });
  // Signed when the grouped transaction writes it, with the key in force then: a rotation committed while this report
  // waited for the batch signs it with the new key, never with the one it retired (docs/SECURITY.md "Rotating keys").
  const sign: ReportSigner = (claim, finishedAt) => reportSigner(context.signer, context.ledger.config, { authorizationDigest, status, output, costUnits }, bound, omitted)(claim, finishedAt);
  const outcome = await context.ledger.retainReportDurable(operationId, status, sign, RETAINED_CUTPOINTS[source]);
  const report = outcome.record.report;
  if (!report) throw new CustodyError('store_corrupt', `operation ${operationId} has no report right after retaining one`);
  if (outcome.kind === 'retained') {
    context.log.info('report_retained', { operation_id: operationId, status, source });
    return { report: report.text, status: report.status, replayed: false };
  }
  // Insert-once: the first report stands; a second terminal move is refused.
  if (contradicts(report.status, status)) {
    context.log.error('contradictory_outcome', {
      operation_id: operationId,
      retained: report.status,
      refused: status,
      source,
      message: 'an adapter observation contradicts the retained report; the retained report stands — check the adapter fences what it reconciles',
    });
  } else {
    context.log.info('report_already_retained', { operation_id: operationId, retained: report.status, observed: status, source });
  }
  return { report: report.text, status: report.status, replayed: true };
}
