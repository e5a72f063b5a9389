// bounds.max_requests_in_flight (supervisor/api/request-bound.ts, README
// "Bounds", docs/SECURITY.md "Requests in flight"): with the bound's worth of
// requests being carried, a new invoke or authorize is refused with
// service_busy before anything is recorded, a request already logged is
// still carried, and once room frees the refused one runs under its name.
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CustodyClient } from '../../supervisor/client/index.js';
import { untilHolds } from '../helpers/eventually.js';
import { parsePrometheusText, valueOf } from '../helpers/prometheus-text.js';
import { FIXTURE_EXECUTOR, logEvents, sqlite, startService, type TestService } from '../helpers/service.js';

const BOUND = 4;

describe('the bound on requests in flight (bounds.max_requests_in_flight)', function () {
  this.timeout(60_000);
  let service: TestService;
  let latchDir: string;

  before(async () => {
    latchDir = mkdtempSync(path.join(tmpdir(), 'custody-bound-'));
    // fixture/later reconciles indeterminate until a marker file names its operation (test/fixtures/executor-adapters.ts).
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR], bounds: { max_requests_in_flight: BOUND } }, env: { CUSTODY_FIXTURE_DIR: latchDir } });
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 1000, ttl_ms: 3_600_000 })).status).to.equal(201);
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
    rmSync(latchDir, { recursive: true, force: true });
  });

  const supervisorDb = () => path.join(service.paths.supervisorDir, 'supervisor.db');
  const rowsNamed = async (name: string) => (await sqlite(supervisorDb(), `SELECT request_id FROM requests WHERE request_id = '${name}'`)).length;
  // GET /metrics answers on loopback without a token.
  const refusedMetric = async () => valueOf(parsePrometheusText(await (await fetch(`http://127.0.0.1:${service.port}/metrics`)).text()), 'custody_requests_refused_busy_total');

  it('holds a place from arrival: of ten new requests sent at once, the bound\'s worth are taken and the rest refused, with nothing recorded for them', async () => {
    const latch = path.join(latchDir, 'go-burst');
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) => service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: `burst-${i}`, arguments: { path: latch }, wait_ms: 0 }, 'agent')),
    );
    const statuses = answers.map((answer) => answer.status).sort();
    expect(statuses).to.deep.equal([...Array<number>(BOUND).fill(202), ...Array<number>(10 - BOUND).fill(503)]);
    expect(answers.filter((answer) => answer.status === 503).every((answer) => answer.body.code === 'service_busy')).to.equal(true);
    expect((await sqlite(supervisorDb(), `SELECT request_id FROM requests WHERE request_id LIKE 'burst-%'`)).length).to.equal(BOUND);
    writeFileSync(latch, '');
    for (const answer of answers.filter((a) => a.status === 202)) {
      const settled = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: String(answer.body.request_id), arguments: { path: latch }, wait_ms: 20_000 }, 'agent');
      expect(settled.body).to.include({ outcome: 'completed' });
    }
  });

  it('refuses a new request at the bound, carries the ones logged, never refuses the operator, and takes the refused one once room frees', async () => {
    const latch = path.join(latchDir, 'go');
    const refusedBefore = await refusedMetric();
    // The bound's worth of requests, each held in its effect until the latch file exists.
    for (let i = 0; i < BOUND; i++) {
      const held = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: `held-${i}`, arguments: { path: latch }, wait_ms: 0 }, 'agent');
      expect(held.status, JSON.stringify(held.body)).to.equal(202);
    }

    // One past the bound: refused, and no row for it.
    const past = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'one-past', arguments: { path: latch }, wait_ms: 0 }, 'agent');
    expect(past.status).to.equal(503);
    expect(past.body.code).to.equal('service_busy');
    expect(String(past.body.message)).to.contain(`bounds.max_requests_in_flight ${BOUND}`).and.to.contain('one-past');
    expect(await rowsNamed('one-past')).to.equal(0);

    // A request already logged is carried as ever: asking again for it is not refused.
    const again = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'held-0', arguments: { path: latch }, wait_ms: 0 }, 'agent');
    expect(again.status, JSON.stringify(again.body)).to.equal(202);

    // The control token is never refused: an agent's flood does not shut the operator out.
    const operator = await service.http('POST', '/v1/authorize', { tool: 'fixture/latch', operation: 'by-the-operator', arguments: { path: latch }, wait_ms: 0 }, 'control');
    expect(operator.status, JSON.stringify(operator.body)).to.be.oneOf([200, 202]);
    expect(await rowsNamed('by-the-operator')).to.equal(1);

    await untilHolds('requests_full logged', () => logEvents(service, 'requests_full').some((line) => line.bound === BOUND));
    // Tallied, not a line each: a flood's refusals do not flood the log.
    expect(logEvents(service, 'api_refused').filter((line) => line.code === 'service_busy')).to.deep.equal([]);
    expect((await refusedMetric()) - refusedBefore).to.equal(1);

    // The client library asks again by itself: refused while the four are held, it gets its answer once they end.
    const client = CustodyClient.fromState(service.dir, { role: 'agent', retries: 8, retryDelayMs: 100 });
    const retried = client.invoke({ tool: 'fixture/latch', request_id: 'client-retried', arguments: { path: latch }, wait_ms: 20_000 });
    await untilHolds('the client was refused once', async () => (await refusedMetric()) - refusedBefore >= 2);
    writeFileSync(latch, '');
    const answer = await retried;
    expect(answer.outcome).to.equal('completed');

    const later = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'one-past', arguments: { path: latch }, wait_ms: 20_000 }, 'agent');
    expect(later.status, JSON.stringify(later.body)).to.equal(200);
    expect(later.body).to.include({ outcome: 'completed' });
    for (let i = 0; i < BOUND; i++) {
      const held = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: `held-${i}`, arguments: { path: latch }, wait_ms: 20_000 }, 'agent');
      expect(held.body).to.include({ outcome: 'completed' });
    }
  });

  it('leaves out operations in doubt, up to the bound\'s worth: those asked about again and again do not keep new work out, and past that they count', async () => {
    const latch = path.join(latchDir, 'go-doubt');
    const IN_DOUBT = BOUND + 2;
    const doubted: string[] = [];
    for (let i = 0; i < IN_DOUBT; i++) {
      const answer = await service.http('POST', '/v1/invoke', { tool: 'fixture/later', request_id: `doubt-${i}`, arguments: {}, wait_ms: 0 }, 'agent');
      expect(answer.status, JSON.stringify(answer.body)).to.equal(202);
      doubted.push(String(answer.body.operation_id));
      // Into doubt before the next: until then it counts like any request.
      await untilHolds(`doubt-${i} in doubt`, async () => (await sqlite(supervisorDb(), `SELECT phase FROM requests WHERE request_id = 'doubt-${i}'`))[0]?.phase === 'reconciling');
    }
    await untilHolds('every one in doubt, asked again', () => new Set(logEvents(service, 'reconcile_unanswered').map((line) => line.request_id).filter((id) => String(id).startsWith('doubt-'))).size === IN_DOUBT);
    // Six in doubt, four of them left out: two count, so two more fit and the third is refused.
    for (let i = 0; i < BOUND - (IN_DOUBT - BOUND); i++) {
      const fresh = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: `beside-${i}`, arguments: { path: latch }, wait_ms: 0 }, 'agent');
      expect(fresh.status, JSON.stringify(fresh.body)).to.equal(202);
    }
    const past = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'beside-past', arguments: { path: latch }, wait_ms: 0 }, 'agent');
    expect(past.status, JSON.stringify(past.body)).to.equal(503);

    writeFileSync(latch, '');
    for (const operationId of doubted) writeFileSync(path.join(latchDir, `${operationId}.applied`), '');
    for (let i = 0; i < IN_DOUBT; i++) {
      const settled = await service.http('POST', '/v1/invoke', { tool: 'fixture/later', request_id: `doubt-${i}`, arguments: {}, wait_ms: 20_000 }, 'agent');
      expect(settled.body).to.include({ outcome: 'completed' });
    }
  });
});
