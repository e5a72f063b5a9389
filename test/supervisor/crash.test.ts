// kill -9 of the kernel, of an executor and of the supervisor itself while
// operations are in flight: every operation ends completed, refused or
// unknown with a reason, and never with two effects. Each kill is pinned to
// work in flight: one operation waits at the adapter host's pause point
// (pause_before_effect), claimed and without a report, when the kill lands,
// and the test checks that it was so before it kills.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { checkInvariants } from '../../scripts/chaos/invariants.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { isGone } from '../../shared/child/proc-stat.js';
import { eventually } from '../helpers/eventually.js';
import { type TestService, startService } from '../helpers/service.js';

const TERMINAL = new Set(['completed', 'released', 'denied', 'start_denied', 'expired', 'finalization_denied', 'unknown']);

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

/** Operations claimed in the executor's ledger and without a report: work in flight. */
function claimedWithoutReport(service: TestService): string[] {
  const db = new Database(path.join(service.paths.executorDir('default'), 'ledger.db'), { readonly: true, fileMustExist: true });
  try {
    const rows = db
      .prepare("SELECT c.operation_id FROM claims c LEFT JOIN reports r ON r.operation_id = c.operation_id WHERE c.kind = 'claim' AND r.operation_id IS NULL")
      .all() as Array<{ operation_id: string }>;
    return rows.map((row) => row.operation_id);
  } finally {
    db.close();
  }
}

/** Every request final, its end in the stores consistent: the invariant checker, over the three stores and the journal. */
async function assertInvariants(service: TestService, ids: readonly string[]): Promise<void> {
  await service.stop();
  const checked = checkInvariants({ root: service.dir, mustBeFinal: ids });
  expect(checked.violations, JSON.stringify(checked.violations.slice(0, 5))).to.deep.equal([]);
}

describe('kill -9 while operations are in flight', function () {
  this.timeout(120_000);
  let service: TestService;
  let faultDir: string;
  const reached = () => path.join(faultDir, 'executor.pause_before_effect.reached');
  const release = () => writeFileSync(path.join(faultDir, 'executor.pause_before_effect.release'), '');

  /** Wait until one operation is pinned before its effect, and prove it is claimed without a report. */
  async function pinned(ids: readonly string[]): Promise<string> {
    await eventually(() => {
      try {
        return readFileSync(reached(), 'utf8') !== '';
      } catch {
        return false;
      }
    }, 30_000, 'an operation paused before its effect');
    const inFlight = claimedWithoutReport(service);
    const mine = ids.map((id) => operationIdFor(id)).filter((operationId) => inFlight.includes(operationId));
    expect(mine, 'the kill lands while an operation is claimed and has no report').to.have.length.at.least(1);
    return mine[0]!;
  }

  beforeEach(async () => {
    faultDir = mkdtempSync(path.join(tmpdir(), 'custody-crash-fault-'));
    service = await startService({
      config: { restart: { max_restarts: 10, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 500 } },
      env: { CUSTODY_FAULT: 'executor:pause_before_effect', CUSTODY_FAULT_DIR: faultDir },
    });
    const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000, ttl_ms: 3_600_000 });
    expect(grant.status).to.equal(201);
  });

  afterEach(async () => {
    release();
    await service.stop();
    service.cleanup();
    rmSync(faultDir, { recursive: true, force: true });
  });

  it('past the executor\'s bound on requests in flight: more invokes than it takes at once all complete, none refused', async () => {
    // Forty invokes against an executor that takes four at a time (the default, 64, would never be reached):
    // the supervisor's slots must hold the rest back, not refuse them or overrun the executor's own bound.
    await service.stop();
    service.cleanup();
    service = await startService({ config: { executors: [{ name: 'default', max_in_flight: 4 }] } });
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000, ttl_ms: 3_600_000 })).status).to.equal(201);
    const ids = Array.from({ length: 40 }, (_, i) => `b-${i}`);
    release();
    // Each invoke answered completed itself: a slot refused and driven again by the sweep would answer otherwise.
    const answers = await Promise.all(ids.map((id) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: id, arguments: { note: `note ${id}` }, wait_ms: 60_000 }, 'agent')));
    expect(answers.map((answer) => answer.body.outcome)).to.deep.equal(ids.map(() => 'completed'));
    const states = await waitForEnds(service, ids);
    for (const id of ids) expect(states.get(id)!.state, id).to.equal('completed');
    assertAtMostOnce(service, states, ids);
    const warned = service.stderr.filter((line) => /"level":"(warn|error)"/.test(line));
    expect(warned, 'nothing refused, retried or swept').to.deep.equal([]);
  });

  it('of the kernel: every operation completes once the kernel is back, the one in flight at the kill too', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => `k-${i}`);
    const kernel = await pidOf(service, 'kernel');
    const load = invokeAll(service, ids);
    const inFlight = await pinned(ids);
    process.kill(kernel, 'SIGKILL');
    await eventually(() => isGone(kernel, null), 10_000, 'the kernel gone');
    release();
    await load;
    const states = await waitForEnds(service, ids);
    for (const id of ids) expect(states.get(id)!.state, id).to.equal('completed');
    assertAtMostOnce(service, states, ids);
    expect(claimedWithoutReport(service), 'the pinned operation has its report').to.not.include(inFlight);
    expect(await pidOf(service, 'kernel')).to.not.equal(kernel);
    await assertInvariants(service, ids);
  });

  it('of the executor: operations end completed, released or unknown with a reason, each effect at most once', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => `e-${i}`);
    const executor = await pidOf(service, 'executor');
    const load = invokeAll(service, ids);
    const inFlight = await pinned(ids);
    process.kill(executor, 'SIGKILL');
    await eventually(() => isGone(executor, null), 10_000, 'the executor gone');
    // The orphaned adapter host may still append after the kill: fencing must keep reconciliation true.
    release();
    await load;
    const states = await waitForEnds(service, ids);
    for (const id of ids) expect(['completed', 'released', 'unknown'], id).to.include(states.get(id)!.state);
    assertAtMostOnce(service, states, ids);
    const incidents = (await service.http('GET', '/v1/incidents?limit=500')).body.incidents as Array<{ kind: string; operation_id: string | null }>;
    expect(incidents.map((i) => i.kind)).to.include('child_exit');
    expect(incidents.filter((i) => i.operation_id === inFlight).map((i) => i.kind), 'the operation in flight was reconciled').to.include('reconciled');
    await assertInvariants(service, ids);
  });

  it('of the supervisor: a new supervisor kills the old children, resumes every request, and retries are answered the same way', async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `s-${i}`);
    const children = [await pidOf(service, 'kernel'), await pidOf(service, 'executor')];
    const load = invokeAll(service, ids);
    await pinned(ids);
    service.process.kill('SIGKILL');
    await load;
    release();
    service = await service.restart();
    for (const pid of children) {
      expect(isGone(pid, null), `old child ${pid} is gone`).to.equal(true);
    }
    const retried = await Promise.all(ids.map((id) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: id, arguments: { note: `note ${id}` } }, 'agent')));
    const states = await waitForEnds(service, ids);
    for (const [i, id] of ids.entries()) {
      const answer = retried[i]!.body as { outcome: string | null };
      if (states.get(id)!.state !== 'unknown') expect(answer.outcome, `${id}: the retry tells the same end as the kernel`).to.equal(states.get(id)!.state);
    }
    assertAtMostOnce(service, states, ids);
    await assertInvariants(service, ids);
  });
});
