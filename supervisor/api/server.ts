// The control API on 127.0.0.1 (DESIGN §8). A route table maps method and
// path to the access it needs and its handler; the token gate runs before
// the body is read or any handler is called.
import { randomBytes } from 'node:crypto';
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http';
import { type z } from 'zod';
import { CustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import { describeIssues } from '../../shared/wire/session.js';
import { type Service } from '../service.js';
import { readTokenFile } from '../tokens.js';
import { type Access, TokenGate, readJsonBody, sendError, sendJson } from './http.js';
import { authorizeBody, executeBody, grantAddBody, invokeBody, stepBody } from './bodies.js';
import * as handlers from './handlers.js';

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
  body<S extends z.ZodType>(schema: S): Promise<z.infer<S>>;
}

interface Route {
  readonly method: 'GET' | 'POST' | 'DELETE';
  readonly pattern: RegExp;
  readonly names: readonly string[];
  readonly access: Access;
  readonly handle: (context: RouteContext) => Promise<{ status?: number; body: unknown }>;
}

function route(method: Route['method'], path: string, access: Access, handle: Route['handle']): Route {
  const names: string[] = [];
  const pattern = new RegExp('^' + path.replace(/:([a-z_]+)/g, (_m, name: string) => (names.push(name), '([^/]+)')) + '$');
  return { method, pattern, names, access, handle };
}

const ROUTES: readonly Route[] = [
  route('GET', '/v1/health', 'open', ({ service }) => Promise.resolve({ body: handlers.health(service) })),
  route('GET', '/v1/status', 'agent', ({ service }) => Promise.resolve({ body: handlers.status(service) })),
  route('POST', '/v1/invoke', 'agent', async (c) => handlers.invoke(c.service, await c.body(invokeBody))),
  route('POST', '/v1/authorize', 'control', async (c) => handlers.authorize(c.service, await c.body(authorizeBody))),
  route('GET', '/v1/operations', 'agent', (c) => handlers.listOperations(c.service, c.query)),
  route('GET', '/v1/operations/:name', 'agent', (c) => handlers.showOperation(c.service, c.params.name!)),
  route('GET', '/v1/operations/:name/trace', 'agent', (c) => handlers.trace(c.service, c.params.name!)),
  route('GET', '/v1/operations/:name/artifacts', 'agent', (c) => handlers.artifacts(c.service, c.params.name!)),
  route('POST', '/v1/operations/:name/execute', 'control', async (c) => handlers.execute(c.service, c.params.name!, await c.body(executeBody))),
  route('POST', '/v1/operations/:name/report', 'control', async (c) => handlers.step(c.service, c.params.name!, 'report', await c.body(stepBody))),
  route('POST', '/v1/operations/:name/reconcile', 'control', async (c) => handlers.step(c.service, c.params.name!, 'reconcile', await c.body(stepBody))),
  route('GET', '/v1/grants', 'control', (c) => handlers.listGrants(c.service)),
  route('POST', '/v1/grants', 'control', async (c) => handlers.addGrant(c.service, await c.body(grantAddBody))),
  route('DELETE', '/v1/grants/:id', 'control', (c) => handlers.revokeGrant(c.service, c.params.id!)),
  route('POST', '/v1/archive', 'control', (c) => handlers.archive(c.service)),
  route('POST', '/v1/executors/:name/recover-rollback', 'control', (c) => handlers.recoverRollbackOf(c.service, c.params.name!)),
  route('GET', '/v1/incidents', 'agent', (c) => Promise.resolve({ body: handlers.incidents(c.service, c.query) })),
];

function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new CustodyError('bad_request', `malformed percent-encoding in ${JSON.stringify(segment)}`);
  }
}

export async function startApiServer(service: Service, port: number): Promise<ApiServer> {
  const gate = new TokenGate(readTokenFile(service.paths.agentToken), readTokenFile(service.paths.controlToken));
  const limit = service.config.bounds.max_body_bytes;
  const log = service.log.child({ component: 'api' });

  const serve = async (request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://127.0.0.1');
    const candidates = ROUTES.filter((r) => r.pattern.test(url.pathname));
    const match = candidates.find((r) => r.method === request.method);
    // The token first: without one, nobody learns which endpoints exist.
    gate.check(request, match?.access === 'open' ? 'open' : 'agent');
    if (!match) {
      if (candidates.length > 0) throw new CustodyError('bad_request', `${request.method} is not allowed on ${url.pathname}`);
      throw new CustodyError('not_found', `no endpoint ${url.pathname}`);
    }
    gate.check(request, match.access);
    if (service.stopping && match.access !== 'open') throw new CustodyError('shutting_down', 'the service is shutting down');
    const values = match.pattern.exec(url.pathname)!.slice(1);
    const params = Object.fromEntries(match.names.map((name, i) => [name, decodePathSegment(values[i]!)]));
    const context: RouteContext = {
      service,
      params,
      query: url.searchParams,
      body: async (schema) => {
        const parsed = schema.safeParse(await readJsonBody(request, limit));
        if (!parsed.success) throw new CustodyError('bad_request', describeIssues(parsed.error));
        return parsed.data;
      },
    };
    const { status, body } = await match.handle(context);
    sendJson(response, status ?? 200, body);
  };

  const server = createServer((request, response) => {
    const id = randomBytes(4).toString('hex');
    serve(request, response).catch((error: unknown) => {
      log.info('api_refused', { id, method: request.method, path: request.url, ...errorFields(error) });
      if (!response.headersSent) sendError(response, error);
      else response.end();
    });
  });
  // Receiving a request (not answering it: an invoke may wait minutes) is bounded.
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) => reject(new CustodyError('config_invalid', `cannot listen on 127.0.0.1:${port}: ${error.message}`, { cause: error })));
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
    closeAll: () => server.closeAllConnections(),
  };
}
