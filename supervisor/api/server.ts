// The control API on 127.0.0.1 (ARCHITECTURE.md §8). One router parses every request
// in a fixed order, each step with its own answer: the target byte by byte
// (400), the method (405), the token (401), the path (404) and the method on
// it (405), the token's access (403), path parameters and query with the
// children's own schemas (400), then the body: its size (413), strict UTF-8
// (400), its depth on the raw bytes before JSON.parse (400), its closed
// schema (400), the kernel's argument bound (413). Only then a handler runs,
// so nothing a caller sends reaches a child as a frame the child would
// refuse (docs/SECURITY.md "The control API").
import { randomHex } from '../../shared/random-hex.js';
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http';
import type { Duplex } from 'node:stream';
import type { z } from 'zod';
import { CustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import { describeIssues } from '../../shared/wire/session.js';
import type { Service } from '../service.js';
import { readTokenFile } from '../tokens.js';
import { checkOperationName } from '../../shared/protocol/names.js';
import { IDENTIFIER_PATTERN, identifier } from '../../shared/protocol/common.js';
import { argumentBytesBound, argumentsDepthBudget, checkArgumentBytes } from '../../shared/protocol/bounds.js';
import { type Access, type BodyLimits, type TokenRole, TokenGate, readJsonBody, sendClientError, sendError, sendJson, sendText, unreadBody } from './http.js';
import { cutText } from '../../shared/text/cut.js';
import { boundConnections } from './connections.js';
import { archiveBody, authorizeBody, executeBody, grantAddBody, invokeBody, stepBody } from './bodies.js';
import { parseTarget } from './target.js';
import { PAGE_KEY } from './answers.js';
import * as handlers from './handlers.js';
import { listTools } from './tools.js';
import { openApiDocument } from './openapi.js';
import { ThrottledTally } from '../throttled-tally.js';

/** Refusals logged a line each per second; past it they are tallied every REFUSAL_TALLY_MS. */
const REFUSALS_LOGGED = 20;
const REFUSAL_TALLY_MS = 10_000;
/** A refused request's target and message in the log, cut to these many characters. */
const LOGGED_PATH_MAX = 256;
const LOGGED_MESSAGE_MAX = 1_024;

export interface ApiServer {
  readonly port: number;
  /** Stop accepting; resolves when every open request has been answered. */
  close(): Promise<void>;
  /** Drop whatever connections remain. */
  closeAll(): void;
}

interface RouteContext {
  readonly service: Service;
  readonly params: Record<string, string>;
  readonly query: URLSearchParams;
  /** The token the request carried, checked against the route's access (null on an open route). */
  readonly role: TokenRole;
  /** Read, bound, decode and check the body; `names` are members that must be valid names (name_invalid). */
  body<S extends z.ZodType>(schema: S, names?: readonly string[]): Promise<z.infer<S>>;
}

/** The methods the API serves; any other is 405 before the token is even looked at. */
const METHODS = ['GET', 'POST', 'DELETE'] as const;
type Method = (typeof METHODS)[number];

/** What a path parameter must be: an operation name (shared/protocol/names.ts) or a grant id (the kernel's own schema). */
type Param = 'name' | 'id';

interface Route {
  readonly method: Method;
  /** Literal segments, or `:name` / `:id` parameters. */
  readonly segments: readonly string[];
  readonly access: Access;
  /** Query parameters the route reads; any other is refused. */
  readonly query: readonly string[];
  readonly handle: (context: RouteContext) => Promise<RouteAnswer>;
  /** A route whose `open` access becomes `agent` when the configuration says so (GET /metrics: metrics.require_token). */
  readonly tokenWhen?: (service: Service) => boolean;
  /** A read that asks the kernel or an executor: it holds a place under bounds.max_reads_in_flight (api/read-bound.ts). */
  readonly asksChild?: true;
}

/** JSON, or (GET /metrics) text in a content type of its own. */
type RouteAnswer = { status?: number; body: unknown } | { text: string; contentType: string };

function accessOf(route: Route, service: Service): Access {
  return route.access === 'open' && route.tokenWhen?.(service) ? 'agent' : route.access;
}

function route(method: Method, path: string, access: Access, handle: Route['handle'], query: readonly string[] = []): Route {
  return { method, segments: path.slice(1).split('/'), access, query, handle };
}

/** A read that asks a child: bounded by bounds.max_reads_in_flight. */
function askingChild(read: Route): Route {
  return { ...read, asksChild: true };
}

const ROUTES: readonly Route[] = [
  route('GET', '/v1/health', 'open', ({ service }) => Promise.resolve({ body: handlers.health(service) })),
  route('GET', '/v1/status', 'agent', ({ service }) => Promise.resolve({ body: handlers.status(service) })),
  route('POST', '/v1/invoke', 'agent', async (c) => handlers.invoke(c.service, checkArguments(c.service, await c.body(invokeBody, ['request_id'])), c.role)),
  route('POST', '/v1/authorize', 'control', async (c) => handlers.authorize(c.service, checkArguments(c.service, await c.body(authorizeBody, ['operation'])))),
  askingChild(route('GET', '/v1/operations', 'agent', (c) => handlers.listOperations(c.service, c.query), ['limit', 'after'])),
  askingChild(route('GET', '/v1/operations/:name', 'agent', (c) => handlers.showOperation(c.service, c.params.name!))),
  askingChild(route('GET', '/v1/operations/:name/trace', 'agent', (c) => handlers.trace(c.service, c.params.name!))),
  askingChild(route('GET', '/v1/operations/:name/artifacts', 'agent', (c) => handlers.artifacts(c.service, c.params.name!))),
  route('POST', '/v1/operations/:name/execute', 'control', async (c) => handlers.execute(c.service, c.params.name!, await c.body(executeBody))),
  route('POST', '/v1/operations/:name/report', 'control', async (c) => handlers.step(c.service, c.params.name!, 'report', await c.body(stepBody))),
  route('POST', '/v1/operations/:name/reconcile', 'control', async (c) => handlers.step(c.service, c.params.name!, 'reconcile', await c.body(stepBody))),
  route('GET', '/v1/grants', 'control', (c) => handlers.listGrants(c.service, c.query), ['limit', 'after', 'live']),
  route('POST', '/v1/grants', 'control', async (c) => handlers.addGrant(c.service, await c.body(grantAddBody))),
  route('DELETE', '/v1/grants/:id', 'control', (c) => handlers.revokeGrant(c.service, c.params.id!)),
  route('POST', '/v1/archive', 'control', async (c) => (await c.body(archiveBody), handlers.archive(c.service))),
  route('POST', '/v1/children/:name/restart', 'control', (c) => handlers.restartChild(c.service, c.params.name!)),
  route('GET', '/v1/openapi.json', 'agent', () => Promise.resolve({ body: openApiDocument() })),
  askingChild(route('GET', '/v1/tools', 'agent', (c) => listTools(c.service, c.query), ['subject'])),
  route('POST', '/v1/executors/:name/recover-rollback', 'control', (c) => handlers.recoverRollbackOf(c.service, c.params.name!)),
  route('POST', '/v1/executors/:name/rotate', 'control', (c) => handlers.rotateExecutorKey(c.service, c.params.name!)),
  route('POST', '/v1/kernel/rotate', 'control', (c) => handlers.rotateKernelKey(c.service)),
  askingChild(route('GET', '/v1/keys', 'agent', (c) => handlers.listKeys(c.service))),
  route('GET', '/v1/incidents', 'agent', (c) => Promise.resolve({ body: handlers.incidents(c.service, c.query) }), ['limit']),
  // Open on 127.0.0.1 unless metrics.require_token (then the agent token); the Prometheus text format.
  { ...route('GET', '/metrics', 'open', async (c) => ({ text: await c.service.metrics.scrape(), contentType: c.service.metrics.contentType })), tokenWhen: (service) => service.config.metrics.require_token },
];

/**
 * A read that asks a child, under bounds.max_reads_in_flight. A child's
 * channel that refuses it at its own bound (too_many_in_flight: unsent, or
 * answered before anything was handled) did nothing a read could have done,
 * so the caller is told service_busy, 503, and asks again. Only here: on a
 * route that acts, the same refusal may come after something was done.
 */
async function readOfChild(service: Service, read: () => Promise<RouteAnswer>, role: TokenRole, channelFull: ThrottledTally, onRefused: () => void): Promise<RouteAnswer> {
  let release: () => void;
  try {
    release = service.readBound.admit(role);
  } catch (error) {
    onRefused();
    throw error;
  }
  try {
    return await read();
  } catch (error) {
    // A read the child did not answer in time (timing.child_read_timeout_ms): nothing to be unsure of, ask again.
    if (error instanceof CustodyError && error.code === 'deadline_exceeded') {
      throw new CustodyError('service_unavailable', `${error.message} (timing.child_read_timeout_ms): the read was given up; ask again in a moment`);
    }
    if (!(error instanceof CustodyError && error.code === 'too_many_in_flight')) throw error;
    channelFull.add();
    throw new CustodyError(
      'service_busy',
      `${error.message} (bounds.kernel_max_in_flight for the kernel, executors[].max_in_flight for an executor, each with 8 more kept for the channel's own messages); nothing was read: ask again in a moment`,
    );
  } finally {
    release();
  }
}

/** The parameters of a route whose segments match the path, or null. */
function matchPath(routeSegments: readonly string[], segments: readonly string[]): Array<[Param, string]> | null {
  if (routeSegments.length !== segments.length) return null;
  const params: Array<[Param, string]> = [];
  for (let i = 0; i < segments.length; i++) {
    const want = routeSegments[i]!;
    if (want.startsWith(':')) params.push([want.slice(1) as Param, segments[i]!]);
    else if (want !== segments[i]) return null;
  }
  return params;
}

/** A path parameter, checked with the schema the children apply, so no caller value reaches a child it would refuse. */
function checkParam(kind: Param, value: string): string {
  if (kind === 'name') return checkOperationName(value, 'operation name');
  if (!identifier.safeParse(value).success) {
    throw new CustodyError('name_invalid', `grant id ${JSON.stringify(value.slice(0, 80))} is not a valid id: use 1-128 characters of letters, digits and _ . : @ / + -, starting with a letter or digit`);
  }
  return value;
}

/** What each query parameter may hold; a parameter a route does not read is refused before this. */
const QUERY_VALUES: Record<string, { pattern: RegExp; what: string }> = {
  limit: { pattern: /^[0-9]{1,7}$/, what: 'a whole number of at most 7 digits' },
  after: { pattern: PAGE_KEY, what: 'the next_after of a previous answer (<time>.<id>)' },
  live: { pattern: /^(true|false)$/, what: 'true or false' },
  subject: { pattern: IDENTIFIER_PATTERN, what: 'a subject id (1-128 letters, digits and _ . : @ / + -)' },
};

function checkQuery(route: Route, query: ReadonlyMap<string, string>): URLSearchParams {
  for (const [name, value] of query) {
    if (!route.query.includes(name)) throw new CustodyError('target_invalid', `query parameter ${JSON.stringify(name.slice(0, 80))} is not read by this endpoint${route.query.length > 0 ? ` (it reads ${route.query.join(', ')})` : ''}`);
    const shape = QUERY_VALUES[name] ?? QUERY_VALUES.limit!;
    if (!shape.pattern.test(value)) throw new CustodyError('target_invalid', `query parameter ${name} must be ${shape.what}, got ${JSON.stringify(value.slice(0, 80))}`);
  }
  return new URLSearchParams([...query]);
}

/** The kernel's argument bound (bytes of canonical JSON), applied before anything is logged or sent. */
function checkArguments<T extends { tool: string; arguments: Record<string, unknown> }>(service: Service, body: T): T {
  checkArgumentBytes(body.arguments, body.tool, argumentBytesBound(service.config.kernel.settings, body.tool));
  return body;
}

export async function startApiServer(service: Service, port: number): Promise<ApiServer> {
  const gate = new TokenGate(readTokenFile(service.paths.agentToken), readTokenFile(service.paths.controlToken));
  const limits: BodyLimits = { maxBytes: service.config.bounds.max_body_bytes, maxDepth: argumentsDepthBudget(service.config.bounds.max_depth) + 1 };
  const log = service.log.child({ component: 'api' });

  /**
   * Connections that had a read refused at bounds.max_reads_in_flight. A
   * client pipelining a flood of reads would otherwise cost the event loop
   * a refusal for every request it queued, and slowed every invoke beside
   * it (16 such connections: invokes at p50 5.2 s). The refusal is the
   * connection's last answer; Node has already handed the requests parsed
   * after it to the router (it does so at once, one chunk at a time), and
   * those are refused here before anything runs: their answers are
   * dropped with the connection, so none of them (an invoke included) may
   * act. The refusal is decided synchronously, before the parser goes on.
   */
  const refusedConnections = new WeakSet<object>();
  const refuseConnection = (request: IncomingMessage, response: ServerResponse) => {
    refusedConnections.add(request.socket);
    response.shouldKeepAlive = false;
  };

  // A read refused by a child's channel at its own bound: tallied, once a run in a throttled line (readOfChild).
  const channelFull = new ThrottledTally(10_000, (refused) =>
    log.warn('channel_full', { refused, message: `${refused} reads answered service_busy since the last line because a child's channel carried its bound of requests (bounds.kernel_max_in_flight, an executor's max_in_flight)` }),
  );

  const serve = async (request: IncomingMessage, response: ServerResponse) => {
    // 0. A connection that had a read refused at the bound takes nothing more (refuseConnection).
    if (refusedConnections.has(request.socket)) {
      response.shouldKeepAlive = false;
      throw new CustodyError('service_busy', 'an earlier request on this connection was refused at a bound on reads in flight, so this one was not run: connect again and ask again in a moment');
    }
    // 1. The target, byte by byte (400): it tells nothing about the endpoints.
    const target = parseTarget(request.url ?? '');
    // 2. A method the API never serves (405), whatever the path.
    const method = request.method ?? '';
    if (!(METHODS as readonly string[]).includes(method)) {
      response.setHeader('allow', METHODS.join(', '));
      throw new CustodyError('method_not_allowed', `method ${JSON.stringify(method.slice(0, 32))} is not served; the API serves ${METHODS.join(', ')}`);
    }
    const candidates = ROUTES.map((r) => ({ route: r, params: matchPath(r.segments, target.segments) })).filter((c) => c.params !== null);
    const match = candidates.find((c) => c.route.method === method);
    // 3. The token: without one, nobody learns which endpoints exist.
    gate.check(request, match && accessOf(match.route, service) === 'open' ? 'open' : 'agent');
    // 4. The path (404) and the method on it (405).
    if (!match) {
      if (candidates.length > 0) {
        const allowed = candidates.map((c) => c.route.method).join(', ');
        response.setHeader('allow', allowed);
        throw new CustodyError('method_not_allowed', `${method} is not allowed on ${target.rawPath}; use ${allowed}`);
      }
      throw new CustodyError('not_found', `no endpoint ${JSON.stringify(target.rawPath.slice(0, 200))}`);
    }
    const access = accessOf(match.route, service);
    const role = gate.check(request, access);
    // 5. Parameters and query, with the children's own schemas (400).
    const params = Object.fromEntries(match.params!.map(([kind, value]) => [kind, checkParam(kind, value)]));
    const query = checkQuery(match.route, target.query);
    if (service.stopping && access !== 'open') throw new CustodyError('shutting_down', 'the service is shutting down');
    const context: RouteContext = {
      service,
      params,
      query,
      role,
      body: async (schema, names = []) => {
        const raw = await readJsonBody(request, limits);
        for (const name of names) {
          if (raw[name] === undefined) continue;
          if (typeof raw[name] !== 'string') throw new CustodyError('name_invalid', `${name} must be a string name`);
          checkOperationName(raw[name], name);
        }
        const parsed = schema.safeParse(raw);
        if (!parsed.success) throw new CustodyError('bad_request', describeIssues(parsed.error));
        return parsed.data;
      },
    };
    const answer = match.route.asksChild ? await readOfChild(service, () => match.route.handle(context), role, channelFull, () => refuseConnection(request, response)) : await match.route.handle(context);
    if (unreadBody(request)) response.shouldKeepAlive = false;
    if ('text' in answer) sendText(response, 200, answer.contentType, answer.text);
    else sendJson(response, answer.status ?? 200, answer.body);
  };

  // No Host check: the API listens on 127.0.0.1 only, and Node's own 400
  // for a missing Host would be a body without {code, message}.
  // The two receive timeouts below are checked every connectionsCheckingInterval (Node's default, 30 s, let a
  // connection that never finished its headers hold its slot under bounds.max_connections for up to 40 s).
  // Refusals are logged a line each up to REFUSALS_LOGGED a second, then tallied: a client
  // pipelining garbage must not turn a few bytes into a log many times their size.
  const refusalsTallied = new ThrottledTally(REFUSAL_TALLY_MS, (refused) =>
    log.info('api_refused_tallied', { refused, message: `${refused} more requests refused past ${REFUSALS_LOGGED} lines a second; each was answered with its code` }),
  );
  let refusalWindow = { start: 0, lines: 0 };
  const logRefusal = (event: string, fields: Record<string, unknown>) => {
    const now = performance.now();
    if (now - refusalWindow.start >= 1_000) refusalWindow = { start: now, lines: 0 };
    if (refusalWindow.lines++ < REFUSALS_LOGGED) log.info(event, fields);
    else refusalsTallied.add();
  };
  // The request being answered on each connection, if any: a clientError on it must not write over its answer.
  const answering = new WeakMap<object, { request: IncomingMessage; response: ServerResponse }>();
  /** A refusal written now would be read as another answer: that of an earlier request received whole, or this one's, begun. */
  const answerUnderWay = (socket: object): boolean => {
    const current = answering.get(socket);
    return current !== undefined && (current.request.complete || current.response.headersSent);
  };
  const server = createServer({ requireHostHeader: false, connectionsCheckingInterval: 1_000 }, (request, response) => {
    const socket = request.socket;
    const current = { request, response };
    answering.set(socket, current);
    response.once('close', () => {
      if (answering.get(socket) === current) answering.delete(socket);
    });
    serve(request, response).catch((error: unknown) => {
      // The refused request's name in the log, drawn only when one is refused. A flood's refusals at a bound on
      // requests or reads in flight are not a line each: requests_full, reads_full and channel_full tally them.
      if (!(error instanceof CustodyError && error.code === 'service_busy')) {
        const { message, ...rest } = errorFields(error);
        logRefusal('api_refused', { id: randomHex(4), method: request.method, path: cutText(request.url ?? '', LOGGED_PATH_MAX), ...rest, message: cutText(String(message), LOGGED_MESSAGE_MAX) });
      }
      if (response.headersSent) {
        response.end();
        return;
      }
      // Refused before its body was read (a token, a path, a bound): the connection closes after the answer, so the rest is not drained.
      // Past the body bound always: the read stopped there, even when the parser has since seen the body's end.
      if (unreadBody(request) || (error instanceof CustodyError && error.code === 'body_too_large')) response.shouldKeepAlive = false;
      sendError(response, error);
    });
  });
  // What Node's HTTP parser refuses (a method it does not know, bytes a
  // request line may not hold, headers past its bound) gets a fixed body too.
  server.on('clientError', (error: Error & { code?: string }, socket) => {
    logRefusal('api_client_error', { code: error.code ?? null, message: cutText(error.message, LOGGED_MESSAGE_MAX) });
    sendClientError(socket, error.code, answerUnderWay(socket));
  });
  // Expect: 100-continue: the client is told to send its body only when it holds a token and the body's announced
  // size is within the bound; otherwise it is answered without the body (Node would send 100 Continue to anyone).
  server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    const declared = Number(request.headers['content-length'] ?? '0');
    let tokened = true;
    try {
      gate.check(request, 'agent');
    } catch {
      tokened = false;
    }
    if (tokened && declared <= limits.maxBytes) response.writeContinue();
    server.emit('request', request, response);
  });
  // CONNECT is handed to a 'connect' listener, not to the router; Node would just close the socket.
  server.on('connect', (_request: IncomingMessage, socket: Duplex) => sendClientError(socket, 'HPE_INVALID_METHOD'));
  // An Expect header other than 100-continue: Node would answer 417 with no body.
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    sendError(response, new CustodyError('bad_request', `Expect: ${String(request.headers.expect).slice(0, 40)} is not supported; only 100-continue is`));
  });
  boundConnections(server, service.config.bounds.max_connections, log, () => service.metrics.connectionDropped());
  // Receiving a request (not answering it: an invoke may wait minutes) is bounded. Node wants the header timeout at most the request's.
  server.requestTimeout = service.config.timing.api_request_timeout_ms;
  server.headersTimeout = Math.min(service.config.timing.api_headers_timeout_ms, server.requestTimeout);
  await new Promise<void>((resolve, reject) => {
    const refused = (error: Error) => reject(new CustodyError('config_invalid', `cannot listen on 127.0.0.1:${port}: ${error.message}; is custody or another server using the port? choose another (port in custody.json, or custody start --port N; 0 picks a free one)`, { cause: error }));
    server.once('error', refused);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', refused);
      resolve();
    });
  });
  // Once listening, an error of the listening socket (an accept that failed) is logged; with no listener it would end the process.
  server.on('error', (error: NodeJS.ErrnoException) => log.warn('api_accept_failed', errorFields(error)));
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => (channelFull.close(), refusalsTallied.close(), resolve()));
        server.closeIdleConnections();
      }),
    closeAll: () => (channelFull.close(), refusalsTallied.close(), server.closeAllConnections()),
  };
}
