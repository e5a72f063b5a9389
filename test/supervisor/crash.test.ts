// kill -9 of the kernel, of an executor and of the supervisor itself while
// operations are in flight: every operation ends completed, refused or
// unknown with a reason, and never with two effects.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { isGone } from '../../supervisor/children/proc-stat.js';
import { type TestService, startService } from '../helpers/service.js';

const TERMINAL = new Set(['completed', 'released', 'denied', 'start_denied', 'expired', 'finalization_denied']);

function notesPerOperation(service: TestService): Map<string, number> {
  const counts = new Map<string, number>();
  let text: string;
  try {
    text = readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8');
  } catch {
    return counts;
  }
  for (const line of text.split('\n')) {
    try {
      const entry = JSON.parse(line) as { operation_id?: string; note?: string };
      if (entry.operation_id && entry.note !== undefined) counts.set(entry.operation_id, (counts.get(entry.operation_id) ?? 0) + 1);
    } catch {
      // a torn line from a crash is not an entry
    }
  }
  return counts;
}

async function pidOf(service: TestService, role: 'kernel' | 'executor'): Promise<number> {
  const { body } = await service.http('GET', '/v1/status');
  const child = (body.children as Array<{ role: string; pid: number | null; state: string }>).find((c) => c.role === role);
  if (!child?.pid) throw new Error(`no running ${role}`);
  return child.pid;
}

/** Fire invokes and swallow transport errors: a killed supervisor drops its connections. */
function invokeAll(service: TestService, ids: readonly string[]): Promise<unknown> {
  return Promise.allSettled(ids.map((id) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: id, arguments: { note: `note ${id}` }, wait_ms: 60_000 }, 'agent')));
}

async function waitForEnds(service: TestService, ids: readonly string[], timeoutMs = 40_000): Promise<Map<string, { state: string }>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { body } = await service.http('GET', '/v1/operations?limit=1000');
    const states = new Map((body.operations as Array<{ name: string; state: string }>).map((o) => [o.name, o]));
    const open = ids.filter((id) => !TERMINAL.has(states.get(id)?.state ?? 'missing'));
    if (open.length === 0) return states;
    if (Date.now() > deadline) throw new Error(`still open after ${timeoutMs} ms: ${open.map((id) => `${id}=${states.get(id)?.state}`).join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** At most one effect per operation; exactly one for a completed one, none for one released. */
function assertAtMostOnce(service: TestService, states: Map<string, { state: string }>, ids: readonly string[]): void {
  const notes = notesPerOperation(service);
  for (const id of ids) {
    const effects = notes.get(operationIdFor(id)) ?? 0;
    const state = states.get(id)!.state;
    expect(effects, `${id} (${state}) has at most one effect`).to.be.at.most(1);
    if (state === 'completed') expect(effects, `${id} completed with its note`).to.equal(1);
    if (state === 'released' || state === 'denied') expect(effects, `${id} ${state} without its note`).to.equal(0);
  }
}

describe('kill -9 while operations are in flight', function () {
  this.timeout(120_000);
  let service: TestService;

  beforeEach(async () => {
    service = await startService({ config: { restart: { max_restarts: 10, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 500 } } });
    const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000, ttl_ms: 3_600_000 });
    expect(grant.status).to.equal(201);
  });

  afterEach(async () => {
    await service.stop();
    service.cleanup();
  });

  it('past the executor\'s bound on requests in flight: more invokes than it takes at once all complete, none refused', async () => {
    const ids = Array.from({ length: 40 }, (_, i) => `b-${i}`);
    await invokeAll(service, ids);
    const states = await waitForEnds(service, ids);
    for (const id of ids) expect(states.get(id)!.state, id).to.equal('completed');
    assertAtMostOnce(service, states, ids);
  });

  it('of the kernel: every operation completes once the kernel is back', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => `k-${i}`);
    const kernel = await pidOf(service, 'kernel');
    const load = invokeAll(service, ids);
    await new Promise((resolve) => setTimeout(resolve, 150));
    process.kill(kernel, 'SIGKILL');
    await load;
    const states = await waitForEnds(service, ids);
    for (const id of ids) expect(states.get(id)!.state, id).to.equal('completed');
    assertAtMostOnce(service, states, ids);
    expect(await pidOf(service, 'kernel')).to.not.equal(kernel);
  });

  it('of the executor: operations end completed or released, each effect at most once', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => `e-${i}`);
    const executor = await pidOf(service, 'executor');
    const load = invokeAll(service, ids);
    await new Promise((resolve) => setTimeout(resolve, 150));
    process.kill(executor, 'SIGKILL');
    await load;
    const states = await waitForEnds(service, ids);
    for (const id of ids) expect(['completed', 'released'], id).to.include(states.get(id)!.state);
    assertAtMostOnce(service, states, ids);
    const incidents = (await service.http('GET', '/v1/incidents?limit=200')).body.incidents as Array<{ kind: string }>;
    expect(incidents.map((i) => i.kind)).to.include('child_exit');
  });

  it('of the supervisor: a new supervisor kills the old children, resumes every request, and retries are answered the same way', async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `s-${i}`);
    const children = [await pidOf(service, 'kernel'), await pidOf(service, 'executor')];
    const load = invokeAll(service, ids);
    await new Promise((resolve) => setTimeout(resolve, 150));
    service.process.kill('SIGKILL');
    await load;
    service = await service.restart();
    for (const pid of children) {
      expect(isGone(pid, null), `old child ${pid} is gone`).to.equal(true);
    }
    const retried = await Promise.all(ids.map((id) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: id, arguments: { note: `note ${id}` } }, 'agent')));
    const states = await waitForEnds(service, ids);
    for (const [i, id] of ids.entries()) {
      const answer = retried[i]!.body as { outcome: string | null };
      expect(answer.outcome, `${id}: the retry tells the same end as the kernel`).to.equal(states.get(id)!.state);
    }
    assertAtMostOnce(service, states, ids);
  });
});
