// GET /metrics on a real service: the answer parses as the Prometheus text
// format (a strict parser, test/helpers/prometheus-text.ts), and the figures
// move as operations complete, as a reply is lost and reconciled, and as the
// executor restarts. The kernel's holds and commit batches come from the
// kernel itself (the stats message).
import { expect } from 'chai';
import { type Family, parsePrometheusText, valueOf } from '../../helpers/prometheus-text.js';
import { type TestService, startService } from '../../helpers/service.js';
import { until } from '../../helpers/eventually.js';

const TOOL = 'review-notes/append';

async function scrape(service: TestService, token?: string): Promise<{ status: number; type: string | null; families: Map<string, Family> | null; text: string }> {
  const response = await fetch(`http://127.0.0.1:${service.port}/metrics`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  const text = await response.text();
  return { status: response.status, type: response.headers.get('content-type'), families: response.status === 200 ? parsePrometheusText(text) : null, text };
}


describe('GET /metrics', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    service = await startService();
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('answers without a token on loopback, in the Prometheus text format, naming every family', async () => {
    const { status, type, families } = await scrape(service);
    expect(status).to.equal(200);
    expect(type).to.equal('text/plain; version=0.0.4; charset=utf-8');
    const expected: Record<string, string> = {
      custody_operations_total: 'counter',
      custody_operation_duration_seconds: 'histogram',
      custody_operations_in_flight: 'gauge',
      custody_child_restarts_total: 'counter',
      custody_incidents_total: 'counter',
      custody_channel_poisoned_total: 'counter',
      custody_kernel_holds: 'gauge',
      custody_commit_batch_size: 'histogram',
      custody_reconciliations_total: 'counter',
    };
    for (const [name, metricType] of Object.entries(expected)) expect(families!.get(name)?.type, name).to.equal(metricType);
  });

  it('moves the operation counters, phase durations, holds and kernel batches as invokes complete', async () => {
    const before = (await scrape(service)).families!;
    for (let i = 0; i < 3; i++) {
      const answer = await service.http('POST', '/v1/invoke', { tool: TOOL, arguments: { note: `metrics ${i}` }, request_id: `metrics-${i}` }, 'agent');
      expect(answer.body).to.include({ phase: 'settled', outcome: 'completed' });
    }
    const after = (await scrape(service)).families!;
    const delta = (name: string, labels: Record<string, string> = {}) => valueOf(after, name, labels) - valueOf(before, name, labels);
    expect(delta('custody_operations_total', { tool: TOOL, outcome: 'completed' })).to.equal(3);
    for (const phase of ['received', 'reserved', 'authorized', 'executing', 'reported']) {
      expect(delta('custody_operation_duration_seconds_count', { phase }), phase).to.equal(3);
    }
    expect(delta('custody_kernel_holds', { state: 'consumed' }), 'three holds consumed, as the kernel counts them').to.equal(3);
    expect(valueOf(after, 'custody_kernel_holds', { state: 'reserved' })).to.equal(0);
    // Each invoke commits a reserve, a start and a settle on the kernel: at least three batches each time, none empty.
    expect(delta('custody_commit_batch_size_count', { store: 'kernel' })).to.be.at.least(3);
    expect(delta('custody_commit_batch_size_bucket', { store: 'kernel', le: '1024' })).to.equal(delta('custody_commit_batch_size_count', { store: 'kernel' }));
    // The executor's ledger: a claim and a report per invoke, one each per transaction.
    expect(delta('custody_commit_batch_size_bucket', { store: 'default/ledger', le: '1' })).to.equal(6);
    expect(valueOf(after, 'custody_operations_in_flight')).to.equal(0);
  });

  it('counts a reconciliation, the executor restart and the incidents of a lost reply', async () => {
    const before = (await scrape(service)).families!;
    expect((await service.http('POST', '/v1/authorize', { tool: TOOL, arguments: { note: 'lost reply' }, operation: 'metrics-lost' })).status).to.equal(200);
    const dropped = await service.http('POST', '/v1/operations/metrics-lost/execute', { drop_reply: true });
    expect(dropped.body.code ?? dropped.body.reason).to.equal('reply_dropped');
    const reconciled = await service.http('POST', '/v1/operations/metrics-lost/reconcile', {});
    expect(reconciled.body).to.include({ phase: 'settled', outcome: 'completed' });
    const after = await until('the restart counted', async () => {
      const families = (await scrape(service)).families!;
      return valueOf(families, 'custody_child_restarts_total', { child: 'default', reason: 'exit' }) > valueOf(before, 'custody_child_restarts_total', { child: 'default', reason: 'exit' }) ? families : undefined;
    });
    const delta = (name: string, labels: Record<string, string> = {}) => valueOf(after, name, labels) - valueOf(before, name, labels);
    expect(delta('custody_reconciliations_total', { result: 'completed' })).to.equal(1);
    expect(delta('custody_child_restarts_total', { child: 'default', reason: 'exit' })).to.equal(1);
    expect(delta('custody_incidents_total', { kind: 'child_exit' })).to.equal(1);
    expect(delta('custody_operations_total', { tool: TOOL, outcome: 'completed' })).to.equal(1);
  });
});

describe('GET /metrics with metrics.require_token', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: { metrics: { require_token: true } } });
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('refuses a scrape without a token (401) and answers one with the agent token', async () => {
    const refused = await scrape(service);
    expect(refused.status).to.equal(401);
    expect(JSON.parse(refused.text)).to.have.property('code', 'unauthorized');
    const agent = (await import('node:fs')).readFileSync(service.paths.agentToken, 'utf8').trim();
    const answered = await scrape(service, agent);
    expect(answered.status).to.equal(200);
    expect(answered.families!.get('custody_operations_total')?.type).to.equal('counter');
  });
});
