// An executor on "another machine": its argv is a launcher that stays in
// between (test/fixtures/remote-relay.ts, which behaves as ssh does on a
// partition), so killing the launcher leaves the executor running with its
// stdin open, its lock held and an effect in flight. The replacement the
// supervisor starts must wait for the lock (the supervisor retries within its
// restart intensity, each refusal an incident naming the holder), nothing may
// run twice, and reconciliation must stay true while the old effect is still
// about to happen: the built-in review-notes tool fences (executor-proc/ADAPTERS.md).
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { checkInvariants } from '../../scripts/chaos/invariants.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { isGone } from '../../supervisor/children/proc-stat.js';
import { distPath } from '../helpers/children.js';
import { eventually } from '../helpers/eventually.js';
import { type TestService, startService } from '../helpers/service.js';

const RELAY = distPath('test', 'fixtures', 'remote-relay.js');
const EXECUTOR = distPath('executor-proc', 'main.js');

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

function alive(pid: number): boolean {
  return !isGone(pid, null);
}

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

  it('killing the launcher runs nothing twice: the replacement waits for the live executor\'s lock, and after it is gone reconciliation fences the effect still pending', async () => {
    const requestId = 'remote-1';
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
    const incidents = async () => ((await service.http('GET', '/v1/incidents?limit=500')).body.incidents as Incident[]) ?? [];
    let refusals: Incident[] = [];
    const deadline = Date.now() + 30_000;
    while (refusals.length < 1 && Date.now() < deadline) {
      refusals = (await incidents()).filter((i) => i.code === 'store_locked' && i.message.includes(`pid ${executor}`));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(refusals.length, 'the replacement is refused, naming the live holder').to.be.at.least(1);
    const status = (await service.http('GET', '/v1/status')).body.children as Array<{ role: string; state: string }>;
    expect(status.find((c) => c.role === 'executor')!.state, 'no replacement serves beside the live executor').to.not.equal('running');
    expect(alive(executor), 'the executor outlives its launcher').to.equal(true);
    expect(journal(service).filter((line) => line.operation_id === operationId), 'no effect while the old executor holds on').to.deep.equal([]);
    expect(claim(), 'its claim stands, without a report').to.deep.equal({ kind: 'claim', status: null });

    // The old executor dies at last (its host noticed); its adapter host, with the effect pending, lives on.
    process.kill(executor, 'SIGKILL');
    await eventually(() => !alive(executor), 10_000, 'the old executor gone');
    expect(alive(adapterHost), 'the old effect is still pending').to.equal(true);

    // The replacement takes the lock and reconciles: the tool fences, so "not applied" is true.
    const settled = await answer;
    expect(settled.body).to.include({ final: true, outcome: 'released' });
    expect(journal(service).filter((line) => line.fence === operationId), 'reconciliation fenced the operation').to.have.length(1);

    // The old effect finishes now: the fence refuses it.
    writeFileSync(path.join(faultDir, 'executor.pause_before_effect.release'), '');
    await eventually(() => !alive(adapterHost), 20_000, 'the old adapter host done');
    expect(journal(service).filter((line) => line.operation_id === operationId), 'the late effect was refused by the fence').to.deep.equal([]);
    expect(claim()).to.deep.equal({ kind: 'claim', status: 'reconciled_not_applied' });
    ledger.close();

    await service.stop();
    const checked = checkInvariants({ root: service.dir, mustBeFinal: [requestId] });
    expect(checked.violations, JSON.stringify(checked.violations)).to.deep.equal([]);
  });
});
