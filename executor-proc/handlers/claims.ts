// The readable side of the ledger over the wire: one operation's claim as
// claims_view shows it (live or archived), and explicit archival.
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { verifyAuthorization } from '../authorization.js';
import type { ExecutorContext } from '../context.js';
import { crashPoint } from '../../shared/fault.js';

export function getClaim(context: ExecutorContext, body: RequestOf<'claims.get'>): ResultOf<'claims.get'> {
  const record = context.ledger.records.find(body.operation_id);
  if (!record) return { claim: null };
  return {
    claim: {
      operation_id: record.operationId,
      claim_id: record.claimId,
      kind: record.kind,
      claimed_at: record.claimedAt,
      report_status: record.report?.status ?? null,
      report: record.report?.text ?? null,
      archived: record.archived,
    },
  };
}

export function archiveReconciled(context: ExecutorContext, body: RequestOf<'archive'>): ResultOf<'archive'> {
  const result = context.archiver.archive(body.settled);
  context.log.info('archived', { archived: result.archived, live: result.live, not_archived: result.notArchived.length });
  return { archived: result.archived, live: result.live, not_archived: [...result.notArchived] };
}

/** A page of the live ledger for archival (protocol: `ledger.live`). */
export function listLive(context: ExecutorContext, body: RequestOf<'ledger.live'>): ResultOf<'ledger.live'> {
  return context.archiver.live(body.after, body.limit);
}

/**
 * The way back after a restore (docs/ROLLBACK.md): each entry must be an
 * authorization the pinned kernel signed for this executor (verified as for
 * execute, without the window); those the ledger lacks are recorded as claims
 * without a report (the head left as it is), then, with the last message, the
 * head is raised to the supervisor's witness.
 */
export function recoverLedger(context: ExecutorContext, body: RequestOf<'ledger.recover'>): ResultOf<'ledger.recover'> {
  const verified = body.claims.map((entry) => verifyAuthorization(entry.authorization, entry.expected, context.ledger));
  const recorded: string[] = [];
  let already = 0;
  for (const { subject } of verified) {
    if (context.ledger.recoverClaim(subject)) recorded.push(subject.operationId);
    else already++;
  }
  // A way back cut short here leaves the head below the witness: the next hello is refused until it is run again.
  crashPoint('executor', 'after_recover_claims');
  const head = context.ledger.raiseHeadTo(body.raise_head_to);
  context.log.warn('ledger_recovered', { recorded, already, head });
  return { recorded, already, head };
}
