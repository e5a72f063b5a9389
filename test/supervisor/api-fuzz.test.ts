// A property over a live service (issue 8, "Deliver" 3; docs/SECURITY.md
// "How each boundary is tested"): random request targets, methods, headers,
// tokens and bodies (deep, wide, invalid UTF-8, huge numbers, NUL bytes, odd
// percent-encoding, near-valid invokes with hostile fields) never get a 5xx;
// every error is exactly {code, message} with a code of shared/errors.ts;
// a refused request leaves no row in supervisor.db; and afterwards the
// service still answers /v1/health and carries a real invoke to the end.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { isErrorCode } from '../../shared/errors.js';
import { type TestService, startService } from '../helpers/service.js';
import { type RawRequest, rawHttp } from '../helpers/raw-http.js';

/** 250 by default (a few seconds); CUSTODY_FUZZ_RUNS asks for more. */
const RUNS = Number(process.env.CUSTODY_FUZZ_RUNS ?? 250);

/** Bytes as a latin-1 string: how a request line carries them. */
const latin1 = (bytes: Uint8Array) => Buffer.from(bytes).toString('latin1');

const percentEncoded = fc.uint8Array({ maxLength: 12 }).map((bytes) => [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join(''));

const segment = fc.oneof(
  { arbitrary: fc.constantFrom('note-1', 'never-was', 'ok-id', 'cap-1', 'after-fuzz'), weight: 6 },
  fc.constantFrom('', '.', '..', '.hidden', 'a%00b', '%', '%zz', '%C0%AF', '%2F', 'a%2F..%2Fb', 'note-1', 'never-was', 'cap-1', 'x'.repeat(129), '%F0%9F%98%80', '%ED%A0%80'),
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 10 }),
  percentEncoded,
  fc.uint8Array({ maxLength: 8 }).map(latin1),
);

const TEMPLATES = [
  '/v1/health',
  '/v1/status',
  '/v1/invoke',
  '/v1/authorize',
  '/v1/operations',
  '/v1/operations/{}',
  '/v1/operations/{}/trace',
  '/v1/operations/{}/artifacts',
  '/v1/operations/{}/execute',
  '/v1/operations/{}/report',
  '/v1/operations/{}/reconcile',
  '/v1/grants',
  '/v1/grants/{}',
  '/v1/archive',
  '/v1/incidents',
  '/{}',
  '//',
  '/',
  '*',
  'http://127.0.0.1/v1/health',
];

const query = fc.oneof(
  { arbitrary: fc.constant(''), weight: 8 },
  fc.constantFrom('?limit=5', '?limit=-1', '?limit=1e999', '?limit=99999999999', '?limit=5&limit=6', '?x=1', '?', '?limit=%00', '?limit'),
  fc.tuple(segment, segment).map(([k, v]) => `?${k}=${v}`),
);

const target = fc
  .tuple(fc.constantFrom(...TEMPLATES), segment, query)
  .map(([template, seg, q]) => template.replace('{}', seg) + q)
  // Line breaks would end the request line and start another request: that is the HTTP parser's business, not the router's.
  .map((text) => text.replace(/[\r\n]/g, ''));

const method = fc.oneof(
  { arbitrary: fc.constantFrom('GET', 'POST', 'DELETE'), weight: 8 },
  fc.constantFrom('PUT', 'PATCH', 'OPTIONS', 'HEAD', 'FOO', 'get', 'CONNECT', 'TRACE'),
);

/** Nested arrays/objects `depth` levels inside `{"arguments": …}`. */
const nested = (depth: number, open: string, close: string) => `${open.repeat(depth)}${close.repeat(depth)}`;

const hugeNumber = fc.constantFrom('1e999', '-1e999', '123456789012345678901234567890', '-0', '1e-400', '9007199254740993', '0.1e1', 'NaN', 'Infinity');

const nearValidInvoke = fc.record({
  tool: fc.oneof(fc.constant('review-notes/append'), fc.string({ maxLength: 20 })),
  request_id: fc.oneof(fc.constant(undefined), segment, fc.constantFrom('a/../../../evil', 'ok-id', '.x', 'a\u0000b')),
  arguments: fc.oneof(fc.constant({ note: 'hi' }), fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 4 }), { maxKeys: 4 })),
  subject: fc.oneof(fc.constant(undefined), fc.string({ maxLength: 10 })),
  cost_units: fc.oneof(fc.constant(undefined), fc.integer(), fc.double()),
  wait_ms: fc.oneof(fc.constant(undefined), fc.constant(5000), fc.integer()),
});

const body: fc.Arbitrary<Buffer | undefined> = fc.oneof(
  { arbitrary: nearValidInvoke.map((value) => Buffer.from(JSON.stringify(value))), weight: 4 },
  fc.constant(undefined),
  fc.constant(Buffer.alloc(0)),
  fc.integer({ min: 1, max: 100 }).map((depth) => Buffer.from(`{"tool":"review-notes/append","arguments":{"x":${nested(depth, '[', ']')}}}`)),
  fc.integer({ min: 1, max: 100 }).map((depth) => Buffer.from(`{"tool":"review-notes/append","arguments":${nested(depth, '{"a":', '}')}1}`)),
  fc.constant(Buffer.from(`{"arguments":${nested(20_000, '[', ']')}}`)),
  fc.integer({ min: 1, max: 5000 }).map((n) => Buffer.from(JSON.stringify({ tool: 'review-notes/append', arguments: Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i])) }))),
  fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)),
  fc.uint8Array({ maxLength: 16 }).map((bytes) => Buffer.concat([Buffer.from('{"tool":"review-notes/append","arguments":{"note":"'), Buffer.from(bytes), Buffer.from('"}}')])),
  hugeNumber.map((n) => Buffer.from(`{"tool":"review-notes/append","arguments":{"n":${n}},"cost_units":${n},"wait_ms":${n}}`)),
  fc.constant(Buffer.from('{"tool":"review-notes/append","arguments":{"note":"a\u0000b"},"request_id":"a\\u0000b"}')),
  fc.constant(Buffer.from('{"tool":"review-notes/append","arguments":{"\\ud800":"\\udfff"}}')),
  fc.constant(Buffer.from('{"__proto__":{"x":1},"tool":"review-notes/append","arguments":{"__proto__":null}}')),
  fc.jsonValue({ maxDepth: 6 }).map((value) => Buffer.from(JSON.stringify(value) ?? 'null')),
  nearValidInvoke.map((value) => Buffer.from(JSON.stringify(value))),
);

const headerValue = fc.string({ maxLength: 40 }).map((text) => text.replace(/[\r\n]/g, ''));
const headers = fc.dictionary(fc.constantFrom('content-type', 'x-custody', 'accept', 'expect', 'content-encoding', 'x-forwarded-for', 'cookie'), headerValue, { maxKeys: 3 });

describe('the control API under random hostile requests', function () {
  this.timeout(300_000);
  let service: TestService;
  let db: Database.Database;
  const tokens: Record<string, string | null> = { none: null, garbage: 'f'.repeat(64) };

  before(async () => {
    service = await startService({ config: { bounds: { max_body_bytes: 64 * 1024 } } });
    tokens.agent = readFileSync(service.paths.agentToken, 'utf8').trim();
    tokens.control = readFileSync(service.paths.controlToken, 'utf8').trim();
    db = new Database(path.join(service.paths.supervisorDir, 'supervisor.db'), { readonly: true, fileMustExist: true });
  });

  after(async () => {
    db?.close();
    await service.stop();
    service.cleanup();
  });

  const rows = () => (db.prepare('SELECT count(*) AS n FROM requests').get() as { n: number }).n;

  it(`answers ${RUNS} random requests with no 5xx, fixed error bodies, nothing recorded when refused; then still serves`, async () => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(method, target, headers, fc.constantFrom('none', 'garbage', 'agent', 'agent', 'control', 'control', 'control'), body, async (m, t, h, who, b) => {
        const before = rows();
        const request: RawRequest = { method: m, target: t, headers: h, token: tokens[who] ?? null, ...(b === undefined ? {} : { body: b }) };
        const answer = await rawHttp(service.port, request);
        seen.set(answer.status, (seen.get(answer.status) ?? 0) + 1);
        expect(answer.status, `${m} ${t}: ${answer.text}`).to.be.within(200, 499);
        if (answer.status >= 400) {
          if (m !== 'HEAD') {
            const error = JSON.parse(answer.text) as Record<string, unknown>;
            expect(Object.keys(error).sort(), answer.text).to.deep.equal(['code', 'message']);
            expect(isErrorCode(error.code), answer.text).to.equal(true);
            expect(typeof error.message).to.equal('string');
          }
          expect(rows(), `${m} ${t} was refused (${answer.status}) but left a row`).to.equal(before);
        }
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
    if (process.env.CUSTODY_FUZZ_RUNS) process.stderr.write(`statuses: ${JSON.stringify([...seen].sort())}\n`);
    // Every status class was exercised, not just one refusal over and over.
    expect([...seen.keys()].some((s) => s >= 400 && s < 500)).to.equal(true);
    expect([...seen.keys()].some((s) => s >= 200 && s < 300), 'some requests were taken').to.equal(true);

    expect((await service.http('GET', '/v1/health', undefined, null)).status).to.equal(200);
    const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 10, ttl_ms: 3_600_000 });
    expect(grant.status).to.equal(201);
    const invoke = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'after the storm' }, request_id: 'after-fuzz' }, 'agent');
    expect(invoke.status, JSON.stringify(invoke.body)).to.equal(200);
    expect(invoke.body).to.include({ outcome: 'completed' });
    const { body: status } = await service.http('GET', '/v1/status', undefined, 'agent');
    for (const child of status.children as Array<{ name: string; restarts: number; state: string }>) {
      expect(child.state, child.name).to.equal('running');
    }
  });
});
