// The readable side of the ledger over the wire: one operation's claim as
// claims_view shows it (live or archived), and explicit archival.
import { type RequestOf, type ResultOf } from '../../shared/protocol/messages.js';
import { type ExecutorContext } from '../context.js';

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
  const result = context.archiver.archive(body.reconciled);
  context.log.info('archived', { archived: result.archived, live: result.live, not_archived: result.notArchived.length });
  return { archived: result.archived, live: result.live, not_archived: [...result.notArchived] };
}
