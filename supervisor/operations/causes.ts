// What a refusal's reason code means for the operation at hand, in words a
// caller can act on. The kernel's decision carries the code (its receipt
// signs it); the CLI and `custody mcp` show this text beside it.
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import type { OperationOutcome } from './outcome.js';

type Cause = (o: Pick<OperationOutcome, 'tool' | 'request_id'> & { readonly executor?: string | null }) => string;

const grantAdd = (tool: string) => `custody grant add --tool ${tool} --max N --ttl 1h`;

const CAUSES: Record<string, Cause> = {
  capability_unknown: (o) => `no grant covers ${o.tool}; an operator can add one: ${grantAdd(o.tool)}`,
  tool_not_granted: (o) => `no grant covers ${o.tool}; an operator can add one: ${grantAdd(o.tool)}`,
  capability_expired: (o) => `the grant covering ${o.tool} has expired; an operator can add a new one: ${grantAdd(o.tool)}`,
  capability_revoked: (o) => `the grant covering ${o.tool} was revoked; an operator can add a new one: ${grantAdd(o.tool)}`,
  capability_not_yet_valid: (o) => `the grant covering ${o.tool} is not valid yet; ask again once it starts (custody grant list shows when)`,
  budget_exhausted: (o) => `the grants covering ${o.tool} have no invocations or cost units left (custody grant list); an operator can add one: ${grantAdd(o.tool)}`,
  cost_exceeded: (o) => `the cost of ${o.tool} exceeds what its grant has left (custody grant list); ask for fewer cost units, or an operator adds a grant: ${grantAdd(o.tool)} --cost-units N`,
  subject_not_granted: (o) => `no grant covers ${o.tool} for this subject; an operator can add one: ${grantAdd(o.tool)}`,
  tool_unknown: (o) => `no executor serves ${o.tool}; add it to custody.json executors[].tools (with an adapter that serves it) and restart custody`,
  arguments_too_large: (o) =>
    `the arguments of ${o.tool} exceed the kernel's argument bound; shorten them, or raise kernel.settings.argument_bytes_per_tool in custody.json and restart custody`,
  nonce_store_full: () => 'the kernel holds as many live authorizations as it may (kernel.settings.nonce_capacity in custody.json); try again once some have ended',
  nonce_expired: (o) => `the authorization of ${o.request_id} expired before it was executed; nothing ran and the hold was released — authorize it again under a new name`,
  child_failed: (o) =>
    `the executor${o.executor ? ` ${o.executor}` : ''} that serves ${o.tool} is failed and waits for its cool-down (custody status shows when); custody restart CHILD starts it now, then ask again with the same name`,
  store_busy: (o) =>
    `a store stayed locked by another connection (an open write transaction, such as one left open in a sqlite3 shell; the service log names the store); nothing is lost: the service asks again once that transaction ends (COMMIT, ROLLBACK or close the shell), and asking for ${o.request_id} shows where it stands`,
  report_outside_window: (o) => `the executor's report of ${o.request_id} falls outside its window; an operator must look: custody trace ${o.request_id}`,
};

/**
 * The cause of a refusal in words, or null when the reason has no text here.
 * A report that carries the executor's refusal of the arguments (signed
 * before any claim) gives the adapter's own words, which name the size and
 * the bound or the argument at fault.
 */
export function causeOf(o: Pick<OperationOutcome, 'tool' | 'request_id' | 'reason'> & { readonly report?: string | null; readonly executor?: string | null }): string | null {
  const refusal = refusalOf(o.report ?? null);
  if (refusal?.code === 'epoch_retired' && o.reason === 'epoch_retired') {
    return `a key rotation retired the key this operation was authorized under before it was claimed: ${refusal.message}`;
  }
  if (refusal && refusal.code === o.reason) return `the executor refused the arguments before any claim: ${refusal.message}; nothing ran, and asking again with the same name answers the same — change the arguments and use a new name`;
  const cause = o.reason ? CAUSES[o.reason] : undefined;
  return cause ? cause(o) : null;
}

/** The refusal a signed report carries (execute refused the arguments before any claim), or null. */
export function refusalOf(report: string | null): { code: string; message: string } | null {
  if (!report) return null;
  try {
    const refusal = (readEnvelope(report).envelope.body as { refusal?: { code: string; message: string } }).refusal;
    return refusal ?? null;
  } catch {
    return null;
  }
}
