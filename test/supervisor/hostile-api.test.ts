// Hostile input at the control API, through a live service (issue 8,
// reproductions 1, 3, 4 and 5 at the API; docs/SECURITY.md "The control
// API"): nothing a caller sends reaches a child as a frame the child would
// refuse, bad input is a 4xx with a fixed {code, message} and never a 5xx,
// nothing is recorded for a refused request, and the service keeps serving,
// also after a restart.
import { expect } from 'chai';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { isErrorCode } from '../../shared/errors.js';
import { FIXTURE_EXECUTOR, sqlite, startService, type TestService } from '../helpers/service.js';
import { rawHttp } from '../helpers/raw-http.js';

/** The arguments of issue 8's reproduction 1: {"x":[[[…1…]]]} with `arrays` levels of arrays. */
function issueArguments(arrays: number): string {
  return `{"x":${'['.repeat(arrays)}1${']'.repeat(arrays)}}`;
}

/** An object nested `depth` levels, the object itself level 1. */
const argumentsOfDepth = (depth: number) => issueArguments(depth - 1);

const ARGUMENT_BOUND = 2048;

describe('hostile input at the control API', function () {
  this.timeout(120_000);
  let service: TestService;
  let agent: string;
  let control: string;

  const requestCount = async () => Number((await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), 'SELECT count(*) AS n FROM requests'))[0]!.n);
  const openCount = async () => Number((await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT count(*) AS n FROM requests WHERE phase NOT IN ('settled', 'refused')"))[0]!.n);

  /** Every child's pid, restarts and state: a frame a child refused would restart it. */
  const kernelStatus = async () => {
    const { body } = await service.http('GET', '/v1/status', undefined, 'agent');
    return (body.children as Array<{ name: string; pid: number | null; restarts: number; state: string }>).map((c) => ({ name: c.name, pid: c.pid, restarts: c.restarts, state: c.state }));
  };

  const invokeRaw = (body: string, token = agent) => rawHttp(service.port, { method: 'POST', target: '/v1/invoke', token, headers: { 'content-type': 'application/json' }, body: Buffer.from(body, 'utf8') });

  /** An error answer: exactly {code, message}, the code one of shared/errors.ts. */
  const errorOf = (text: string) => {
    const body = JSON.parse(text) as Record<string, unknown>;
    expect(Object.keys(body).sort(), text).to.deep.equal(['code', 'message']);
    expect(isErrorCode(body.code), `code ${String(body.code)}`).to.equal(true);
    return body as { code: string; message: string };
  };

  /** A real invoke completes: the service still serves end to end. */
  const realInvoke = async (id: string) => {
    const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: `still serving ${id}` }, request_id: id }, 'agent');
    expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    expect(answer.body).to.include({ outcome: 'completed' });
  };

  before(async () => {
    // fixture/refuse admits any arguments (review-notes/append would be refused
    // by its own schema before reserving), so a frame at the depth budget
    // travels to the kernel and the executor.
    service = await startService({
      config: {
        kernel: { settings: { argument_bytes_default: ARGUMENT_BOUND } },
        executors: [FIXTURE_EXECUTOR],
      },
    });
    agent = readFileSync(service.paths.agentToken, 'utf8').trim();
    control = readFileSync(service.paths.controlToken, 'utf8').trim();
    // The default grant allows 4 invocations; these tests make more.
    for (const tool of ['review-notes/*', 'fixture/*']) {
      const grant = await service.http('POST', '/v1/grants', { tool, max_invocations: 1000, ttl_ms: 3_600_000 });
      expect(grant.status, JSON.stringify(grant.body)).to.equal(201);
    }
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  describe('depth (reproduction 1)', () => {
    it('carries arguments nested exactly at the budget (30 levels, a 32-level frame) to the end, and no child is restarted', async () => {
      const before = await kernelStatus();
      const answer = await invokeRaw(`{"tool":"fixture/refuse","request_id":"depth-at-bound","arguments":${argumentsOfDepth(30)}}`);
      expect(answer.status, answer.text).to.equal(200);
      expect(JSON.parse(answer.text)).to.have.property('final', true);
      expect(await kernelStatus()).to.deep.equal(before);
    });

    it('refuses arguments one level past the budget with 400 body_too_deep, records nothing, and leaves the children as they were', async () => {
      const before = await kernelStatus();
      const rows = await requestCount();
      const answer = await invokeRaw(`{"tool":"review-notes/append","request_id":"depth-past-bound","arguments":${argumentsOfDepth(31)}}`);
      expect(answer.status).to.equal(400);
      const error = errorOf(answer.text);
      expect(error.code).to.equal('body_too_deep');
      expect(error.message).to.contain('at most 30 levels');
      expect(await requestCount()).to.equal(rows);
      expect(await kernelStatus()).to.deep.equal(before);
    });

    it('refuses the 30- and 32-deep reproductions; the service keeps serving, also after a restart', async () => {
      const before = await kernelStatus();
      const rows = await requestCount();
      for (const arrays of [30, 32]) {
        const answer = await invokeRaw(`{"tool":"review-notes/append","request_id":"repro-1-${arrays}","arguments":${issueArguments(arrays)}}`);
        expect(answer.status, `${arrays} deep`).to.equal(400);
        expect(errorOf(answer.text).code).to.equal('body_too_deep');
        const authorize = await rawHttp(service.port, { method: 'POST', target: '/v1/authorize', token: control, body: Buffer.from(`{"tool":"review-notes/append","operation":"repro-1a-${arrays}","arguments":${issueArguments(arrays)}}`) });
        expect(authorize.status, `authorize ${arrays} deep`).to.equal(400);
      }
      expect(await requestCount(), 'nothing recorded, so nothing to resume').to.equal(rows);
      expect(await kernelStatus()).to.deep.equal(before);
      await realInvoke('after-repro-1');

      await service.stop();
      service = await service.restart();
      expect((await service.http('GET', '/v1/health', undefined, null)).status).to.equal(200);
      expect(await openCount(), 'no request is open to be resumed').to.equal(0);
      await realInvoke('after-repro-1-restart');
      expect((await kernelStatus()).map((c) => c.restarts)).to.deep.equal([0, 0]);
      agent = readFileSync(service.paths.agentToken, 'utf8').trim();
    });

    it('refuses a body nested 20,000 deep with 400 body_too_deep, never a 500 from a stack overflow (reproduction 3)', async () => {
      const answer = await invokeRaw(`{"tool":"review-notes/append","arguments":{"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}}`);
      expect(answer.status).to.equal(400);
      expect(errorOf(answer.text).code).to.equal('body_too_deep');
    });
  });

  describe('the router (reproduction 3)', () => {
    it('answers // with 401 without a token and 404 with one, never 500', async () => {
      const bare = await rawHttp(service.port, { method: 'GET', target: '//' });
      expect(bare.status).to.equal(401);
      expect(errorOf(bare.text).code).to.equal('unauthorized');
      const withToken = await rawHttp(service.port, { method: 'GET', target: '//', token: agent });
      expect(withToken.status).to.equal(404);
      expect(errorOf(withToken.text).code).to.equal('not_found');
    });

    it('answers DELETE /v1/grants/a%00b with a 400 naming the path segment, not a 502 naming an internal call', async () => {
      const answer = await rawHttp(service.port, { method: 'DELETE', target: '/v1/grants/a%00b', token: control });
      expect(answer.status).to.equal(400);
      const error = errorOf(answer.text);
      expect(error.code).to.equal('target_invalid');
      expect(error.message).to.contain('path segment').and.not.to.contain('grant.revoke');
    });

    const TABLE: Array<{ what: string; method: string; target: string; token: 'agent' | 'control' | null; status: number; code: string; allow?: string }> = [
      { what: 'a method the API never serves (unknown to HTTP parsers)', method: 'FOO', target: '/v1/health', token: null, status: 405, code: 'method_not_allowed' },
      { what: 'a method the API never serves (PUT)', method: 'PUT', target: '/v1/invoke', token: null, status: 405, code: 'method_not_allowed', allow: 'GET, POST, DELETE' },
      { what: 'a wrong method on a known path', method: 'GET', target: '/v1/invoke', token: 'agent', status: 405, code: 'method_not_allowed', allow: 'POST' },
      { what: 'a wrong method on a known path with parameters', method: 'DELETE', target: '/v1/operations/x', token: 'control', status: 405, code: 'method_not_allowed', allow: 'GET' },
      { what: 'an unknown path', method: 'GET', target: '/v1/nothing', token: 'agent', status: 404, code: 'not_found' },
      { what: 'a trailing slash', method: 'GET', target: '/v1/status/', token: 'agent', status: 404, code: 'not_found' },
      { what: 'malformed percent-encoding', method: 'GET', target: '/v1/operations/a%ZZ', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'percent-encoding of an overlong slash', method: 'GET', target: '/v1/operations/%C0%AF', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'an encoded newline', method: 'GET', target: '/v1/operations/a%0Ab', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'a raw byte above 0x7f', method: 'GET', target: '/v1/operations/a\u00e9', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'an absolute-form target', method: 'GET', target: 'http://elsewhere/v1/health', token: null, status: 400, code: 'target_invalid' },
      { what: 'an operation name with a leading dot', method: 'GET', target: '/v1/operations/.hidden', token: 'agent', status: 400, code: 'name_invalid' },
      { what: 'an operation name with an encoded slash', method: 'GET', target: '/v1/operations/a%2F..%2Fb/trace', token: 'agent', status: 400, code: 'name_invalid' },
      { what: 'a grant id outside the kernel schema', method: 'DELETE', target: '/v1/grants/%20x', token: 'control', status: 400, code: 'name_invalid' },
      { what: 'a query parameter the endpoint does not read', method: 'GET', target: '/v1/status?x=1', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'a negative limit', method: 'GET', target: '/v1/operations?limit=-1', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'a huge limit', method: 'GET', target: '/v1/incidents?limit=1e999', token: 'agent', status: 400, code: 'target_invalid' },
      { what: 'an operation nobody made', method: 'GET', target: '/v1/operations/never-was', token: 'agent', status: 404, code: 'operation_unknown' },
    ];
    for (const row of TABLE) {
      it(`answers ${row.what} with ${row.status} ${row.code}`, async () => {
        const token = row.token === 'agent' ? agent : row.token === 'control' ? control : null;
        const answer = await rawHttp(service.port, { method: row.method, target: row.target, token });
        expect(answer.status, answer.text).to.equal(row.status);
        expect(errorOf(answer.text).code).to.equal(row.code);
        if (row.allow) expect(answer.headers.allow).to.equal(row.allow);
      });
    }

    it('names the caller\'s field when a body value is outside what a child takes', async () => {
      const answer = await invokeRaw(JSON.stringify({ tool: 'review-notes/append', arguments: {}, subject: 'a b/c' }));
      expect(answer.status).to.equal(400);
      const error = errorOf(answer.text);
      expect(error.code).to.equal('bad_request');
      expect(error.message).to.match(/^subject: /);
    });
  });

  describe('names (reproduction 4) and strict bytes (reproduction 5)', () => {
    it('refuses request ids and operation names outside the name charset with 400 name_invalid, recording nothing', async () => {
      const rows = await requestCount();
      const invoke = await invokeRaw(JSON.stringify({ tool: 'review-notes/append', arguments: { note: 'x' }, request_id: 'a/../../../evil' }));
      expect(invoke.status).to.equal(400);
      expect(errorOf(invoke.text).code).to.equal('name_invalid');
      const authorize = await rawHttp(service.port, { method: 'POST', target: '/v1/authorize', token: control, body: Buffer.from(JSON.stringify({ tool: 'review-notes/append', arguments: { note: 'x' }, operation: 'a/../../x' })) });
      expect(authorize.status).to.equal(400);
      expect(errorOf(authorize.text).code).to.equal('name_invalid');
      const notString = await invokeRaw(JSON.stringify({ tool: 'review-notes/append', arguments: {}, request_id: 7 }));
      expect(errorOf(notString.text).code).to.equal('name_invalid');
      expect(await requestCount()).to.equal(rows);
    });

    it('refuses a body that is not UTF-8 with 400 encoding_invalid and the byte offset; nothing is stored', async () => {
      const rows = await requestCount();
      const prefix = Buffer.from('{"tool":"review-notes/append","request_id":"bad-bytes","arguments":{"note":"a', 'utf8');
      const body = Buffer.concat([prefix, Buffer.from([0xff, 0xfe]), Buffer.from('b"}}')]);
      const answer = await rawHttp(service.port, { method: 'POST', target: '/v1/invoke', token: agent, body });
      expect(answer.status).to.equal(400);
      const error = errorOf(answer.text);
      expect(error.code).to.equal('encoding_invalid');
      expect(error.message).to.contain(`byte offset ${prefix.length}`);
      expect(await requestCount()).to.equal(rows);
      expect((await service.http('GET', '/v1/operations/bad-bytes', undefined, 'agent')).status).to.equal(404);
    });

    it('refuses a compressed body (Content-Encoding gzip) with 400 encoding_invalid naming the header; nothing is stored; identity is read', async () => {
      const rows = await requestCount();
      const json = JSON.stringify({ tool: 'review-notes/append', request_id: 'gzipped', arguments: { note: 'z' } });
      const answer = await rawHttp(service.port, { method: 'POST', target: '/v1/invoke', token: agent, headers: { 'content-encoding': 'gzip' }, body: gzipSync(json) });
      expect(answer.status, answer.text).to.equal(400);
      expect(errorOf(answer.text)).to.deep.equal({ code: 'encoding_invalid', message: 'Content-Encoding "gzip" is not accepted: send the body as plain UTF-8 JSON, without Content-Encoding' });
      // The same header on plain bytes is refused too: the body is never read as something it says it is not.
      expect((await rawHttp(service.port, { method: 'POST', target: '/v1/invoke', token: agent, headers: { 'content-encoding': 'gzip' }, body: Buffer.from(json) })).status).to.equal(400);
      expect(await requestCount()).to.equal(rows);
      const identity = await rawHttp(service.port, { method: 'POST', target: '/v1/invoke', token: agent, headers: { 'content-encoding': 'identity' }, body: Buffer.from(JSON.stringify({ tool: 'nosuch/tool', arguments: {} })) });
      // Read as plain JSON: the tool it names is judged (no executor serves it).
      expect(identity.status, identity.text).to.equal(409);
      expect(errorOf(identity.text).code).to.equal('tool_unknown');
    });

    // JSON.parse would keep the last "tool" (fixture/refuse, which the grant covers) and the last note;
    // a reader keeping the first would see review-notes/append. Neither may run. And JSON.parse keeps a member
    // named __proto__ that zod's records drop, so the arguments digested, signed and run would be other than
    // those sent: before that rule, these two ran without it and were answered 200.
    for (const row of [
      { what: 'the tool twice', body: '{"tool":"review-notes/append","tool":"fixture/refuse","request_id":"dup-tool","arguments":{}}', says: 'member "tool" twice', id: 'dup-tool' },
      { what: 'an argument twice', body: '{"tool":"review-notes/append","request_id":"dup-note","arguments":{"note":"first","note":"second"}}', says: 'member "note" twice', id: 'dup-note' },
      { what: 'a member twice once unescaped', body: '{"tool":"review-notes/append","request_id":"dup-escaped","arguments":{"note":"first","\\u006eote":"second"}}', says: 'member "note" twice', id: 'dup-escaped' },
      { what: 'an argument named __proto__', body: '{"tool":"review-notes/append","request_id":"proto-arg","arguments":{"note":"x","__proto__":{"note":"y"}}}', says: 'member named __proto__', id: 'proto-arg' },
      { what: 'a nested member named __proto__, escaped', body: '{"tool":"review-notes/append","request_id":"proto-nested","arguments":{"note":"x","meta":[{"\\u005f_proto__":1}]}}', says: 'member named __proto__', id: 'proto-nested' },
    ]) {
      it(`refuses a body with ${row.what} with 400 bad_request naming it; nothing is stored`, async () => {
        const rows = await requestCount();
        const answer = await invokeRaw(row.body);
        expect(answer.status, answer.text).to.equal(400);
        const error = errorOf(answer.text);
        expect(error.code).to.equal('bad_request');
        expect(error.message).to.contain(row.says);
        expect(await requestCount()).to.equal(rows);
        expect((await service.http('GET', `/v1/operations/${row.id}`, undefined, 'agent')).status).to.equal(404);
      });
    }

    it('takes equal member names in different objects (the rule is per object)', async () => {
      const answer = await invokeRaw('{"tool":"review-notes/append","request_id":"same-name-apart","arguments":{"note":"tool"}}');
      expect(answer.status, answer.text).to.equal(200);
      const nested = await invokeRaw('{"tool":"fixture/refuse","request_id":"same-name-nested","arguments":{"tool":{"tool":1},"x":[{"a":1},{"a":2}]}}');
      expect(nested.status, nested.text).to.equal(200);
    });
  });

  describe('the argument bound', () => {
    /** Arguments {"note":"x…"} of exactly `bytes` bytes of canonical JSON. */
    const noteOf = (bytes: number) => ({ note: 'x'.repeat(bytes - '{"note":""}'.length) });

    it(`takes arguments of exactly the kernel's argument bound (${ARGUMENT_BOUND} bytes) and refuses one byte more with 413 arguments_too_large, recording nothing`, async () => {
      const atBound = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: noteOf(ARGUMENT_BOUND), request_id: 'args-at-bound' }, 'agent');
      expect(atBound.status, JSON.stringify(atBound.body)).to.equal(200);
      expect(atBound.body).to.include({ outcome: 'completed' });
      const rows = await requestCount();
      const past = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: noteOf(ARGUMENT_BOUND + 1), request_id: 'args-past-bound' }, 'agent');
      expect(past.status).to.equal(413);
      expect(past.body).to.have.property('code', 'arguments_too_large');
      expect(String(past.body.message)).to.contain(`${ARGUMENT_BOUND + 1} bytes`);
      expect(await requestCount()).to.equal(rows);
    });
  });
});
