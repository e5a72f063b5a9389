// CustodyClient's transport: the request id is chosen before sending, a
// connection broken after the request was sent is retried with the same body,
// a call that starts nothing new (a grant) is not, and when retries run out
// the error says whether anything may have arrived. It speaks node:http, not
// fetch, whose WebAssembly parser held every CLI call ~150 ms at exit.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import { type Socket, connect } from 'node:net';
import { promisify } from 'node:util';
import { CustodyClient, CustodyError, retryPause } from '../../../supervisor/client/index.js';

interface Seen {
  readonly method: string;
  readonly url: string;
  readonly body: Record<string, unknown>;
}

/**
 * A stand-in service that breaks the first `breaks` connections after reading
 * the request (`halfway`: after sending the status and half of the answer),
 * then answers.
 */
async function flakyServer(breaks: number, answer: (seen: Seen) => { status: number; body: unknown }, halfway = false): Promise<{ url: string; seen: Seen[]; server: Server }> {
  const seen: Seen[] = [];
  let broken = 0;
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const entry = { method: request.method ?? '', url: request.url ?? '', body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
      seen.push(entry);
      const { status, body } = answer(entry);
      if (broken < breaks) {
        broken++;
        if (halfway) {
          const text = JSON.stringify(body);
          response.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) });
          response.write(text.slice(0, text.length >> 1), () => request.socket.destroy());
        } else {
          request.socket.destroy();
        }
        return;
      }
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return { url: `http://127.0.0.1:${address.port}`, seen, server };
}

const outcome = (requestId: string) => ({ request_id: requestId, operation_id: '0'.repeat(64), tool: 'review-notes/append', created_at: 1_700_000_000_000, phase: 'settled', final: true, outcome: 'completed', reason: 'ok', cause: null, output: null, receipt: null, report: null, authorization: null, executor: 'default' });

describe('CustodyClient transport', () => {
  const servers: Server[] = [];
  after(() => servers.forEach((s) => s.close()));

  it('retries an invoke whose connection broke after sending, with the same request id, and returns the answer', async () => {
    const fake = await flakyServer(2, (seen) => ({ status: 200, body: outcome(String(seen.body.request_id)) }));
    servers.push(fake.server);
    const client = new CustodyClient({ url: fake.url, token: 'x', retries: 3, retryDelayMs: 1 });
    const answer = await client.invoke({ tool: 'review-notes/append', arguments: { note: 'n' } });
    expect(fake.seen).to.have.length(3);
    const ids = new Set(fake.seen.map((s) => s.body.request_id));
    expect(ids.size).to.equal(1);
    expect(answer.request_id).to.equal([...ids][0]);
    expect(answer.request_id).to.match(/^req-[0-9a-z]+-[0-9a-f]{12}$/);
    expect(answer.http_status).to.equal(200);
  });

  it('waits no longer than the service\'s bound on one call\'s wait, whatever wait_ms it is given (no timer overflow)', async () => {
    const fake = await flakyServer(0, () => ({ status: 400, body: { code: 'bad_request', message: 'wait_ms: Too big' } }));
    servers.push(fake.server);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const refused = await new CustodyClient({ url: fake.url, token: 'x', retries: 0 }).invoke({ tool: 'review-notes/append', wait_ms: 9_000_000_000_000 }).catch((e: unknown) => e);
      expect((refused as CustodyError).code).to.equal('bad_request');
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).to.not.include('TimeoutOverflowWarning');
  });

  it('says the outcome is unknown, naming the request, when every attempt broke after sending', async () => {
    const fake = await flakyServer(10, () => ({ status: 500, body: {} }));
    servers.push(fake.server);
    const client = new CustodyClient({ url: fake.url, token: 'x', retries: 2, retryDelayMs: 1 });
    const error = await client.invoke({ tool: 'review-notes/append', request_id: 'mine-1' }).catch((e: unknown) => e);
    expect(error).to.be.instanceOf(CustodyError);
    expect((error as CustodyError).code).to.equal('outcome_unknown');
    expect((error as CustodyError).message).to.contain('mine-1');
    expect(fake.seen.map((s) => s.body.request_id)).to.deep.equal(['mine-1', 'mine-1', 'mine-1']);
  });

  it('says the outcome is unknown, naming the request, when the first attempt broke after sending and the service is then gone (a supervisor killed mid-call)', async () => {
    // The service reads the invoke (it may have recorded it), dies before answering, and is not back for the retries: they find nobody listening.
    const seen: string[] = [];
    const dying = createServer((request) => {
      seen.push(`${request.method} ${request.url}`);
      request.socket.destroy();
      dying.close();
    });
    await new Promise<void>((resolve) => dying.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(dying.address() as { port: number }).port}`;
    const error = await new CustodyClient({ url, token: 'x', retries: 2, retryDelayMs: 1 }).invoke({ tool: 'review-notes/append', request_id: 'mine-8' }).catch((e: unknown) => e);
    expect(seen, 'only the first attempt reached a service').to.deep.equal(['POST /v1/invoke']);
    expect(error).to.be.instanceOf(CustodyError).with.property('code', 'outcome_unknown');
    expect((error as CustodyError).message).to.contain('ECONNREFUSED').and.to.contain('mine-8').and.to.contain('carry it out once it is back');
    // Nothing reached it at all: that alone is service_unavailable.
    const never = await new CustodyClient({ url, token: 'x', retries: 2, retryDelayMs: 1 }).invoke({ tool: 'review-notes/append', request_id: 'mine-9' }).catch((e: unknown) => e);
    expect(never).to.be.instanceOf(CustodyError).with.property('code', 'service_unavailable');
  });

  it('does not send a key rotation or a restart again after a connection that broke once it was sent: a repeat would act a second time', async () => {
    for (const path of ['/v1/kernel/rotate', '/v1/executors/default/rotate', '/v1/children/kernel/restart']) {
      const fake = await flakyServer(10, () => ({ status: 200, body: {} }));
      servers.push(fake.server);
      const error = await new CustodyClient({ url: fake.url, token: 'x', retries: 3, retryDelayMs: 1 }).request('POST', path, {}).catch((e: unknown) => e);
      expect(error, path).to.be.instanceOf(CustodyError).with.property('code', 'outcome_unknown');
      expect(fake.seen, path).to.have.length(1);
    }
    // An invoke, by contrast, is asked again with the same body.
    const fake = await flakyServer(10, () => ({ status: 200, body: {} }));
    servers.push(fake.server);
    await new CustodyClient({ url: fake.url, token: 'x', retries: 3, retryDelayMs: 1 }).request('POST', '/v1/invoke', { request_id: 'r' }).catch(() => null);
    expect(fake.seen).to.have.length(4);
  });

  it('takes an answer cut short after its status for a broken connection: the invoke is asked again with the same request id', async () => {
    const fake = await flakyServer(1, (seen) => ({ status: 200, body: outcome(String(seen.body.request_id)) }), true);
    servers.push(fake.server);
    const client = new CustodyClient({ url: fake.url, token: 'x', retries: 3, retryDelayMs: 1 });
    const answer = await client.invoke({ tool: 'review-notes/append', request_id: 'mine-3' });
    expect(fake.seen.map((s) => s.body.request_id)).to.deep.equal(['mine-3', 'mine-3']);
    expect(answer).to.include({ request_id: 'mine-3', outcome: 'completed', http_status: 200 });
    // Not retried, the same cut is an unknown outcome, never a half-read answer.
    const cut = await flakyServer(1, () => ({ status: 201, body: { capability: 'x'.repeat(4000) } }), true);
    servers.push(cut.server);
    const error = await new CustodyClient({ url: cut.url, token: 'x', retries: 3, retryDelayMs: 1 })
      .addGrant({ tool: 'review-notes/*', max_invocations: 1, ttl_ms: 1000 })
      .catch((e: unknown) => e);
    expect(error).to.have.property('code', 'outcome_unknown');
    expect(cut.seen).to.have.length(1);
  });

  it('names the connection bound only for a reset before any answer, not for a read cut in the middle of its answer', async () => {
    const cut = await flakyServer(10, () => ({ status: 200, body: { status: 'ok', padding: 'x'.repeat(4000) } }), true);
    servers.push(cut.server);
    const midAnswer = await new CustodyClient({ url: cut.url, token: 'x', retries: 0 }).health().catch((e: unknown) => e as CustodyError);
    expect(midAnswer).to.have.property('code', 'service_unavailable');
    expect((midAnswer as CustodyError).message).to.not.contain('connection bound');
    // A server past its bound: the connection is accepted and closed before anything is read.
    const full = createServer();
    full.maxConnections = 1;
    await new Promise<void>((resolve) => full.listen(0, '127.0.0.1', resolve));
    servers.push(full);
    const port = (full.address() as { port: number }).port;
    const holder = await new Promise<Socket>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => resolve(socket));
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const reset = await new CustodyClient({ url: `http://127.0.0.1:${port}`, token: 'x', retries: 0 }).health().catch((e: unknown) => e as CustodyError);
    holder.destroy();
    expect(reset).to.have.property('code', 'service_unavailable');
    expect((reset as CustodyError).message).to.contain('closed the connection unanswered (ECONNRESET)').and.to.contain('connection bound');
  });

  it('refuses an address that is not an http:// or https:// URL when it is made, saying what one looks like', () => {
    for (const url of ['127.0.0.1:8421', 'ftp://127.0.0.1:8421', '']) {
      expect(() => new CustodyClient({ url, token: 'x' }), url).to.throw(CustodyError, /must be an http:\/\/ or https:\/\/ URL such as http:\/\/127\.0\.0\.1:8421/).with.property('code', 'usage');
    }
  });

  it('does not load Node\'s fetch (undici) in a process that makes calls', async () => {
    const fake = await flakyServer(0, () => ({ status: 200, body: { status: 'ok', pid: 1, uptime_ms: 1 } }));
    servers.push(fake.server);
    const client = new URL('../../../supervisor/client/index.js', import.meta.url).href;
    const script = `const { CustodyClient } = await import(${JSON.stringify(client)});
      const health = await new CustodyClient({ url: ${JSON.stringify(fake.url)}, token: 'x' }).health();
      console.log(JSON.stringify({ health, undici: process.moduleLoadList.filter((name) => /undici/.test(name)) }));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script]);
    expect(JSON.parse(stdout)).to.deep.equal({ health: { status: 'ok', pid: 1, uptime_ms: 1 }, undici: [] });
  });

  it('fails a call the service takes and never answers once answerTimeoutMs has passed, without retrying: a read as service_unavailable, a POST as outcome_unknown naming it', async () => {
    // A stopped (SIGSTOP) service: the connection is accepted, the request read, nothing answered.
    const seen: string[] = [];
    const silent = createServer((request) => void seen.push(`${request.method} ${request.url}`));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    servers.push(silent);
    const url = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const client = new CustodyClient({ url, token: 'x', retries: 3, retryDelayMs: 1, answerTimeoutMs: 300 });
    const started = Date.now();
    const read = await client.status().catch((e: unknown) => e);
    const readMs = Date.now() - started;
    expect(read).to.be.instanceOf(CustodyError).with.property('code', 'service_unavailable');
    expect((read as CustodyError).message).to.contain('did not answer within 300 ms').and.to.contain('stopped (SIGSTOP) or hung');
    expect(readMs, 'waited the timeout, once').to.be.within(290, 5_000);
    const posted = await client.invoke({ tool: 'review-notes/append', request_id: 'mine-4', wait_ms: 0 }).catch((e: unknown) => e);
    expect(posted).to.be.instanceOf(CustodyError).with.property('code', 'outcome_unknown');
    expect((posted as CustodyError).message).to.contain('may still complete').and.to.contain('mine-4');
    expect(seen, 'neither call was sent again').to.deep.equal(['GET /v1/status', 'POST /v1/invoke']);
    silent.closeAllConnections();
  });

  it('waits the wait_ms a call asks the service for on top of answerTimeoutMs, and the service\'s own wait when it names none', async () => {
    // The service answers 1.5 s after the request: inside 2000 + 300, past 100 + 300, inside 120 s + 300.
    const slow = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { request_id: string };
        setTimeout(() => {
          response.writeHead(200, { 'content-type': 'application/json' });
          response.end(JSON.stringify(outcome(body.request_id)));
        }, 1_500);
      });
    });
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
    servers.push(slow);
    const client = new CustodyClient({ url: `http://127.0.0.1:${(slow.address() as { port: number }).port}`, token: 'x', retries: 0, answerTimeoutMs: 300 });
    expect(await client.invoke({ tool: 'review-notes/append', request_id: 'mine-5', wait_ms: 2_000 })).to.include({ request_id: 'mine-5', http_status: 200 });
    const past = await client.invoke({ tool: 'review-notes/append', request_id: 'mine-6', wait_ms: 100 }).catch((e: unknown) => e);
    expect(past).to.have.property('code', 'outcome_unknown');
    expect((past as CustodyError).message).to.contain('within 400 ms');
    expect(await client.invoke({ tool: 'review-notes/append', request_id: 'mine-7' })).to.include({ request_id: 'mine-7', http_status: 200 });
  });

  it('refuses an answerTimeoutMs that is not a whole number of milliseconds from 1 to a day', () => {
    for (const answerTimeoutMs of [0, -1, 1.5, Number.NaN, 86_400_001]) {
      expect(() => new CustodyClient({ url: 'http://127.0.0.1:1', token: 'x', answerTimeoutMs }), String(answerTimeoutMs)).to.throw(CustodyError, /answerTimeoutMs must be a whole number/).with.property('code', 'usage');
    }
    for (const answerTimeoutMs of [1, 86_400_000]) expect(new CustodyClient({ url: 'http://127.0.0.1:1', token: 'x', answerTimeoutMs }).url).to.equal('http://127.0.0.1:1');
  });

  it('does not retry adding a grant after a broken connection (a second grant would be a second grant)', async () => {
    const fake = await flakyServer(1, () => ({ status: 201, body: {} }));
    servers.push(fake.server);
    const client = new CustodyClient({ url: fake.url, token: 'x', retries: 3, retryDelayMs: 1 });
    const error = await client.addGrant({ tool: 'review-notes/*', max_invocations: 1, ttl_ms: 1000 }).catch((e: unknown) => e);
    expect((error as CustodyError).code).to.equal('outcome_unknown');
    expect(fake.seen).to.have.length(1);
  });

  it('turns error bodies into CustodyErrors with their code, and a refused connection into service_unavailable', async () => {
    const fake = await flakyServer(0, () => ({ status: 409, body: { code: 'request_conflict', message: 'request mine-2 was made with other arguments' } }));
    servers.push(fake.server);
    const conflict = await new CustodyClient({ url: fake.url, token: 'x' }).invoke({ tool: 'a/b', request_id: 'mine-2' }).catch((e: unknown) => e);
    expect(conflict).to.be.instanceOf(CustodyError);
    expect(conflict).to.include({ code: 'request_conflict', message: 'request mine-2 was made with other arguments' });
    // A port that was just free: nothing listens, the connection is refused, nothing was sent.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const down = await new CustodyClient({ url: `http://127.0.0.1:${port}`, token: 'x', retries: 1, retryDelayMs: 1 }).invoke({ tool: 'a/b' }).catch((e: unknown) => e);
    expect((down as CustodyError).code).to.equal('service_unavailable');
  });
});

describe('the pause before a retry', () => {
  it('doubles per attempt and is drawn between half of it and all of it, so clients refused together spread out', () => {
    expect([0, 1, 2].map((attempt) => retryPause(200, attempt, () => 0))).to.deep.equal([100, 200, 400]);
    expect([0, 1, 2].map((attempt) => retryPause(200, attempt, () => 1))).to.deep.equal([200, 400, 800]);
    const pauses = Array.from({ length: 200 }, () => retryPause(200, 0));
    expect(Math.min(...pauses)).to.be.at.least(100);
    expect(Math.max(...pauses)).to.be.at.most(200);
    expect(new Set(pauses.map((pause) => Math.floor(pause / 10))).size, 'spread over the range, not one instant').to.be.above(5);
  });
});

describe('CustodyClient listings', () => {
  it('pages: grants() follows next_after to the last page, opsPage() and grantsPage() send limit, after and live and return next_after', async () => {
    const grant = (id: string) => ({ capability: '{}', capability_id: id, revoked_at: null, invocations_used: 0, invocations_held: 0, cost_units_used: 0, cost_units_held: 0 });
    const pages: Record<string, { grants: unknown[]; next_after: string | null }> = {
      '': { grants: [grant('g3'), grant('g2')], next_after: '2.g2' },
      '2.g2': { grants: [grant('g1')], next_after: null },
    };
    const { url, seen, server } = await flakyServer(0, (request) => {
      const query = new URL(request.url, 'http://x').searchParams;
      if (request.url.startsWith('/v1/grants')) return { status: 200, body: pages[query.get('after') ?? ''] };
      return { status: 200, body: { operations: [], next_after: query.get('after') === null ? '5.op' : null } };
    });
    try {
      const client = new CustodyClient({ url, token: 'x', retries: 0 });
      expect((await client.grants({ live: true })).map((g) => g.capability_id), 'every page, not the first 1,000').to.deep.equal(['g3', 'g2', 'g1']);
      expect(seen.map((s) => s.url)).to.deep.equal(['/v1/grants?live=true', '/v1/grants?live=true&after=2.g2']);
      expect((await client.grantsPage({ limit: 2 })).next_after).to.equal('2.g2');
      expect((await client.opsPage({ limit: 10 })).next_after).to.equal('5.op');
      expect(await client.opsPage({ after: '5.op' })).to.deep.equal({ items: [], next_after: null });
      expect(seen.slice(-3).map((s) => s.url)).to.deep.equal(['/v1/grants?limit=2', '/v1/operations?limit=10', '/v1/operations?after=5.op']);
    } finally {
      server.close();
    }
  });
});
