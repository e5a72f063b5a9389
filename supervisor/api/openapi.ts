// GET /v1/openapi.json: the control API described as OpenAPI 3.1, generated
// from the zod schemas the server validates bodies with (bodies.ts) and the
// answer schemas (answers.ts), so the description follows the code. The route
// list below must name every route of server.ts: a test compares them.
import { z } from 'zod';
import { identifier, toolPattern } from '../../shared/protocol/common.js';
import { operationName } from '../../shared/protocol/names.js';
import * as answers from './answers.js';
import type { Access } from './http.js';
import { archiveBody, authorizeBody, executeBody, grantAddBody, invokeBody, stepBody } from './bodies.js';

interface RouteDoc {
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** The path as server.ts writes it (`:name` parameters). */
  readonly path: string;
  readonly access: Access;
  readonly summary: string;
  readonly body?: z.ZodType;
  readonly query?: Record<string, { schema: z.ZodType; description: string }>;
  /** Success answers by HTTP status. */
  readonly answers: Record<number, z.ZodType>;
  /** A success answered as text in this content type instead of JSON (GET /metrics). */
  readonly textAnswer?: { readonly contentType: string; readonly description: string };
  /** `open` here, but the configuration may require a token (GET /metrics: metrics.require_token). */
  readonly tokenConfigurable?: string;
}

/** What GET /metrics answers: prom-client's Prometheus text exposition format. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const drive = { 200: answers.outcomeAnswer, 202: answers.outcomeAnswer };
const limit = ({ fallback, most }: { readonly fallback: number; readonly most: number }) => ({
  limit: { schema: z.number().int().min(0).max(most), description: `at most this many (default ${fallback}, also for 0; at most ${most})` },
});

export const API_ROUTES: readonly RouteDoc[] = [
  { method: 'GET', path: '/v1/health', access: 'open', summary: 'liveness', answers: { 200: answers.healthAnswer } },
  { method: 'GET', path: '/v1/status', access: 'agent', summary: 'the service and its children', answers: { 200: answers.statusAnswer } },
  { method: 'GET', path: '/v1/openapi.json', access: 'agent', summary: 'this description', answers: { 200: answers.openApiAnswer } },
  {
    method: 'GET',
    path: '/v1/tools',
    access: 'agent',
    summary: 'tools an executor serves and a live grant covers, with their argument JSON Schema',
    query: { subject: { schema: identifier, description: 'the subject grants must cover (default agent)' } },
    answers: { 200: answers.toolsAnswer },
  },
  { method: 'POST', path: '/v1/invoke', access: 'agent', summary: 'run a tool call end to end; 200 when it ended, 202 with the state so far', body: invokeBody, answers: drive },
  { method: 'POST', path: '/v1/authorize', access: 'control', summary: 'reserve and commit the start of a named operation', body: authorizeBody, answers: drive },
  {
    method: 'GET',
    path: '/v1/operations',
    access: 'agent',
    summary: "list operations, newest first, a page at a time: an answer's next_after is the key the next page starts after (null after the last)",
    query: { ...limit(answers.LISTING_LIMITS.operations), after: { schema: z.string().regex(answers.OPERATION_PAGE_KEY), description: "the operations after this key, newest first (default: from the newest): the previous answer's next_after" } },
    answers: { 200: answers.operationsAnswer },
  },
  { method: 'GET', path: '/v1/operations/:name', access: 'agent', summary: 'an operation: request, kernel view, receipts', answers: { 200: answers.operationAnswer } },
  { method: 'GET', path: '/v1/operations/:name/trace', access: 'agent', summary: "an operation's timeline across the three stores", answers: { 200: answers.traceAnswer } },
  { method: 'GET', path: '/v1/operations/:name/artifacts', access: 'agent', summary: 'every retained signed artifact, exact text', answers: { 200: answers.artifactsAnswer } },
  { method: 'POST', path: '/v1/operations/:name/execute', access: 'control', summary: 'execute an authorized operation (replays the retained report)', body: executeBody, answers: drive },
  { method: 'POST', path: '/v1/operations/:name/report', access: 'control', summary: "settle with the executor's retained report", body: stepBody, answers: drive },
  { method: 'POST', path: '/v1/operations/:name/reconcile', access: 'control', summary: 'ask the executor what became of the operation, then settle', body: stepBody, answers: drive },
  {
    method: 'GET',
    path: '/v1/grants',
    access: 'control',
    summary: "grants with their use, newest first, a page at a time: an answer's next_after is the key the next page starts after (null after the last)",
    query: {
      ...limit(answers.LISTING_LIMITS.grants),
      after: { schema: z.string().regex(answers.PAGE_KEY), description: "the grants after this key, newest first (default: from the newest): the previous answer's next_after" },
      live: { schema: z.enum(['true', 'false']), description: 'true: only the grants neither expired nor revoked (default false: every grant ever issued)' },
    },
    answers: { 200: answers.grantsAnswer },
  },
  { method: 'POST', path: '/v1/grants', access: 'control', summary: 'add a grant', body: grantAddBody, answers: { 201: answers.grantAnswer } },
  { method: 'DELETE', path: '/v1/grants/:id', access: 'control', summary: 'revoke a grant', answers: { 200: answers.grantAnswer } },
  { method: 'POST', path: '/v1/archive', access: 'control', summary: 'archive settled operations whose window has passed', body: archiveBody, answers: { 200: answers.archiveAnswer } },
  { method: 'POST', path: '/v1/children/:name/restart', access: 'control', summary: 'restart a child (a failed one at once, a running one gracefully); answers once it serves again', answers: { 200: answers.restartAnswer } },
  { method: 'POST', path: '/v1/executors/:name/rotate', access: 'control', summary: "rotate an executor's key: the executor makes the next key, the kernel pins it through the statement the old key signed (README \"Rotating keys\")", answers: { 200: answers.executorRotateAnswer } },
  { method: 'POST', path: '/v1/kernel/rotate', access: 'control', summary: "rotate the kernel's key: every running executor re-pins it through the statement the old key signed, a stopped one at its next start", answers: { 200: answers.kernelRotateAnswer } },
  { method: 'GET', path: '/v1/keys', access: 'agent', summary: 'every key epoch of the kernel and of each executor, with the rotation statements (receipt export writes them beside the artifacts)', answers: { 200: answers.keysAnswer } },
  { method: 'POST', path: '/v1/executors/:name/recover-rollback', access: 'control', summary: 'the way back for an executor refused with store_rolled_back (docs/ROLLBACK.md)', answers: { 200: answers.recoverRollbackAnswer } },
  { method: 'GET', path: '/v1/incidents', access: 'agent', summary: 'what went wrong recently', query: limit(answers.LISTING_LIMITS.incidents), answers: { 200: answers.incidentsAnswer } },
  {
    method: 'GET',
    path: '/metrics',
    access: 'open',
    summary: 'the service, kernel and executor figures in the Prometheus text format (README "Metrics")',
    answers: {},
    textAnswer: { contentType: METRICS_CONTENT_TYPE, description: 'Prometheus text exposition format 0.0.4' },
    tokenConfigurable: 'metrics.require_token: true in custody.json asks for the agent token',
  },
];

const ERROR_STATUSES: Record<number, string> = {
  400: 'bad request (usage class)',
  401: 'no valid bearer token',
  403: 'this endpoint needs the control token',
  404: 'no such endpoint or operation',
  405: 'the method is not served on this path',
  409: 'refused, or the outcome is not known yet',
  408: 'the request line, headers or body did not arrive in time (connection closed)',
  413: 'request body too large',
  431: 'the request headers exceed their bound (connection closed)',
  500: 'internal error (the message says only that; see the service log)',
  502: 'a process broke the wire rules',
  503: 'a process or the service cannot be reached, it is shutting down, or (service_busy) it is at a bound on requests or reads in flight (bounds.max_requests_in_flight, max_reads_in_flight, a child\'s channel) and recorded nothing of this one',
  507: 'storage_full: a store could not write (the disk or its quota is full); nothing of this request was decided, ask again with the same name once space is freed',
};

/** Which error statuses a route can answer: 401 where a token is read, 403 where the control token is needed, 413 where a body is read, 507 where something is written. */
function errorStatusesOf(route: RouteDoc): number[] {
  return Object.keys(ERROR_STATUSES)
    .map(Number)
    .filter((status) => {
      if (status === 401) return route.access !== 'open' || route.tokenConfigurable !== undefined;
      if (status === 403) return route.access === 'control';
      if (status === 413) return route.body !== undefined;
      if (status === 507) return route.method !== 'GET';
      return true;
    });
}

/** A path parameter is checked as server.ts checks it: an operation's, child's or executor's name by the name rule, a grant id as an identifier. */
const PATH_PARAMETERS: Record<string, z.ZodType> = { name: operationName, id: identifier };

/**
 * JSON Schema of a zod schema, with its local definitions moved into the
 * document's components (a `#/$defs/…` inside a path item would point at the
 * document root).
 */
function schemaOf(schema: z.ZodType, io: 'input' | 'output', components: Record<string, unknown>, prefix: string): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { io, unrepresentable: 'any', target: 'draft-2020-12' }) as Record<string, unknown>;
  delete json.$schema;
  const defs = (json.$defs ?? {}) as Record<string, unknown>;
  delete json.$defs;
  const renamed = new Map(Object.keys(defs).map((name) => [name, `${prefix}_${name.replace(/[^A-Za-z0-9_.-]/g, '_')}`]));
  const rewrite = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rewrite);
    if (value === null || typeof value !== 'object') return value;
    return Object.fromEntries(
      Object.entries(value).map(([key, inner]) => {
        if (key === '$ref' && typeof inner === 'string' && inner.startsWith('#/$defs/')) return [key, `#/components/schemas/${renamed.get(inner.slice('#/$defs/'.length)) ?? inner}`];
        return [key, rewrite(inner)];
      }),
    );
  };
  for (const [name, def] of Object.entries(defs)) components[renamed.get(name)!] = rewrite(def);
  return rewrite(json) as Record<string, unknown>;
}

const openApiPath = (path: string) => path.replace(/:([a-z_]+)/g, '{$1}');

function buildDocument(): Record<string, unknown> {
  const components: Record<string, unknown> = {};
  const errorRef = { $ref: '#/components/schemas/Error' };
  components.Error = schemaOf(answers.errorAnswer, 'output', components, 'Error');
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of API_ROUTES) {
    const id = `${route.method.toLowerCase()}${route.path.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ?? '').toUpperCase())}`;
    const parameters = [
      ...[...route.path.matchAll(/:([a-z_]+)/g)].map(([, name]) => ({
        name,
        in: 'path',
        required: true,
        description: name === 'id' ? 'capability id' : route.path.startsWith('/v1/children/') ? 'child name (kernel or an executor)' : route.path.startsWith('/v1/executors/') ? 'executor name' : 'operation name (its request id)',
        schema: schemaOf(PATH_PARAMETERS[name!]!, 'input', components, `${id}_${name}`),
      })),
      ...Object.entries(route.query ?? {}).map(([name, { schema, description }]) => ({ name, in: 'query', required: false, description, schema: schemaOf(schema, 'input', components, `${id}_${name}`) })),
    ];
    const responses: Record<string, unknown> = {};
    if (route.textAnswer) responses['200'] = { description: route.textAnswer.description, content: { [route.textAnswer.contentType]: { schema: { type: 'string' } } } };
    for (const [status, schema] of Object.entries(route.answers)) {
      responses[status] = { description: status === '202' ? 'not ended within wait_ms; the service carries it on' : 'done', content: { 'application/json': { schema: schemaOf(schema, 'output', components, `${id}_${status}`) } } };
    }
    for (const status of errorStatusesOf(route)) responses[status] = { description: ERROR_STATUSES[status], content: { 'application/json': { schema: errorRef } } };
    paths[openApiPath(route.path)] ??= {};
    paths[openApiPath(route.path)]![route.method.toLowerCase()] = {
      operationId: id,
      summary: route.summary,
      'x-custody-token': route.access,
      ...(route.tokenConfigurable ? { 'x-custody-token-configurable': route.tokenConfigurable } : {}),
      security: route.access === 'open' ? (route.tokenConfigurable ? [{}, { bearer: [] }] : []) : [{ bearer: [] }],
      ...(parameters.length > 0 ? { parameters } : {}),
      // A body is required where an empty one would be refused (a field without a default).
      ...(route.body ? { requestBody: { required: !route.body.safeParse({}).success, content: { 'application/json': { schema: schemaOf(route.body, 'input', components, `${id}_body`) } } } } : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'custody control API',
      version: '1',
      description:
        'HTTP on 127.0.0.1. Bearer tokens: the agent token (supervisor/agent.token) may invoke and read; the control token (supervisor/control.token) may also authorize, execute, report, reconcile and manage grants (x-custody-token names the least each route needs). Errors are {code, message} with the stable codes of shared/errors.ts. Tool patterns: ' +
        String(toolPattern.description ?? 'a tool name or a prefix ending in /*'),
    },
    servers: [{ url: 'http://127.0.0.1:{port}', variables: { port: { default: '8421' } } }],
    paths,
    components: { schemas: components, securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
  };
}

let cached: Record<string, unknown> | null = null;

export function openApiDocument(): Record<string, unknown> {
  cached ??= buildDocument();
  return cached;
}
