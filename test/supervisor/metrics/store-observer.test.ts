// What supervisor.db tells its observer (the metrics): every phase move,
// including a quarantine by crash count, and every incident, after the write.
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createLogger } from '../../../shared/log.js';
import { operationIdFor } from '../../../shared/protocol/binding.js';
import { ServiceMetrics } from '../../../supervisor/metrics/metrics.js';
import { SupervisorStore } from '../../../supervisor/store/supervisor-store.js';
import { parsePrometheusText, valueOf } from '../../helpers/prometheus-text.js';

describe('supervisor/metrics: what the store reports', () => {
  let dir: string;
  let store: SupervisorStore;
  let metrics: ServiceMetrics;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-observer-'));
    store = SupervisorStore.provision(path.join(dir, 'supervisor'));
    metrics = new ServiceMetrics({ inFlight: () => 0, children: () => [], log: createLogger({}, { level: 'error', write: () => undefined }) });
    store.observer = metrics;
  });
  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const logRequest = (id: string) =>
    store.logRequest({ request_id: id, operation_id: operationIdFor(id), kind: 'invoke', tool: 't/x', subject: 'agent', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });

  it('counts a request parked by its crash count as quarantined, and a reconciliation it ended as quarantined', async () => {
    logRequest('pill');
    store.movePhase('pill', 'reserved', { nonce_id: 'n-1' });
    store.movePhase('pill', 'authorized', { authorization: '{}', executor: 'e' });
    store.movePhase('pill', 'reconciling');
    store.countCrash('pill', 'default', 'first', 2);
    store.countCrash('pill', 'default', 'second', 2);
    expect(store.getRequest('pill')!.phase).to.equal('quarantined');
    const families = parsePrometheusText(await metrics.scrape());
    expect(valueOf(families, 'custody_operations_total', { tool: 't/x', outcome: 'quarantined' })).to.equal(1);
    expect(valueOf(families, 'custody_reconciliations_total', { result: 'quarantined' })).to.equal(1);
    expect(valueOf(families, 'custody_incidents_total', { kind: 'request_crash' })).to.equal(2);
    expect(valueOf(families, 'custody_incidents_total', { kind: 'quarantined' })).to.equal(1);
    for (const phase of ['received', 'reserved', 'authorized', 'reconciling']) expect(valueOf(families, 'custody_operation_duration_seconds_count', { phase }), phase).to.equal(1);
  });

  it('tells nothing of a move that did not happen (staying in place)', async () => {
    logRequest('still');
    store.movePhase('still', 'received');
    const families = parsePrometheusText(await metrics.scrape());
    expect(valueOf(families, 'custody_operation_duration_seconds_count', { phase: 'received' })).to.equal(0);
  });

  it('counts the supervisor\'s own commits by the request writes each carried', async () => {
    const before = valueOf(parsePrometheusText(await metrics.scrape()), 'custody_commit_batch_size_count', { store: 'supervisor' });
    const logged = (id: string) => store.logRequestGrouped({ request_id: id, operation_id: operationIdFor(id), kind: 'invoke', tool: 't/x', subject: 'agent', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });
    await Promise.all([logged('g-1'), logged('g-2'), logged('g-3')]);
    const families = parsePrometheusText(await metrics.scrape());
    expect(valueOf(families, 'custody_commit_batch_size_count', { store: 'supervisor' }) - before).to.equal(1);
    expect(valueOf(families, 'custody_commit_batch_size_sum', { store: 'supervisor' })).to.equal(3);
  });

  it('times a phase held in memory from when this process moved it, not from the last durable write', async () => {
    logRequest('slow');
    store.movePhaseLater('slow', 'reserved', { nonce_id: 'n-1' });
    await new Promise((resolve) => setTimeout(resolve, 60));
    store.movePhaseLater('slow', 'authorized', { authorization: '{}', executor: 'e' });
    const families = parsePrometheusText(await metrics.scrape());
    expect(valueOf(families, 'custody_operation_duration_seconds_sum', { phase: 'reserved' })).to.be.at.least(0.05);
    expect(valueOf(families, 'custody_operation_duration_seconds_sum', { phase: 'received' })).to.be.below(0.05);
  });
});
