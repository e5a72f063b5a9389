// GET /v1/openapi.json describes every route server.ts serves, and real
// answers of a live service — successes and errors of every route — are
// valid against the schemas it gives for their path, method and status.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import net from 'node:net';
import { API_ROUTES, openApiDocument } from '../../../supervisor/api/openapi.js';
import { statusOf } from '../../../supervisor/api/http.js';
import { CustodyError, ERROR_CODES } from '../../../shared/errors.js';
import { type TestService, startService } from '../../helpers/service.js';
import { distPath } from '../../helpers/children.js';

type Doc = { paths: Record<string, Record<string, { responses: Record<string, { content: { 'application/json': { schema: Record<string, unknown> } } }> }>>; components: Record<string, unknown> };

describe('the OpenAPI description', function () {
  this.timeout(90_000);
  let service: TestService;
  let doc: Doc;
  const validator = new AjvJsonSchemaValidator();
  const checked = new Set<string>();

  /** Call a route and check the answer against the description of its route template and status. */
  async function call(method: string, template: string, route: string, body?: unknown, token: 'agent' | 'control' | null = 'control') {
    const answer = await service.http(method, route, body, token);
    const responses = doc.paths[template.replace(/:([a-z_]+)/g, '{$1}')]?.[method.toLowerCase()]?.responses;
    expect(responses, `${method} ${template} is described`).to.not.equal(undefined);
    const described = responses![String(answer.status)];
    expect(described, `${method} ${template} answered ${answer.status}, which is not described: ${JSON.stringify(answer.body)}`).to.not.equal(undefined);
    const schema = { allOf: [described!.content['application/json'].schema], components: doc.components };
    const result = validator.getValidator(schema)(answer.body);
    expect(result.valid, `${method} ${route} ${answer.status}: ${result.errorMessage}\n${JSON.stringify(answer.body).slice(0, 2000)}`).to.equal(true);
    checked.add(`${method} ${template} ${answer.status}`);
    return answer;
  }

  before(async () => {
    service = await startService();
    const answer = await service.http('GET', '/v1/openapi.json', undefined, 'agent');
    expect(answer.status).to.equal(200);
    doc = answer.body as unknown as Doc;
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  it('names every route of server.ts with its token, and no other', () => {
    const source = readFileSync(path.join(distPath(), '..', 'supervisor', 'api', 'server.ts'), 'utf8');
    const served = [...source.matchAll(/'(GET|POST|DELETE)',\s*'(\/(?:v1\/|metrics)[^']*)',\s*'(open|agent|control)'/g)].map(([, m, p, a]) => `${m} ${p} ${a}`).sort();
    expect(served.length, 'routes found in server.ts').to.be.greaterThan(10);
    expect(API_ROUTES.map((r) => `${r.method} ${r.path} ${r.access}`).sort()).to.deep.equal(served);
    for (const route of API_ROUTES) expect(doc.paths[route.path.replace(/:([a-z_]+)/g, '{$1}')]).to.have.property(route.method.toLowerCase());
  });

  it('describes every status an error can be answered with: 507 wherever something is written, 408 and 431 everywhere', () => {
    const generated = openApiDocument() as unknown as { paths: Record<string, Record<string, { responses: Record<string, unknown>; requestBody?: { required: boolean }; parameters?: Array<{ name: string; in: string; schema: { pattern?: string } }> }>> };
    const statuses = new Set([...ERROR_CODES.map((code) => statusOf(new CustodyError(code, 'x'))), 408, 431]);
    expect(statuses).to.include(507);
    for (const route of API_ROUTES) {
      const described = generated.paths[route.path.replace(/:([a-z_]+)/g, '{$1}')]![route.method.toLowerCase()]!;
      for (const status of [408, 431, 500, 502, 503, 400]) expect(described.responses, `${route.method} ${route.path}`).to.have.property(String(status));
      if (route.method !== 'GET') expect(described.responses, `${route.method} ${route.path} writes`).to.have.property('507');
    }
    const everywhere = new Set(Object.values(generated.paths).flatMap((methods) => Object.values(methods).flatMap((op) => Object.keys(op.responses).map(Number))));
    for (const status of statuses) expect(everywhere, `status ${status} is described`).to.include(status);
  });

  it('says which bodies are required and checks path parameters by the rule the server applies', () => {
    const generated = openApiDocument() as unknown as { paths: Record<string, Record<string, { requestBody?: { required: boolean }; parameters?: Array<{ name: string; in: string; schema: Record<string, unknown> }> }>> };
    expect(generated.paths['/v1/invoke']!.post!.requestBody!.required).to.equal(true);
    expect(generated.paths['/v1/authorize']!.post!.requestBody!.required).to.equal(true);
    expect(generated.paths['/v1/grants']!.post!.requestBody!.required).to.equal(true);
    expect(generated.paths['/v1/operations/{name}/execute']!.post!.requestBody!.required).to.equal(false);
    const named = generated.paths['/v1/operations/{name}']!.get!.parameters!.find((p) => p.name === 'name')!;
    const accepts = validator.getValidator(named.schema);
    expect(accepts('note-1').valid).to.equal(true);
    expect(accepts('a@b').valid, 'the server refuses a@b with name_invalid').to.equal(false);
    expect(accepts('a/b').valid).to.equal(false);
    const limit = generated.paths['/v1/operations']!.get!.parameters!.find((p) => p.name === 'limit')!;
    expect(validator.getValidator(limit.schema)(0).valid, 'limit=0 lists the default page').to.equal(true);
  });

  it('needs the agent token', async () => {
    expect((await service.http('GET', '/v1/openapi.json', undefined, null)).status).to.equal(401);
  });

  it('validates real answers of every route, successes and errors', async () => {
    await call('GET', '/v1/health', '/v1/health', undefined, null);
    await call('GET', '/v1/status', '/v1/status', undefined, 'agent');
    await call('GET', '/v1/tools', '/v1/tools', undefined, 'agent');
    await call('GET', '/v1/openapi.json', '/v1/openapi.json', undefined, 'agent');
    const invoked = await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'described' }, request_id: 'openapi-1' }, 'agent');
    expect(invoked.status).to.equal(200);
    await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'other' }, request_id: 'openapi-1' }, 'agent'); // 409 request_conflict
    await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'Not A Tool' }, 'agent'); // 400
    await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'nosuch/tool' }, 'agent');
    await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'x' } }, null); // 401
    await call('POST', '/v1/authorize', '/v1/authorize', { tool: 'review-notes/append', arguments: { note: 'stepwise' }, operation: 'openapi-2' });
    await call('POST', '/v1/authorize', '/v1/authorize', { tool: 'review-notes/append', arguments: { note: 'x' }, operation: 'openapi-x' }, 'agent'); // 403
    await call('POST', '/v1/operations/:name/execute', '/v1/operations/openapi-2/execute', {});
    await call('POST', '/v1/operations/:name/report', '/v1/operations/openapi-2/report', {});
    await call('POST', '/v1/operations/:name/reconcile', '/v1/operations/openapi-2/reconcile', {});
    await call('POST', '/v1/operations/:name/reconcile', '/v1/operations/nosuch/reconcile', {}); // 404
    await call('GET', '/v1/operations', '/v1/operations?limit=10', undefined, 'agent');
    await call('GET', '/v1/operations/:name', '/v1/operations/openapi-1', undefined, 'agent');
    await call('GET', '/v1/operations/:name', '/v1/operations/nosuch', undefined, 'agent');
    await call('GET', '/v1/operations/:name/trace', '/v1/operations/openapi-2/trace', undefined, 'agent');
    await call('GET', '/v1/operations/:name/artifacts', '/v1/operations/openapi-2/artifacts', undefined, 'agent');
    await call('GET', '/v1/grants', '/v1/grants');
    const added = await call('POST', '/v1/grants', '/v1/grants', { tool: 'review-notes/*', max_invocations: 2, ttl_ms: 60_000 });
    expect(added.status).to.equal(201);
    await call('POST', '/v1/grants', '/v1/grants', { tool: 'review-notes/*', max_invocations: 0, ttl_ms: 60_000 }); // 400
    await call('DELETE', '/v1/grants/:id', `/v1/grants/${String(added.body.capability_id)}`);
    expect((await call('DELETE', '/v1/grants/:id', '/v1/grants/no-such-grant')).status, 'an unknown grant is 404, as an unknown operation is').to.equal(404);
    await call('POST', '/v1/archive', '/v1/archive', {});
    await call('GET', '/v1/incidents', '/v1/incidents?limit=5', undefined, 'agent');
    // GET /metrics answers text: its content type is the one described, and nothing else is.
    const metrics = await fetch(`http://127.0.0.1:${service.port}/metrics`);
    const described = (doc.paths['/metrics']!.get!.responses['200'] as unknown as { content: Record<string, unknown> }).content;
    expect(metrics.status).to.equal(200);
    expect(Object.keys(described)).to.deep.equal([metrics.headers.get('content-type')]);
    expect(await metrics.text()).to.contain('# TYPE custody_operations_total counter');
    checked.add('GET /metrics 200');
    await call('POST', '/v1/children/:name/restart', '/v1/children/default/restart', {});
    await call('POST', '/v1/children/:name/restart', '/v1/children/nosuch/restart', {}); // 404
    await call('POST', '/v1/executors/:name/recover-rollback', '/v1/executors/default/recover-rollback', {}); // 409: not refused for a rollback
    await call('GET', '/v1/keys', '/v1/keys', undefined, 'agent');
    await call('POST', '/v1/executors/:name/rotate', '/v1/executors/default/rotate', {});
    await call('POST', '/v1/executors/:name/rotate', '/v1/executors/nosuch/rotate', {}); // 404
    await call('POST', '/v1/kernel/rotate', '/v1/kernel/rotate', {});
    await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'x'.repeat(300_000) } }, 'agent'); // 413 (over max_body_bytes, 256 KiB)
    await call('POST', '/v1/invoke', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'x'.repeat(5000) } }, 'agent'); // 409 arguments_too_large
    // Refused by the HTTP parser before any route: described all the same.
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(service.port, '127.0.0.1');
      let text = '';
      socket.on('data', (chunk) => (text += chunk.toString('latin1')));
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
      socket.write(`GET /v1/status HTTP/1.1\r\nhost: x\r\nx-padding: ${'a'.repeat(20_000)}\r\n\r\n`);
    });
    expect(raw).to.match(/^HTTP\/1\.1 431 /);
    const refusedBody = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as unknown;
    const described431 = doc.paths['/v1/status']!.get!.responses['431']!;
    expect(validator.getValidator({ allOf: [described431.content["application/json"].schema], components: doc.components } as Record<string, unknown>)(refusedBody).valid).to.equal(true);
    checked.add('GET /v1/status 431');
    // Every described route was exercised at least once.
    const exercised = new Set([...checked].map((key) => key.split(' ').slice(0, 2).join(' ')));
    for (const route of API_ROUTES) expect(exercised, `${route.method} ${route.path} exercised`).to.include(`${route.method} ${route.path}`);
    for (const status of ['200', '201', '400', '401', '403', '404', '409', '413']) expect([...checked].some((key) => key.endsWith(` ${status}`)), `a ${status} answer checked`).to.equal(true);
  });
});
