// ServiceMetrics without processes: what the store tells it and what the
// children's stats answers say become the right series, and a restarted
// child's cumulative counts (a new session) are not mistaken for a drop.
import { expect } from 'chai';
import { createLogger } from '../../../shared/log.js';
import type { StatsResult } from '../../../shared/protocol/stats.js';
import { ServiceMetrics, type StatsSource } from '../../../supervisor/metrics/metrics.js';
import type { RequestRow } from '../../../supervisor/store/supervisor-store.js';
import { parsePrometheusText, valueOf } from '../../helpers/prometheus-text.js';

function row(phase: string, at: number, extra: Partial<RequestRow> = {}): RequestRow {
  return { request_id: 'r', operation_id: 'o', kind: 'invoke', tool: 't/x', phase, updated_at: at, report: null, outcome: null, ...extra } as unknown as RequestRow;
}

describe('supervisor/metrics: ServiceMetrics', () => {
  let kernelStats: StatsResult = { holds: [], commit_batches: [] };
  let sid = 's1';
  const kernel: StatsSource = { name: 'kernel', role: 'kernel', get sid() { return sid; }, stats: () => Promise.resolve(kernelStats) };
  const metrics = new ServiceMetrics({ inFlight: () => 2, children: () => [kernel], log: createLogger({}, { level: 'error', write: () => undefined }) });
  const scrape = async () => parsePrometheusText(await metrics.scrape());

  it('times each phase as a request leaves it and counts the end by tool and outcome', async () => {
    metrics.phase(row('received', 1000), row('reserved', 1250));
    metrics.phase(row('reserved', 1250), row('refused', 1300, { outcome: 'denied' }));
    const families = await scrape();
    expect(valueOf(families, 'custody_operation_duration_seconds_count', { phase: 'received' })).to.equal(1);
    expect(valueOf(families, 'custody_operation_duration_seconds_sum', { phase: 'received' })).to.equal(0.25);
    expect(valueOf(families, 'custody_operations_total', { tool: 't/x', outcome: 'denied' })).to.equal(1);
    expect(valueOf(families, 'custody_operations_in_flight')).to.equal(2);
  });

  it('names a restart by the first incident since the last one, and counts poisonings by child and code', async () => {
    metrics.child({ name: 'e', role: 'executor', state: 'running', pid: 1, pid_start_ticks: 1, sid: 'a', restarts: 0, started_at: 1, last_exit: null });
    metrics.incident({ child: 'e', kind: 'channel_poisoned', code: 'mac_invalid' });
    metrics.incident({ child: 'e', kind: 'child_exit', code: 'channel_poisoned' });
    metrics.child({ name: 'e', role: 'executor', state: 'backoff', pid: null, pid_start_ticks: null, sid: null, restarts: 1, started_at: 1, last_exit: 'x' });
    metrics.incident({ child: 'e', kind: 'child_exit', code: null });
    metrics.child({ name: 'e', role: 'executor', state: 'backoff', pid: null, pid_start_ticks: null, sid: null, restarts: 2, started_at: 1, last_exit: 'x' });
    const families = await scrape();
    expect(valueOf(families, 'custody_child_restarts_total', { child: 'e', reason: 'channel_poisoned' })).to.equal(1);
    expect(valueOf(families, 'custody_child_restarts_total', { child: 'e', reason: 'exit' })).to.equal(1);
    expect(valueOf(families, 'custody_channel_poisoned_total', { child: 'e', code: 'mac_invalid' })).to.equal(1);
    expect(valueOf(families, 'custody_incidents_total', { kind: 'child_exit' })).to.equal(2);
  });

  it('observes only new batches of a session, and starts over with a new session', async () => {
    kernelStats = { holds: [{ state: 'reserved', count: 4 }], commit_batches: [{ store: 'kernel', size: 1, count: 3 }, { store: 'kernel', size: 8, count: 1 }] };
    let families = await scrape();
    expect(valueOf(families, 'custody_commit_batch_size_count', { store: 'kernel' })).to.equal(4);
    expect(valueOf(families, 'custody_kernel_holds', { state: 'reserved' })).to.equal(4);
    kernelStats = { holds: [{ state: 'reserved', count: 1 }], commit_batches: [{ store: 'kernel', size: 1, count: 5 }, { store: 'kernel', size: 8, count: 1 }] };
    families = await scrape();
    expect(valueOf(families, 'custody_commit_batch_size_count', { store: 'kernel' })).to.equal(6);
    expect(valueOf(families, 'custody_commit_batch_size_sum', { store: 'kernel' })).to.equal(5 + 8);
    expect(valueOf(families, 'custody_kernel_holds', { state: 'reserved' })).to.equal(1);
    // The kernel restarted: its counts begin again from nothing.
    sid = 's2';
    kernelStats = { holds: [], commit_batches: [{ store: 'kernel', size: 2, count: 1 }] };
    families = await scrape();
    expect(valueOf(families, 'custody_commit_batch_size_count', { store: 'kernel' })).to.equal(7);
    expect(valueOf(families, 'custody_commit_batch_size_bucket', { store: 'kernel', le: '1' })).to.equal(5);
  });

  it('shares one collection among scrapes asked while it is under way, and asks again for the next one', async () => {
    let asked = 0;
    let answer: (stats: StatsResult) => void = () => undefined;
    const slow: StatsSource = { name: 'kernel', role: 'kernel', sid: 's9', stats: () => (asked++, new Promise<StatsResult>((resolve) => (answer = resolve))) };
    const shared = new ServiceMetrics({ inFlight: () => 0, children: () => [slow], log: createLogger({}, { level: 'error', write: () => undefined }) });
    const flood = Array.from({ length: 50 }, () => shared.scrape());
    await new Promise((resolve) => setImmediate(resolve));
    expect(asked, 'fifty scrapes under way, one stats request').to.equal(1);
    answer({ holds: [{ state: 'reserved', count: 7 }], commit_batches: [] });
    const texts = await Promise.all(flood);
    expect(new Set(texts).size).to.equal(1);
    expect(valueOf(parsePrometheusText(texts[0]!), 'custody_kernel_holds', { state: 'reserved' })).to.equal(7);
    const next = shared.scrape();
    await new Promise((resolve) => setImmediate(resolve));
    expect(asked, 'a scrape after the last one ended asks again').to.equal(2);
    answer({ holds: [{ state: 'reserved', count: 8 }], commit_batches: [] });
    expect(valueOf(parsePrometheusText(await next), 'custody_kernel_holds', { state: 'reserved' })).to.equal(8);
  });
});
