// The typed client of the control API: `import { CustodyClient } from 'custody/client'`.
// Every call that starts something names it before sending (the request id or
// operation name is chosen here), so a transport failure is retried with the
// same name — the service answers a repeated name with the same operation,
// never a second one. Failures are CustodyErrors with the codes the CLI and the
// API use (shared/errors.ts); the README's "Exit codes" table says what each
// class means.
import { type IncomingMessage, request as httpRequest, type RequestOptions } from 'node:http';
import { CustodyError, isErrorCode } from '../../shared/errors.js';
import { newRequestId } from '../../shared/request-id.js';
import { statePaths } from '../paths.js';
import { readServiceFile } from '../service-file.js';
import { readTokenFile } from '../tokens.js';
import type { OperationOutcome } from '../operations/outcome-view.js';
import { DEFAULT_WAIT_MS, MAX_WAIT_MS } from '../api/wait.js';

export { CustodyError, isCustodyError, classOf, type ErrorCode, type ErrorClass } from '../../shared/errors.js';

// ----------------------------------------------------------------- answers

/** Where an operation stands (supervisor/operations/outcome-view.ts, the service's own type). */
export type { OperationOutcome } from '../operations/outcome-view.js';

/** An operation answer: 200 once it ended, 202 when `wait_ms` passed first (the service carries on). */
export interface DriveAnswer extends OperationOutcome {
  /** 200 or 202. */
  readonly http_status: number;
}

export interface Health {
  readonly status: 'ok' | 'stopping';
  readonly pid: number;
  readonly uptime_ms: number;
}

export interface ChildStatus {
  readonly name: string;
  readonly role: 'kernel' | 'executor';
  readonly state: 'stopped' | 'starting' | 'running' | 'backoff' | 'failed' | 'stopping';
  readonly pid: number | null;
  readonly sid: string | null;
  readonly restarts: number;
  readonly uptime_ms: number | null;
  readonly failure: string | null;
  /** A failed executor's automatic retry (restart.failed_cooldown_s), ms since the epoch. */
  readonly next_retry_at: number | null;
  /** Executors: operations in flight on it now and completed on it since the service started; null for the kernel. */
  readonly operations: { readonly in_flight: number; readonly completed: number } | null;
}

export interface Status {
  readonly service: { pid: number; port: number; state_dir: string; started_at: number; uptime_ms: number; stopping: boolean };
  readonly children: ChildStatus[];
  readonly in_flight: number;
}

export interface ToolInfo {
  readonly tool: string;
  readonly description: string | null;
  readonly contract: 'read_only' | 'idempotent' | 'durable' | null;
  /** JSON Schema of the arguments (a superset: the executor still checks every bound); null when the adapter's schema is not zod. */
  readonly input_schema: Record<string, unknown> | null;
  readonly max_argument_bytes: number;
  readonly executor: string;
  readonly grants: Array<{ capability_id: string; tool_pattern: string; remaining_invocations: number; expires_at: number }>;
}

export interface Tools {
  readonly subject: string;
  readonly tools: ToolInfo[];
  /** Executors that did not answer; their tools are missing from `tools`. */
  readonly unavailable: Array<{ executor: string; reason: string }>;
}

export interface OperationSummary {
  readonly name: string;
  readonly operation_id: string;
  readonly tool: string;
  /** The kernel's state; null for a request quarantined before the kernel recorded it (listed on the first page). */
  readonly state: string | null;
  readonly phase: string | null;
  readonly updated_at: number;
  readonly flag: string | null;
}

/** One page of a listing, newest first: `next_after` is the `after` that asks for the next page, null after the last. */
export interface Page<T> {
  readonly items: T[];
  readonly next_after: string | null;
}

export interface OperationDetail {
  readonly request: OperationOutcome | null;
  readonly kernel: Record<string, unknown> | null;
  readonly receipts: string[];
}

export interface Trace {
  readonly name: string;
  readonly operation_id: string;
  readonly request: OperationOutcome | null;
  readonly kernel: Record<string, unknown> | null;
  readonly claim: Record<string, unknown> | null;
  readonly events: Array<{ at: number; store: string; event: string; detail: string }>;
}

export interface Artifacts {
  readonly name: string;
  readonly operation_id: string;
  readonly kernel_public_key: string | null;
  readonly artifacts: Array<{ file: string; kind: string; text: string }>;
}

export interface Grant {
  /** The signed capability (exact JSON text). */
  readonly capability: string;
  readonly capability_id: string;
  readonly revoked_at: number | null;
  readonly invocations_used: number;
  readonly invocations_held: number;
  readonly cost_units_used: number;
  readonly cost_units_held: number;
}

export interface Incident {
  readonly [field: string]: unknown;
}

// ----------------------------------------------------------------- requests

export interface InvokeRequest {
  readonly tool: string;
  readonly arguments?: Record<string, unknown>;
  /** The idempotency key; chosen by the client when absent (see `newRequestId`). */
  readonly request_id?: string;
  readonly subject?: string;
  readonly cost_units?: number;
  /** How long the service waits for the end before answering 202 with the state so far. */
  readonly wait_ms?: number;
}

export interface AuthorizeRequest {
  readonly tool: string;
  readonly operation: string;
  readonly arguments?: Record<string, unknown>;
  readonly subject?: string;
  readonly cost_units?: number;
  readonly wait_ms?: number;
}

export interface GrantRequest {
  readonly tool: string;
  readonly max_invocations: number;
  readonly ttl_ms: number;
  readonly cost_units?: number | null;
  readonly subject?: string;
  readonly not_before?: number | null;
}

export interface CustodyClientOptions {
  /** Base URL of the control API, e.g. http://127.0.0.1:7410 */
  readonly url: string;
  /** The agent token or the control token. */
  readonly token: string;
  /** Further attempts after a transport failure of an idempotent call (default 3). */
  readonly retries?: number;
  /** Pause before the first retry, doubled for each further one (default 200 ms); each pause is drawn between half of it and all of it (retryPause). */
  readonly retryDelayMs?: number;
  /**
   * How long a call waits for the service's answer (default 30 s), beyond the
   * `wait_ms` it asks the service to wait (for a POST that names none, the
   * service's own 120 s, supervisor/api/wait.ts). A service that accepts the
   * connection and never answers (stopped with SIGSTOP, or hung) then fails
   * the call at once, not retried: a read as `service_unavailable`, a POST as
   * `outcome_unknown`.
   */
  readonly answerTimeoutMs?: number;
}

/** What answerTimeoutMs is when not given. */
export const DEFAULT_ANSWER_TIMEOUT_MS = 30_000;
/** The longest answerTimeoutMs: a day (a socket timeout above 2^31 - 1 ms would be cut to 1 ms by Node). */
export const MAX_ANSWER_TIMEOUT_MS = 86_400_000;

/** A request id as the CLI chooses one: `req-<time base36>-<12 hex>` (shared/request-id.ts). */
export { newRequestId };

/** Transport errors after which nothing reached the service. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOENT', 'EADDRNOTAVAIL', 'ENOTFOUND']);

/**
 * POST routes whose repeat is a second act, not the same one: a second grant,
 * a second key rotation (operations authorized under the key in between are
 * then refused `epoch_retired`), a second restart (every operation in flight
 * on the child cut again). A transport failure that may have reached the
 * service is not retried on them.
 */
const NOT_REPEATABLE: readonly RegExp[] = [/^\/v1\/grants$/, /^\/v1\/kernel\/rotate$/, /^\/v1\/executors\/[^/]+\/rotate$/, /^\/v1\/children\/[^/]+\/restart$/];

/** Whether a call may be sent again after a transport failure that may have reached the service. */
export function repeatable(method: string, path: string): boolean {
  return !(method === 'POST' && NOT_REPEATABLE.some((route) => route.test(path)));
}

type Requester = (url: URL, options: RequestOptions, answered: (response: IncomingMessage) => void) => ReturnType<typeof httpRequest>;

/** node:https only for an https address: loading TLS would cost every other call its start-up time. */
async function requesterFor(url: URL): Promise<Requester> {
  return url.protocol === 'https:' ? (await import('node:https')).request : httpRequest;
}

/** A connection reset before any byte of an answer (not one cut in the middle of it). */
export function resetUnanswered(cause: unknown): boolean {
  const error = cause as { code?: unknown; answerCut?: unknown } | null;
  return error?.code === 'ECONNRESET' && error.answerCut !== true;
}

/**
 * One HTTP exchange with node:http, not fetch. Node's fetch (undici) parses
 * HTTP in WebAssembly, which V8 compiles again in the background, and a
 * process does not exit before that compile ends: a CLI call had its answer
 * ~55 ms later and exited ~160 ms after printing it (docs/PERFORMANCE.md,
 * "The CLI's HTTP client"). A failure carries Node's `code` (ECONNREFUSED,
 * ECONNRESET, ...); a body cut short fails the exchange like a broken
 * connection, since its status alone says nothing of what was decided.
 */
async function exchange(url: URL, method: string, headers: Record<string, string>, body: string | undefined, silenceMs: number): Promise<{ status: number; text: string }> {
  const requester = await requesterFor(url);
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(body, 'utf8');
    // Once an answer has begun, a failure is an answer cut short (resetUnanswered tells the two apart).
    let answering = false;
    const fail = (error: Error) => reject(answering && !(error instanceof AnswerTimeout) ? Object.assign(error, { answerCut: true }) : error);
    const request = requester(url, { method, headers: payload ? { ...headers, 'content-length': String(payload.length) } : headers, timeout: silenceMs }, (response) => {
      answering = true;
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      response.on('error', fail);
      response.on('close', () => {
        if (!response.complete) fail(Object.assign(new Error('the connection closed in the middle of the answer'), { code: 'ECONNRESET' }));
      });
    });
    request.on('timeout', () => request.destroy(new AnswerTimeout(silenceMs)));
    request.on('error', fail);
    request.end(payload);
  });
}

/** The service said nothing for as long as the call allowed. */
class AnswerTimeout extends Error {
  readonly code = 'ETIMEDOUT';
  constructor(readonly silenceMs: number) {
    super(`no answer within ${silenceMs} ms`);
  }
}

/**
 * How long the service may take to answer on purpose, on top of which
 * answerTimeoutMs runs: a POST's `wait_ms`, which the service counts from
 * the call's arrival (supervisor/api/handlers.ts), or the service's own wait
 * for one that names none (given to every POST, the ones that drive nothing
 * and answer sooner included: a restart or a rotation waits for a child's
 * hello); nothing for a read.
 */
function askedWaitMs(method: string, body: unknown): number {
  if (method !== 'POST') return 0;
  const wait = (body as { wait_ms?: unknown } | undefined)?.wait_ms;
  // A wait past the service's bound is refused by it at once (bad_request); the client's own deadline need not be longer.
  return typeof wait === 'number' && Number.isSafeInteger(wait) && wait >= 0 ? Math.min(wait, MAX_WAIT_MS) : DEFAULT_WAIT_MS;
}

function parseAnswer(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The pause before retry `attempt` (0 first): `delayMs` doubled per attempt,
 * drawn between half of that and all of it. Clients refused together
 * (service_busy, a restart) would otherwise all ask again at the same
 * instant, and be refused together again.
 */
export function retryPause(delayMs: number, attempt: number, random: () => number = Math.random): number {
  const full = delayMs * 2 ** attempt;
  return full / 2 + (full / 2) * random();
}
const segment = (name: string) => encodeURIComponent(name);

/** A query string of the options that are set (`?limit=10&after=…`), or ''. */
function query(options: Record<string, string | number | boolean | undefined>): string {
  const set = new URLSearchParams();
  for (const [name, value] of Object.entries(options)) if (value !== undefined) set.append(name, String(value));
  return set.size === 0 ? '' : `?${set.toString()}`;
}

export class CustodyClient {
  readonly url: string;
  readonly #token: string;
  readonly #retries: number;
  readonly #retryDelayMs: number;
  readonly #answerTimeoutMs: number;

  constructor(options: CustodyClientOptions) {
    this.url = options.url.replace(/\/+$/, '');
    if (!URL.canParse(this.url) || !['http:', 'https:'].includes(new URL(this.url).protocol)) {
      throw new CustodyError('usage', `the control API's address must be an http:// or https:// URL such as http://127.0.0.1:8421, got ${JSON.stringify(options.url.slice(0, 200))}`);
    }
    this.#token = options.token;
    this.#retries = options.retries ?? 3;
    this.#retryDelayMs = options.retryDelayMs ?? 200;
    this.#answerTimeoutMs = options.answerTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS;
    if (!Number.isSafeInteger(this.#answerTimeoutMs) || this.#answerTimeoutMs < 1 || this.#answerTimeoutMs > MAX_ANSWER_TIMEOUT_MS) {
      throw new CustodyError('usage', `answerTimeoutMs must be a whole number of milliseconds from 1 to ${MAX_ANSWER_TIMEOUT_MS} (a day), got ${String(options.answerTimeoutMs)}`);
    }
  }

  /**
   * A client for the service running on a state directory: its address from
   * supervisor/service.json, and its agent token (`role: 'control'` for the
   * control token). The address is read now: restart the service, make a new client.
   */
  static fromState(stateDir: string, options: { role?: 'agent' | 'control'; retries?: number; retryDelayMs?: number; answerTimeoutMs?: number } = {}): CustodyClient {
    const paths = statePaths(stateDir);
    const { port } = readServiceFile(paths);
    const token = readTokenFile(options.role === 'control' ? paths.controlToken : paths.agentToken);
    return new CustodyClient({ url: `http://127.0.0.1:${port}`, token, ...options });
  }

  // --------------------------------------------------------------- service

  health(): Promise<Health> {
    return this.#get('/v1/health');
  }

  status(): Promise<Status> {
    return this.#get('/v1/status');
  }

  /** The tools a live grant covers for `subject` (default agent), with their argument schemas. */
  tools(subject?: string): Promise<Tools> {
    return this.#get(`/v1/tools${subject ? `?subject=${encodeURIComponent(subject)}` : ''}`);
  }

  /** The OpenAPI description of the control API. */
  openapi(): Promise<Record<string, unknown>> {
    return this.#get('/v1/openapi.json');
  }

  incidents(limit?: number): Promise<{ incidents: Incident[] }> {
    return this.#get(`/v1/incidents${limit ? `?limit=${limit}` : ''}`);
  }

  // ------------------------------------------------------------ operations

  /** Run a tool call end to end. The request id is fixed before sending; a retry sends it again. */
  invoke(request: InvokeRequest): Promise<DriveAnswer> {
    const body = { ...request, arguments: request.arguments ?? {}, request_id: request.request_id ?? newRequestId() };
    return this.#drive('/v1/invoke', body, body.request_id);
  }

  /** Reserve and commit the start of an operation named `operation`, without executing it (control token). */
  authorize(request: AuthorizeRequest): Promise<DriveAnswer> {
    return this.#drive('/v1/authorize', { ...request, arguments: request.arguments ?? {} }, request.operation);
  }

  /** Execute an authorized operation; repeating it replays the retained report (control token). */
  execute(name: string, options: { drop_reply?: boolean; wait_ms?: number } = {}): Promise<DriveAnswer> {
    return this.#drive(`/v1/operations/${segment(name)}/execute`, options, name);
  }

  /** Give the executor's signed report to the kernel (control token). */
  report(name: string, options: { wait_ms?: number } = {}): Promise<DriveAnswer> {
    return this.#drive(`/v1/operations/${segment(name)}/report`, options, name);
  }

  /** Ask the executor what became of an operation and settle it; never re-runs an effect (control token). */
  reconcile(name: string, options: { wait_ms?: number } = {}): Promise<DriveAnswer> {
    return this.#drive(`/v1/operations/${segment(name)}/reconcile`, options, name);
  }

  /** The newest operations: the first page (`limit`, default 200); `opsPage` pages further. */
  async ops(options: { limit?: number } = {}): Promise<OperationSummary[]> {
    return (await this.opsPage(options)).items;
  }

  /** One page of operations, newest first, after `after` (a previous page's `next_after`). */
  async opsPage(options: { limit?: number; after?: string } = {}): Promise<Page<OperationSummary>> {
    const answer = await this.#get<{ operations: OperationSummary[]; next_after: string | null }>(`/v1/operations${query(options)}`);
    return { items: answer.operations, next_after: answer.next_after };
  }

  operation(name: string): Promise<OperationDetail> {
    return this.#get(`/v1/operations/${segment(name)}`);
  }

  trace(name: string): Promise<Trace> {
    return this.#get(`/v1/operations/${segment(name)}/trace`);
  }

  artifacts(name: string): Promise<Artifacts> {
    return this.#get(`/v1/operations/${segment(name)}/artifacts`);
  }

  // ---------------------------------------------------------------- grants

  /** Every grant, newest first, read page by page (`live`: only those neither expired nor revoked). */
  async grants(options: { live?: boolean } = {}): Promise<Grant[]> {
    const all: Grant[] = [];
    for (let after: string | undefined; ; ) {
      const page = await this.grantsPage({ ...options, after });
      all.push(...page.items);
      if (page.next_after === null) return all;
      // A listing moves on each page; one that does not would be asked forever.
      if (page.next_after === after) throw new CustodyError('unexpected_message', `GET /v1/grants answered next_after ${page.next_after} again; the listing does not advance`);
      after = page.next_after;
    }
  }

  /** One page of grants, newest first, after `after` (a previous page's `next_after`). */
  async grantsPage(options: { limit?: number; after?: string; live?: boolean } = {}): Promise<Page<Grant>> {
    const answer = await this.#get<{ grants: Grant[]; next_after: string | null }>(`/v1/grants${query(options)}`);
    return { items: answer.grants, next_after: answer.next_after };
  }

  /** Not retried after a transport failure that may have reached the service: a second grant would be a second grant. */
  async addGrant(request: GrantRequest): Promise<Grant> {
    return (await this.#call('POST', '/v1/grants', request, { idempotent: false })).body as unknown as Grant;
  }

  async revokeGrant(capabilityId: string): Promise<Grant> {
    return (await this.#call('DELETE', `/v1/grants/${segment(capabilityId)}`, undefined, { idempotent: true })).body as unknown as Grant;
  }

  async archive(): Promise<{ executors: Array<{ executor: string; archived: number; live: number; kept: Record<string, number> }> }> {
    return (await this.#call('POST', '/v1/archive', {}, { idempotent: true })).body as never;
  }

  // ------------------------------------------------------------- transport

  /**
   * Any route: `idempotent` says whether a transport failure may be retried
   * with the same body (true for everything but POST /v1/grants); `name` is
   * what an `outcome_unknown` tells the caller to ask about again.
   */
  request(method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown, options: { idempotent?: boolean; name?: string } = {}): Promise<{ status: number; body: Record<string, unknown> }> {
    const idempotent = options.idempotent ?? repeatable(method, path);
    return this.#call(method, path, body, { idempotent, ...(options.name === undefined ? {} : { name: options.name }) });
  }

  async #get<T>(path: string): Promise<T> {
    return (await this.#call('GET', path, undefined, { idempotent: true })).body as T;
  }

  async #drive(path: string, body: unknown, name: string): Promise<DriveAnswer> {
    const { status, body: answer } = await this.#call('POST', path, body, { idempotent: true, name });
    return { ...(answer as unknown as OperationOutcome), http_status: status };
  }

  /**
   * One HTTP call. A transport failure of an idempotent call is retried with
   * the same body; when retries run out, a GET (or a connection that was
   * refused: nothing was sent) is `service_unavailable`, and a POST that may
   * have reached the service is `outcome_unknown`, naming what to ask again.
   * A `service_busy` answer (nothing recorded) is retried the same way.
   */
  async #call(method: string, path: string, body: unknown, options: { idempotent: boolean; name?: string }): Promise<{ status: number; body: Record<string, unknown> }> {
    const url = new URL(`${this.url}${path}`);
    const headers = { authorization: `Bearer ${this.#token}`, 'content-type': 'application/json' };
    const payload = body === undefined ? undefined : JSON.stringify(body);
    // wait_ms is at most an hour (supervisor/api/bodies.ts): the sum stays far below Node's timer limit.
    const silenceMs = this.#answerTimeoutMs + askedWaitMs(method, body);
    // Why an earlier attempt may have reached the service, if one may have: a
    // POST recorded before its connection broke runs when the service is back,
    // so a later attempt that finds nobody listening does not make it "not sent".
    let maybeSentBefore: string | null = null;
    for (let attempt = 0; ; attempt++) {
      let response: { status: number; text: string };
      try {
        response = await exchange(url, method, headers, payload, silenceMs);
      } catch (cause) {
        if (cause instanceof AnswerTimeout) throw this.#unanswered(method, path, cause, options.name);
        const code = (cause as { code?: unknown }).code;
        const why = typeof code === 'string' ? code : (cause as Error).message;
        const notSent = method === 'GET' || (typeof code === 'string' && NOT_SENT.has(code));
        if ((options.idempotent || notSent) && attempt < this.#retries) {
          if (!notSent) maybeSentBefore ??= why;
          await sleep(retryPause(this.#retryDelayMs, attempt));
          continue;
        }
        const again = options.name ? `; ask again with the same name (${options.name})` : '';
        if (notSent && maybeSentBefore !== null) {
          throw new CustodyError('outcome_unknown', `the connection to custody broke after ${method} ${path} was sent (${maybeSentBefore}), and custody no longer answers at ${this.url} (${why}): it may have recorded the call and carry it out once it is back${again}`, { cause });
        }
        // A reset before any answer: a running service at its connection bound closes new ones unread (docs/SECURITY.md "Connections").
        if (notSent && resetUnanswered(cause)) {
          throw new CustodyError('service_unavailable', `custody at ${this.url} closed the connection unanswered (ECONNRESET): it may be at its connection bound (bounds.max_connections; its log says api_connections_full) or stopping; try again shortly`, { cause });
        }
        if (notSent) throw new CustodyError('service_unavailable', `custody does not answer at ${this.url}: ${why}`, { cause });
        throw new CustodyError('outcome_unknown', `the connection to custody broke after ${method} ${path} was sent (${why}); it may still complete${again}`, { cause });
      }
      const answer = parseAnswer(response.text);
      // Refused at the service's bound on requests or reads in flight before anything was recorded: the same body again, later.
      if (response.status === 503 && answer.code === 'service_busy' && attempt < this.#retries) {
        await sleep(retryPause(this.#retryDelayMs, attempt));
        continue;
      }
      if (response.status >= 400) {
        const code = typeof answer.code === 'string' && isErrorCode(answer.code) ? answer.code : 'internal';
        const failure = new CustodyError(code, typeof answer.message === 'string' ? answer.message : `HTTP ${response.status} from ${method} ${path}`);
        // The request the service logged before it failed: ask again by it (error.requestId).
        if (typeof answer.request_id === 'string') failure.requestId = answer.request_id;
        throw failure;
      }
      return { status: response.status, body: answer };
    }
  }

  /** A call the service took and did not answer in time: asking again would wait as long, so it is not retried. */
  #unanswered(method: string, path: string, cause: AnswerTimeout, name: string | undefined): CustodyError {
    const waited = `custody at ${this.url} took ${method} ${path} and did not answer within ${cause.silenceMs} ms: it may be stopped (SIGSTOP) or hung, or slower than that (raise the answer timeout)`;
    if (method === 'GET') return new CustodyError('service_unavailable', waited, { cause });
    const again = name ? `; ask again with the same name (${name})` : '';
    return new CustodyError('outcome_unknown', `${waited}; the call may still complete${again}`, { cause });
  }
}
