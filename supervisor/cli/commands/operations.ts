// invoke, authorize, execute, report, reconcile, ops, trace: the commands
// that carry or show operations through the running service.
import { readEnvelope } from '../../../shared/artifacts/artifact.js';
import { reportBody } from '../../../shared/protocol/artifacts.js';
import { isCustodyError, toCustodyError } from '../../../shared/errors.js';
import { newRequestId } from '../../../shared/request-id.js';
import { checkOperationName } from '../../../shared/protocol/names.js';
import { causeOf } from '../../operations/causes.js';
import { type OperationOutcome, askedBefore } from '../../operations/outcome.js';
import type { ServiceClient } from '../client.js';
import type { OfflineTrace } from '../offline-trace.js';
import { operationsAnswer, outcomeAnswer, traceAnswer } from '../../api/answers.js';
import { exitCodeForOutcome } from '../exit-codes.js';
import { type Output, formatTime, table } from '../output.js';

/** What the executor's signed report says happened, for an operation that ended without effect. */
function reportStatus(o: OperationOutcome): string | null {
  if (!o.report) return null;
  return reportBody.parse(readEnvelope(o.report).envelope.body).status;
}

/**
 * An outcome in words, each saying what to do next where there is something:
 * `again` is the command that asks about this operation again (shown while it
 * is not complete), or the whole next step when it is not just asking again.
 */
function describeOutcome(o: OperationOutcome, again: string | { readonly next: string }, notes: readonly string[] = []): string {
  const lines: string[] = [];
  const cause = causeOf(o);
  if (o.outcome === 'completed') lines.push(`Completed: ${o.request_id}`);
  else if (o.phase === 'refused') lines.push(`Refused: ${o.request_id} (${o.outcome ?? 'refused'}: ${o.reason ?? 'no reason given'})${cause ? `: ${cause}` : ''}`);
  else if (o.outcome === 'released') {
    const why = cause ? ` (${o.reason}: ${cause})` : '; it had no effect — to try again, ask under a new name';
    lines.push(`Ended without effect: ${o.request_id}; the executor's signed report says ${reportStatus(o) ?? 'not applied'}, and the hold was released${why}`);
  } else if (o.outcome === 'finalization_denied') {
    lines.push(
      `Finalization denied: ${o.request_id} (${o.reason ?? ''}): the kernel refused to settle the executor's report (status ${reportStatus(o) ?? 'unknown'}); the effect may have happened; flagged for an operator: custody trace ${o.request_id}`,
    );
  } else if (o.final) lines.push(`Ended: ${o.request_id} (${o.outcome}: ${o.reason ?? ''})${cause ? `: ${cause}` : `; see custody trace ${o.request_id}`}`);
  else if (o.phase === 'quarantined') lines.push(`Quarantined: ${o.request_id} (${o.reason ?? ''}); it is not retried: see custody trace ${o.request_id}, release it with custody reconcile ${o.request_id}`);
  else {
    const next = typeof again === 'string' ? `custody carries it on — ask again: ${again}, or see custody trace ${o.request_id}` : again.next;
    lines.push(`Not complete: ${o.request_id} is ${o.phase}${o.reason ? ` (last: ${o.reason}${cause ? `: ${cause}` : ''})` : ''}; ${next}`);
  }
  lines.push(`  operation ${o.operation_id}`, ...notes.map((note) => `  ${note}`));
  if (o.output !== null && o.output !== undefined) lines.push('', formatOutput(o.output));
  return lines.join('\n');
}

function formatOutput(output: unknown): string {
  if (output && typeof output === 'object' && typeof (output as { note?: unknown }).note === 'string') {
    return (output as { note: string }).note.replace(/\n$/, '');
  }
  return JSON.stringify(output, null, 2);
}

const waitField = (waitMs: number | undefined) => (waitMs === undefined ? {} : { wait_ms: waitMs });

export async function invokeCommand(client: ServiceClient, out: Output, tool: string, args: Record<string, string>, requestId: string | undefined, waitMs?: number): Promise<number> {
  // The id is chosen here, before anything is sent, so that whatever happens
  // on the way the operator can ask about this request again (and never
  // starts a second one by retrying).
  const id = requestId ?? newRequestId();
  const calledAt = Date.now();
  let answer;
  try {
    answer = await out.progress(`invoking ${tool} as ${id}`, client.post('/v1/invoke', { tool, arguments: args, request_id: id, ...waitField(waitMs) }, outcomeAnswer));
  } catch (error) {
    const failure = toCustodyError(error);
    if (failure.errorClass === 'unknown') failure.message = `${failure.message} (custody invoke ${tool} … --request-id ${id}, or custody trace ${id})`;
    throw failure;
  }
  const outcome = answer.body;
  // A --request-id logged before this call: its answer is that request's, and nothing ran again.
  const notes = askedBefore(outcome.created_at, calledAt) ? [`first asked at ${new Date(outcome.created_at).toISOString()}: this is that request's answer, and nothing ran again (a new --request-id runs it anew)`] : [];
  out.result(outcome, () => describeOutcome(outcome, `custody invoke ${tool} … --request-id ${id}`, notes));
  return exitCodeForOutcome(outcome, 'complete');
}

export async function authorizeCommand(client: ServiceClient, out: Output, tool: string, args: Record<string, string>, name: string, waitMs?: number): Promise<number> {
  const answer = await out.progress(`authorizing ${name}`, client.post('/v1/authorize', { tool, arguments: args, operation: name, ...waitField(waitMs) }, outcomeAnswer));
  const outcome = answer.body;
  out.result(outcome, () =>
    outcome.phase === 'authorized'
      ? `Authorized: ${name}\n  operation ${outcome.operation_id}, dispatch committed to executor ${outcome.executor}`
      : describeOutcome(outcome, `custody authorize ${tool} … --operation ${name}`),
  );
  return exitCodeForOutcome(outcome, 'authorized');
}

export async function executeCommand(client: ServiceClient, out: Output, name: string, dropReply: boolean, waitMs?: number): Promise<number> {
  const answer = await out.progress(`executing ${name}`, client.post(`/v1/operations/${encodeURIComponent(name)}/execute`, { drop_reply: dropReply, ...waitField(waitMs) }, outcomeAnswer));
  const outcome = answer.body;
  out.result(outcome, () => {
    if (!outcome.report) return describeOutcome(outcome, `custody execute ${name}`);
    const body = reportBody.parse(readEnvelope(outcome.report).envelope.body);
    return `Signed report retained: ${name}\n  claim ${body.claim_id}, status ${body.status}`;
  });
  return exitCodeForOutcome(outcome, 'reported');
}

export async function reportCommand(client: ServiceClient, out: Output, name: string, goal: 'report' | 'reconcile', waitMs?: number): Promise<number> {
  const answer = await out.progress(`${goal === 'report' ? 'reporting' : 'reconciling'} ${name}`, client.post(`/v1/operations/${encodeURIComponent(name)}/${goal}`, waitField(waitMs), outcomeAnswer));
  const outcome = answer.body;
  out.result(outcome, () => {
    if (outcome.outcome === 'completed') {
      const head = goal === 'report' ? 'Completed: original report settled.' : `Completed: ${name} reconciled from the executor's signed report.`;
      return outcome.output === null ? head : `${head}\n\n${formatOutput(outcome.output)}`;
    }
    // An authorized operation waits for its execute: asking for its report again would not move it.
    const waiting = outcome.phase === 'authorized' && goal === 'report';
    return describeOutcome(outcome, waiting ? { next: `it waits to be executed: run it with custody execute ${name}, or close it without effect with custody reconcile ${name}` } : `custody ${goal} ${name}`);
  });
  return exitCodeForOutcome(outcome, 'complete');
}

/** Operations `custody ops` shows, the newest. */
const OPS_LISTED = 1000;

export async function opsCommand(client: ServiceClient, out: Output): Promise<number> {
  const { body } = await client.get(`/v1/operations?limit=${OPS_LISTED}`, operationsAnswer);
  const { operations } = body;
  const more = body.next_after === null ? '' : `\nThe newest ${operations.length} are shown; custody export lists every operation.`;
  out.result(body, () =>
    operations.length === 0
      ? 'No operations yet.'
      : table(
          ['NAME', 'STATE', 'PHASE', 'TOOL', 'UPDATED', 'FLAG'],
          operations.map((op) => [op.name, op.state, op.phase, op.tool, formatTime(op.updated_at), op.flag]),
        ) + more,
  );
  return 0;
}

/**
 * Through the running service; when it is not running (stopped, or killed),
 * from the stores themselves, read-only (offline-trace.ts). Either way the
 * first line says which.
 */
export async function traceCommand(client: ServiceClient, out: Output, name: string): Promise<number> {
  // Online and offline traces share what is shown; --json prints whichever came, whole.
  let body: Pick<OfflineTrace, 'operation_id' | 'events'> & { readonly source: string; readonly unread?: OfflineTrace['unread'] };
  let source: string;
  try {
    body = { ...(await client.get(`/v1/operations/${encodeURIComponent(name)}/trace`, traceAnswer)).body, source: 'service' };
    source = 'online: read through the running service';
  } catch (error) {
    if (!isCustodyError(error, 'service_unavailable')) throw error;
    // Only an offline trace opens the stores: better-sqlite3 is loaded for it alone (main.ts).
    const { offlineTrace } = await import('../offline-trace.js');
    body = offlineTrace(client.paths, checkOperationName(name, 'operation name'));
    source = `offline: read from the stores (the service is not running on ${client.paths.root}; nothing was locked or written)`;
  }
  const { events, unread = [] } = body;
  out.result(body, () =>
    [
      source,
      `Operation ${name} (${body.operation_id})`,
      table(['TIME', 'STORE', 'EVENT', 'DETAIL'], events.map((e) => [formatTime(e.at), e.store, e.event, e.detail])),
      ...unread.map((u) => `not read: ${u.store}: ${u.reason}`),
    ].join('\n'),
  );
  return 0;
}
