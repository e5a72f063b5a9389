// What each control API endpoint does. Handlers return plain JSON; errors
// are CustodyErrors, turned into fixed bodies by the server.
import type { z } from 'zod';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { nowMs } from '../../shared/clock.js';
import { withTimeout } from '../../shared/timeout.js';
import { newRequestId } from '../../shared/request-id.js';
import { causeOf } from '../operations/causes.js';
import { outcomeOf } from '../operations/outcome.js';
import { recoverRollback } from '../operations/rollback-recovery.js';
import type { RequestRow } from '../store/supervisor-store.js';
import type { Service } from '../service.js';
import type { TokenRole } from './http.js';
import type { ChildHandle } from '../children/child-handle.js';
import { type GrantKey, type GrantView, KERNEL_PAGE_MAX, type OperationKey } from '../../shared/protocol/kernel-messages.js';
import { refuseBeforeReserve } from './precheck.js';
import { DEFAULT_WAIT_MS } from './wait.js';
import { LISTING_LIMITS, pageKeyText, parseGrantPageKey, parseOperationPageKey } from './answers.js';
import type { authorizeBody, executeBody, grantAddBody, invokeBody, stepBody } from './bodies.js';

type Answer = Promise<{ status?: number; body: unknown }>;

export function health(service: Service) {
  return { status: service.stopping ? 'stopping' : 'ok', pid: process.pid, uptime_ms: service.uptimeMs };
}

function childView(service: Service, child: ChildHandle) {
  const counts = child.spec.role === 'executor' ? service.pool.counts(child.name) : null;
  return {
    name: child.name,
    role: child.spec.role,
    state: child.state,
    pid: child.session?.pid ?? null,
    sid: child.session?.sid ?? null,
    restarts: child.restarts,
    uptime_ms: child.uptimeMs,
    failure: child.failure?.message ?? null,
    /** A failed executor's automatic retry (restart.failed_cooldown_s), ms since the epoch. */
    next_retry_at: child.nextRetryAt,
    /** Executors: operations in flight on it now, and completed on it (signed report) since the service started. */
    operations: counts ? { in_flight: counts.in_flight, completed: counts.completed } : null,
  };
}

export function status(service: Service) {
  const children = [service.kernel, ...service.executors.values()].map((child) => childView(service, child));
  return {
    service: { pid: process.pid, port: service.port, state_dir: service.paths.root, started_at: service.startedAt, uptime_ms: service.uptimeMs, stopping: service.stopping },
    children,
    in_flight: service.driver.active,
  };
}

export async function restartChild(service: Service, name: string): Answer {
  const child = await service.restartChild(name);
  return { body: { child: childView(service, child) } };
}

/**
 * Wait for a drive up to `waitMs`; past it answer 202 with where the request
 * stands (the drive goes on). Once a request is logged, a failure to reach a
 * process is not the end of it either — the service carries it on — so that
 * too is a 202 with the request's state, never an error a client could read
 * as "nothing happened" and answer by asking again under a new id.
 */
async function answerDrive(service: Service, requestId: string, drive: Promise<RequestRow>, waitMs = DEFAULT_WAIT_MS): Answer {
  drive.catch(() => undefined);
  try {
    const row = await withTimeout(drive, waitMs, () => null);
    if (row) return { body: outcomeOf(row) };
  } catch (error) {
    const failure = toCustodyError(error);
    const current = service.store.getRequest(requestId);
    if (!current || !STILL_CARRIED.has(failure.errorClass) || NOT_CARRIED.has(failure.code)) throw current && failure.code !== 'request_conflict' ? naming(failure, requestId) : failure;
    return { status: 202, body: { ...outcomeOf(current), reason: failure.code } };
  }
  const current = service.store.getRequest(requestId);
  if (!current) throw new CustodyError('operation_unknown', `no operation ${requestId}`);
  return { status: 202, body: outcomeOf(current) };
}

/**
 * The failure of a logged request, naming it (the error body's request_id), so
 * a client that sent no name can ask again by this one. A copy: one error
 * object may answer several requests (a child's failure, given to every
 * waiter). Not a request_conflict, whose logged request is another's.
 */
function naming(failure: CustodyError, requestId: string): CustodyError {
  const named = new CustodyError(failure.code, failure.message, { cause: failure });
  named.requestId = requestId;
  return named;
}

/** Failure classes after which a logged request is still the service's to finish. */
const STILL_CARRIED: ReadonlySet<string> = new Set(['unreachable', 'unknown']);
/**
 * Codes of those classes that the caller must see as they are: a full disk
 * or a store locked from outside (the sqlite3 shell) ends the drive (the
 * recovery sweep carries the request on once space is freed or the lock
 * ends, operations/recovery.ts; asking again by its name, which the error
 * body gives, answers where it stands), and a quarantined request waits
 * for an operator.
 */
const NOT_CARRIED: ReadonlySet<string> = new Set(['reply_dropped', 'storage_full', 'store_busy', 'request_quarantined']);

export async function invoke(service: Service, body: z.infer<typeof invokeBody>, role: TokenRole): Answer {
  const wait = waitFrom(performance.now(), body.wait_ms);
  // A place under bounds.max_requests_in_flight from arrival through the check before the reserve, until submit()
  // counts the request (before its first await): requests waiting in that check together cannot pass the bound together.
  const release = service.requestBound.admit(body.request_id, role);
  const requestId = body.request_id ?? newRequestId();
  let drive: Promise<RequestRow>;
  try {
    await refuseBeforeReserve(service, body.request_id, body.tool, body.arguments);
    drive = service.driver.submit({ kind: 'invoke', request_id: requestId, tool: body.tool, subject: body.subject, arguments: body.arguments, cost_units: body.cost_units });
  } finally {
    release();
  }
  if (body.request_id !== undefined) return answerDrive(service, requestId, drive, wait());
  // A name the service picked: an error after it was logged says how to use it ("the same name" was one the client never had).
  return answerDrive(service, requestId, drive, wait()).catch((error: unknown) => {
    const failure = toCustodyError(error);
    if (failure.requestId === undefined) throw failure;
    const named = new CustodyError(failure.code, `${failure.message} — this request was logged as ${requestId}: ask again with request_id ${requestId}; sent again without it, it is a new request and may run twice`, { cause: failure });
    named.requestId = requestId;
    throw named;
  });
}

/** An authorize is the control token's (its route's access): never held to bounds.max_requests_in_flight. */
export async function authorize(service: Service, body: z.infer<typeof authorizeBody>): Answer {
  const wait = waitFrom(performance.now(), body.wait_ms);
  await refuseBeforeReserve(service, body.operation, body.tool, body.arguments);
  const drive = service.driver.submit({ kind: 'authorize', request_id: body.operation, tool: body.tool, subject: body.subject, arguments: body.arguments, cost_units: body.cost_units });
  return answerDrive(service, body.operation, drive, wait());
}

/**
 * The wait a call asked for counts from its arrival: the check before the
 * reserve (waiting for a running executor, the adapter's argument check)
 * spends it too, so a client that gives the answer its wait plus a margin
 * (supervisor/client/index.ts) hears by then.
 */
function waitFrom(arrived: number, asked: number | undefined): () => number {
  return () => Math.max(0, Math.round((asked ?? DEFAULT_WAIT_MS) - (performance.now() - arrived)));
}

function requireRequest(service: Service, name: string): RequestRow {
  const row = service.store.getRequest(name);
  if (!row) throw new CustodyError('operation_unknown', `no operation named ${name}`);
  return row;
}

export function execute(service: Service, name: string, body: z.infer<typeof executeBody>): Answer {
  requireRequest(service, name);
  return answerDrive(service, name, service.driver.drive(name, 'execute', { dropReply: body.drop_reply }), body.wait_ms);
}

export function step(service: Service, name: string, goal: 'report' | 'reconcile', body: z.infer<typeof stepBody>): Answer {
  requireRequest(service, name);
  return answerDrive(service, name, service.driver.drive(name, goal), body.wait_ms);
}

/**
 * Up to `limit` entries of a kernel listing (ops.list, grant.list) from
 * after `after`, asking page after page (each cut to one frame by the
 * kernel), and the key the next listing starts after: null once the
 * listing's end was reached.
 */
async function kernelPages<Item, Key>(
  ask: (after: Key | null, limit: number) => Promise<{ items: Item[]; next_after: Key | null }>,
  after: Key | null,
  limit = Number.POSITIVE_INFINITY,
): Promise<{ items: Item[]; next_after: Key | null }> {
  const items: Item[] = [];
  let next = after;
  do {
    const page = await ask(next, Math.min(limit - items.length, KERNEL_PAGE_MAX));
    items.push(...page.items);
    next = page.next_after;
  } while (next !== null && items.length < limit);
  return { items, next_after: next };
}

/** A read's wait for the kernel (timing.child_read_timeout_ms): it holds a place under bounds.max_reads_in_flight until answered. */
const readOf = (service: Service) => ({ timeoutMs: service.config.timing.child_read_timeout_ms });

/** A query's `limit`: `fallback` when absent or 0, at most `most` (LISTING_LIMITS: GET /v1/operations, /v1/grants, /v1/incidents). */
export function limitOf(query: URLSearchParams, { fallback, most }: { readonly fallback: number; readonly most: number }): number {
  return Math.min(Math.max(Number(query.get('limit') ?? fallback) || fallback, 1), most);
}

/** Phases read from supervisor.db between two turns of the event loop while a listing is answered. */
const PHASE_READS_PER_TURN = 1_000;

export async function listOperations(service: Service, query: URLSearchParams): Answer {
  const after = query.has('after') ? parseOperationPageKey(query.get('after')!) : null;
  const { items: operations, next_after } = await kernelPages(
    async (from: OperationKey | null, limit) => {
      const page = await service.kernel.request('ops.list', { states: null, limit, after: from }, readOf(service));
      return { items: page.operations, next_after: page.next_after };
    },
    after,
    limitOf(query, LISTING_LIMITS.operations),
  );
  const listed: Array<{ name: string; operation_id: string; tool: string; state: string | null; phase: string | null; updated_at: number; flag: string | null }> = [];
  for (let from = 0; from < operations.length; from += PHASE_READS_PER_TURN) {
    // A page of 100,000 read its phases in one turn (~3 s of a million-row supervisor.db): other requests wait a turn at most this many reads.
    if (from > 0) await new Promise((resolve) => setImmediate(resolve));
    for (const op of operations.slice(from, from + PHASE_READS_PER_TURN)) {
      // The phase alone (as this process knows it, a move not yet written included): the row's artifacts (~4 KB) are not listed.
      const phase = service.store.phaseOf(op.request_id) ?? null;
      listed.push({ name: op.request_id, operation_id: op.operation_id, tool: op.tool, state: op.state, phase, updated_at: op.updated_at, flag: op.flag });
    }
  }
  // A request quarantined before the kernel recorded it is listed too (state null), on the first page: every parked request is visible, once.
  const known = new Set(listed.map((op) => op.operation_id));
  for (const row of after === null ? service.store.quarantinedRequests() : []) {
    if (known.has(row.operation_id)) continue;
    // One the kernel recorded is on its own page of the listing (one it records between
    // the listing and this lookup shows on the next listing's first page).
    if ((await service.kernel.request('operation.get', { operation_id: row.operation_id, request_id: null }, readOf(service))).operation) continue;
    listed.push({ name: row.request_id, operation_id: row.operation_id, tool: row.tool, state: null, phase: row.phase, updated_at: row.updated_at, flag: 'quarantined' });
  }
  return { body: { operations: listed, next_after: next_after === null ? null : pageKeyText(next_after) } };
}

export async function showOperation(service: Service, name: string): Answer {
  const row = service.store.getRequest(name);
  const kernel = await service.kernel.request('operation.get', { operation_id: operationIdFor(name), request_id: null }, readOf(service));
  if (!row && !kernel.operation) throw new CustodyError('operation_unknown', `no operation named ${name}`);
  return { body: { request: row ? outcomeOf(row) : null, kernel: kernel.operation, receipts: kernel.receipts } };
}

/** The operation's timeline across the three stores. */
export async function trace(service: Service, name: string): Answer {
  const operationId = operationIdFor(name);
  const row = service.store.getRequest(name);
  const kernel = await service.kernel.request('operation.get', { operation_id: operationId, request_id: null }, readOf(service));
  if (!row && !kernel.operation) throw new CustodyError('operation_unknown', `no operation named ${name}`);
  const events: Array<{ at: number; store: string; event: string; detail: string }> = [];
  if (row) {
    events.push({ at: row.created_at, store: 'supervisor', event: 'request logged', detail: `${row.kind} ${row.tool}` });
    events.push({ at: row.updated_at, store: 'supervisor', event: `phase ${row.phase}`, detail: row.outcome ? `${row.outcome} (${row.reason ?? ''})` : '' });
  }
  for (const incident of service.store.incidentsFor(operationId)) {
    events.push({ at: incident.at, store: 'supervisor', event: incident.kind, detail: incident.message });
  }
  for (const text of kernel.receipts) {
    const body = readEnvelope(text).envelope.body as { issued_at?: number; decision?: string; verdict?: string; reason?: string; state?: string; hold?: { disposition?: string } };
    const cause = body.reason && body.reason !== 'ok' ? causeOf({ tool: row?.tool ?? kernel.operation?.tool ?? '', request_id: name, reason: body.reason, report: row?.report ?? null }) : null;
    events.push({ at: body.issued_at ?? 0, store: 'kernel', event: `receipt ${body.decision} ${body.verdict}`, detail: `reason ${body.reason}${cause ? ` (${cause})` : ''}, state ${body.state}, hold ${body.hold?.disposition}` });
  }
  const authorization = row?.authorization ?? kernel.operation?.authorization ?? null;
  if (authorization) {
    const body = readEnvelope(authorization).envelope.body as { issued_at: number; not_before: number; expires_at: number; executor: { id: string; key_epoch: number } };
    events.push({ at: body.issued_at, store: 'kernel', event: 'authorization signed', detail: `for ${body.executor.id} epoch ${body.executor.key_epoch}, window ${new Date(body.not_before).toISOString()} – ${new Date(body.expires_at).toISOString()}` });
  }
  if (row?.report) {
    const body = readEnvelope(row.report).envelope.body as { finished_at: number; status: string; claim_id: string; refusal?: { code: string; message: string } };
    const detail = body.refusal ? `refusal ${body.claim_id}, before any claim: ${body.refusal.code}: ${body.refusal.message}` : `claim ${body.claim_id}`;
    events.push({ at: body.finished_at, store: `executor ${row.executor ?? ''}`.trim(), event: `report signed: ${body.status}`, detail });
  }
  let claim: unknown = null;
  const executorId = row?.executor ?? null;
  if (executorId) {
    try {
      claim = (await service.executorById(executorId).request('claims.get', { operation_id: operationId }, { timeoutMs: 10_000 })).claim;
      const c = claim as { claimed_at: number | null; kind: string; report_status: string | null } | null;
      if (c?.claimed_at) events.push({ at: c.claimed_at, store: `executor ${executorId}`, event: c.kind, detail: `report ${c.report_status ?? 'none'}` });
    } catch (error) {
      events.push({ at: nowMs(), store: `executor ${executorId}`, event: 'unreachable', detail: toCustodyError(error).message });
    }
  }
  events.sort((a, b) => a.at - b.at);
  return { body: { name, operation_id: operationId, request: row ? outcomeOf(row) : null, kernel: kernel.operation, claim, events } };
}

/** Every retained artifact of an operation, as exact bytes, for `custody receipt export`. */
export async function artifacts(service: Service, name: string): Answer {
  const row = service.store.getRequest(name);
  const kernel = await service.kernel.request('operation.get', { operation_id: operationIdFor(name), request_id: null }, readOf(service));
  if (!row && !kernel.operation) throw new CustodyError('operation_unknown', `no operation named ${name}`);
  const files: Array<{ file: string; kind: string; text: string }> = [];
  kernel.receipts.forEach((text, index) => {
    const body = readEnvelope(text).envelope.body as { decision?: string };
    files.push({ file: `receipt-${index + 1}-${body.decision ?? 'decision'}.json`, kind: 'receipt', text });
  });
  const authorization = row?.authorization ?? kernel.operation?.authorization ?? null;
  if (authorization) files.push({ file: 'authorization.json', kind: 'authorization', text: authorization });
  if (row?.report) files.push({ file: 'report.json', kind: 'report', text: row.report });
  return { body: { name, operation_id: operationIdFor(name), kernel_public_key: service.store.getPin('kernel')?.public_key ?? null, artifacts: files } };
}

/**
 * Grants newest first, a page at a time (`limit`, default 1,000, at most
 * 10,000; `after` the previous answer's next_after), every grant ever issued
 * or (`live=true`) those neither expired nor revoked: a service that grants
 * per session piles up grants, and one answer held them all.
 */
export async function listGrants(service: Service, query: URLSearchParams): Answer {
  const after = query.has('after') ? parseGrantPageKey(query.get('after')!) : null;
  const { items: grants, next_after } = await kernelPages(grantPages(service, query.get('live') === 'true'), after, limitOf(query, LISTING_LIMITS.grants));
  return { body: { grants, next_after: next_after === null ? null : pageKeyText(next_after) } };
}

/**
 * Grants newest first, every page of the kernel's grant.list (each cut to
 * one frame); `live`: only those neither expired nor revoked, which the
 * kernel reads without the expired pile (kernel.db version 8).
 */
export async function kernelGrants(service: Service, live: boolean): Promise<GrantView[]> {
  return (await kernelPages(grantPages(service, live), null)).items;
}

/** How kernelPages asks for a page of grants. */
function grantPages(service: Service, live: boolean) {
  return async (after: GrantKey | null, limit: number) => {
    const page = await service.kernel.request('grant.list', { live, limit, after }, readOf(service));
    return { items: page.grants, next_after: page.next_after };
  };
}

export async function addGrant(service: Service, body: z.infer<typeof grantAddBody>): Answer {
  const grant = await service.kernel.request('grant.add', {
    tool: body.tool,
    subject: body.subject,
    max_invocations: body.max_invocations,
    max_cost_units: body.cost_units,
    not_before: body.not_before,
    ttl_ms: body.ttl_ms,
  });
  return { status: 201, body: grant };
}

/** DELETE /v1/grants/:id. A grant id the kernel does not know is 404, as an unknown operation is (the kernel's capability_unknown is its refusal to reserve). */
export async function revokeGrant(service: Service, id: string): Answer {
  try {
    return { body: await service.kernel.request('grant.revoke', { capability_id: id }) };
  } catch (error) {
    if (error instanceof CustodyError && error.code === 'capability_unknown') {
      throw new CustodyError('not_found', `no grant ${id}: GET /v1/grants (custody grant list) names every grant`);
    }
    throw error;
  }
}

export function incidents(service: Service, query: URLSearchParams) {
  const limit = limitOf(query, LISTING_LIMITS.incidents);
  return { incidents: service.store.recentIncidents(limit) };
}



/** Explicit archival (supervisor/operations/archival.ts): a pass over every executor's live ledger, or the one already running. */
export async function archive(service: Service): Answer {
  return { body: { executors: await service.archival.pass() } };
}

/** `custody recover-rollback NAME`: the way back for a ledger restored on purpose (docs/ROLLBACK.md). */
export async function recoverRollbackOf(service: Service, name: string): Answer {
  const executor = service.executors.get(name);
  if (!executor) throw new CustodyError('not_found', `no executor named ${name} is configured`);
  return { body: await recoverRollback(service.store, executor, service.config.bounds.max_frame_bytes) };
}

/** `custody executor rotate NAME` (supervisor/rotation.ts). */
export async function rotateExecutorKey(service: Service, name: string): Answer {
  if (!service.executors.has(name)) throw new CustodyError('not_found', `no executor named ${name} is configured; the executors are ${[...service.executors.keys()].join(', ')}`);
  return { body: await service.rotation.rotateExecutor(name) };
}

/** `custody kernel rotate`. */
export async function rotateKernelKey(service: Service): Answer {
  return { body: await service.rotation.rotateKernel() };
}

/** Every key epoch of the kernel and each executor, from the kernel's records (its epochs and its executor pins). */
export async function listKeys(service: Service): Answer {
  let keys = await service.kernel.request('keys.list', { after_epoch: 0 }, readOf(service));
  const kernel = [...keys.kernel];
  while (keys.kernel.length > 0 && kernel.at(-1)!.key_epoch < keys.kernel_epoch) {
    keys = await service.kernel.request('keys.list', { after_epoch: kernel.at(-1)!.key_epoch }, readOf(service));
    kernel.push(...keys.kernel);
  }
  const nameOf = new Map([...service.executors.keys()].map((name) => [service.store.getPin(name)?.identity_id, name]));
  return {
    body: {
      kernel: kernel.map((row) => ({ key_epoch: row.key_epoch, public_key: row.public_key, statement: row.statement })),
      executors: keys.executors.map((row) => ({ name: nameOf.get(row.executor_id) ?? row.executor_id, executor_id: row.executor_id, key_epoch: row.key_epoch, public_key: row.public_key })),
    },
  };
}
