// An executor on "another machine": its argv is a launcher that stays in
// between (test/fixtures/remote-relay.ts, which behaves as ssh does on a
// partition), so killing the launcher leaves the executor running with its
// stdin open, its lock held and an effect in flight. The replacement the
// supervisor starts must wait for the lock (the supervisor retries within its
// restart intensity, each refusal an incident naming the holder), nothing may
// run twice, and reconciliation must stay true whether the old effect finishes
// (its retained report is replayed) or not (the built-in review-notes tool
// fences, so a late append is refused: executor-proc/ADAPTERS.md).
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { checkInvariants } from '../../scripts/chaos/invariants.js';
import { reviewNotesAdapter } from '../../executor-proc/adapters/review-notes.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { distPath } from '../helpers/children.js';
import { eventually } from '../helpers/eventually.js';
import { alive, parentOf } from '../helpers/procs.js';
import { type TestService, startService } from '../helpers/service.js';

const RELAY = distPath('test', 'fixtures', 'remote-relay.js');
const EXECUTOR = distPath('executor-proc', 'main.js');

interface Incident {
  kind: string;
  code: string | null;
  message: string;
  operation_id: string | null;
}

function journal(service: TestService): Array<Record<string, unknown>> {
  let text: string;
  try {
    text = readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('an executor behind a launcher that can die while the executor lives on (ssh)', function () {
  this.timeout(120_000);
  let service: TestService;
  let faultDir: string;
  const leftovers: number[] = [];

  beforeEach(async () => {
    faultDir = mkdtempSync(path.join(tmpdir(), 'custody-remote-fault-'));
    service = await startService({
      config: (root) => ({
        restart: { max_restarts: 100, period_s: 60, backoff_initial_ms: 100, backoff_max_ms: 500 },
        executors: [
          {
            name: 'default',
            tools: ['review-notes/*'],
            argv: [process.execPath, RELAY, process.execPath, EXECUTOR, '--dir', path.join(root, 'executors', 'default'), '--resources', path.join(root, 'resources')],
          },
        ],
      }),
      env: { CUSTODY_FAULT: 'executor:pause_before_effect', CUSTODY_FAULT_DIR: faultDir },
    });
  });

  afterEach(async () => {
    writeFileSync(path.join(faultDir, 'executor.pause_before_effect.release'), '');
    await service.stop();
    for (const pid of leftovers.splice(0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    service.cleanup();
    rmSync(faultDir, { recursive: true, force: true });
  });

  interface Pinned {
    readonly requestId: string;
    readonly operationId: string;
    readonly answer: Promise<{ status: number; body: Record<string, unknown> }>;
    readonly adapterHost: number;
    readonly executor: number;
    claim(): unknown;
    close(): void;
  }

  /** An invoke paused before its effect on the remote executor; its launcher killed; the replacement refused. */
  async function launcherKilledMidOperation(requestId: string): Promise<Pinned> {
    const operationId = operationIdFor(requestId);
    const answer = service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: requestId, arguments: { note: 'across a partition' }, wait_ms: 90_000 }, 'agent');
    answer.catch(() => undefined);

    // Pinned: claimed, paused in the adapter host before its effect.
    const reached = path.join(faultDir, 'executor.pause_before_effect.reached');
    await eventually(() => {
      try {
        return readFileSync(reached, 'utf8').trim() !== '';
      } catch {
        return false;
      }
    }, 30_000, 'the effect paused');
    const adapterHost = Number(readFileSync(reached, 'utf8').trim());
    const executor = parentOf(adapterHost);
    leftovers.push(adapterHost, executor);
    const { body } = await service.http('GET', '/v1/status');
    const launcher = (body.children as Array<{ role: string; pid: number }>).find((c) => c.role === 'executor')!.pid;
    expect(launcher, 'the supervisor sees the launcher, not the executor').to.not.equal(executor);
    const remoteSide = parentOf(executor);
    expect(remoteSide, 'the executor runs under the detached remote side, not under its launcher').to.not.equal(launcher);
    leftovers.push(remoteSide);
    const ledger = new Database(path.join(service.paths.executorDir('default'), 'ledger.db'), { readonly: true });
    const claim = () => ledger.prepare('SELECT c.kind, r.status FROM claims c LEFT JOIN reports r USING (operation_id) WHERE c.operation_id = ?').get(operationId);
    expect(claim()).to.deep.equal({ kind: 'claim', status: null });

    // The launcher dies; the executor lives on, holding its lock.
    process.kill(launcher, 'SIGKILL');
    let refusals: Incident[] = [];
    const deadline = Date.now() + 30_000;
    while (refusals.length < 1 && Date.now() < deadline) {
      const incidents = ((await service.http('GET', '/v1/incidents?limit=500')).body.incidents as Incident[]) ?? [];
      refusals = incidents.filter((i) => i.code === 'store_locked' && i.message.includes(`pid ${executor}`));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(refusals.length, 'the replacement is refused, naming the live holder').to.be.at.least(1);
    const status = (await service.http('GET', '/v1/status')).body.children as Array<{ role: string; state: string }>;
    expect(status.find((c) => c.role === 'executor')!.state, 'no replacement serves beside the live executor').to.not.equal('running');
    expect(alive(executor), 'the executor outlives its launcher').to.equal(true);
    expect(journal(service).filter((line) => line.operation_id === operationId), 'no effect while the old executor holds on').to.deep.equal([]);
    expect(claim(), 'its claim stands, without a report').to.deep.equal({ kind: 'claim', status: null });
    return { requestId, operationId, answer, adapterHost, executor, claim, close: () => ledger.close() };
  }

  it('killing the launcher runs nothing twice: the old executor finishes its effect while the replacement waits, and reconciliation reports that effect', async () => {
    const pinned = await launcherKilledMidOperation('remote-finish');
    // The old effect goes on, on the "remote host": the note is appended, the report retained, the reply lost.
    writeFileSync(path.join(faultDir, 'executor.pause_before_effect.release'), '');
    await eventually(() => (pinned.claim() as { status: string | null }).status === 'completed', 20_000, 'the old executor retained its report');
    expect(journal(service).filter((line) => line.operation_id === pinned.operationId)).to.have.length(1);

    // The old executor goes at last; the replacement takes the lock and reconciles: the retained report, not a second run.
    process.kill(pinned.executor, 'SIGKILL');
    const settled = await pinned.answer;
    expect(settled.body).to.include({ final: true, outcome: 'completed' });
    expect(journal(service).filter((line) => line.operation_id === pinned.operationId), 'exactly one effect').to.have.length(1);
    pinned.close();

    await service.stop();
    const checked = checkInvariants({ root: service.dir, mustBeFinal: [pinned.requestId] });
    expect(checked.violations, JSON.stringify(checked.violations)).to.deep.equal([]);
  });

  it('killing the launcher runs nothing twice: when the old executor dies before its effect, reconciliation fences, and a late append is refused', async () => {
    const pinned = await launcherKilledMidOperation('remote-fence');
    // The old executor dies with its effect pending; its adapter host goes with it (it stops when its executor is gone).
    process.kill(pinned.executor, 'SIGKILL');
    await eventually(() => !alive(pinned.executor) && !alive(pinned.adapterHost), 10_000, 'the old executor and its adapter host gone');

    // The replacement takes the lock and reconciles: the tool fences, so "not applied" is and stays true.
    const settled = await pinned.answer;
    expect(settled.body).to.include({ final: true, outcome: 'released' });
    expect(journal(service).filter((line) => line.fence === pinned.operationId), 'reconciliation fenced the operation').to.have.length(1);
    expect(pinned.claim()).to.deep.equal({ kind: 'claim', status: 'reconciled_not_applied' });
    pinned.close();

    // A writer that escaped (a detached grandchild, a process on the old host) appends late: the fence refuses it.
    const late = reviewNotesAdapter(service.paths.resourcesDir, 4096, () => undefined);
    const outcome = await late.execute({ operationKey: pinned.operationId, arguments: { note: 'too late' }, signal: new AbortController().signal, log: () => undefined });
    late.close();
    expect(outcome).to.have.property('outcome', 'not_applied');
    expect(journal(service).filter((line) => line.operation_id === pinned.operationId), 'no effect, ever').to.deep.equal([]);

    await service.stop();
    const checked = checkInvariants({ root: service.dir, mustBeFinal: [pinned.requestId] });
    expect(checked.violations, JSON.stringify(checked.violations)).to.deep.equal([]);
  });
});
