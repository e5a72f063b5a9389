// Executor pools on a real service: three executors of one tool, one failed
// past its restart intensity; a stream of invokes all complete on the other
// two, spread between them, none on the failed one. With every candidate
// down a new invoke is refused (executor_unavailable) and nothing is logged.
import { expect } from 'chai';
import { type TestService, sqlite, startService } from '../helpers/service.js';
import { until } from '../helpers/eventually.js';
import { alive } from '../helpers/procs.js';

interface ChildRow {
  name: string;
  role: string;
  state: string;
  pid: number | null;
  operations: { in_flight: number; completed: number } | null;
}

async function children(service: TestService): Promise<ChildRow[]> {
  const { body } = await service.http('GET', '/v1/status');
  return body.children as ChildRow[];
}


/** kill -9 an executor and wait until the service marks it failed (max_restarts 0: the first crash fails it). */
async function failExecutor(service: TestService, name: string): Promise<void> {
  const row = await until(`${name} running`, async () => (await children(service)).find((c) => c.name === name && c.state === 'running' && c.pid !== null));
  process.kill(row.pid!, 'SIGKILL');
  await until(`${name} failed`, async () => ((await children(service)).find((c) => c.name === name)?.state === 'failed' ? true : undefined));
}

const NAMES = ['pool-a', 'pool-b', 'pool-c'];

describe('executor pools: routing around a failed executor', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    service = await startService({
      config: {
        executors: NAMES.map((name) => ({ name })),
        restart: { max_restarts: 0, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 100, failed_cooldown_s: 3600 },
        timing: { executor_wait_ms: 300 },
      },
    });
  });
  after(async () => {
    await service.stop();
    service.cleanup();
  });

  it('completes a stream of invokes on the two healthy executors, each taking a share, none on the failed one', async () => {
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
    await failExecutor(service, 'pool-b');
    const pins = await sqlite(`${service.paths.supervisorDir}/supervisor.db`, `SELECT name, identity_id FROM pins WHERE role = 'executor'`);
    const nameOf = new Map(pins.map((pin) => [String(pin.identity_id), String(pin.name)]));

    // 16 invokes, 4 at a time.
    const spread: Record<string, number> = {};
    for (let batch = 0; batch < 4; batch++) {
      const answers = await Promise.all(
        [0, 1, 2, 3].map((i) => service.http('POST', '/v1/invoke', { request_id: `pool-${batch}-${i}`, tool: 'review-notes/append', arguments: { note: `n ${batch} ${i}` } }, 'agent')),
      );
      for (const answer of answers) {
        expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
        expect(answer.body.phase, `${String(answer.body.reason)}`).to.equal("settled");
        expect(answer.body).to.include({ phase: 'settled', outcome: 'completed' });
        const name = nameOf.get(String(answer.body.executor))!;
        spread[name] = (spread[name] ?? 0) + 1;
      }
    }
    process.stderr.write(`      spread of 16 invokes with pool-b failed: ${JSON.stringify(spread)}\n`);
    expect(spread['pool-b'] ?? 0, 'nothing routed to the failed executor').to.equal(0);
    // Four at a time, the fewest in flight decides, and how many each has in flight depends on how fast each finishes.
    expect(spread['pool-a'], 'pool-a took a share').to.be.at.least(1);
    expect(spread['pool-c'], 'pool-c took a share').to.be.at.least(1);

    // One at a time nothing is in flight at a choice: the one routed to least so far takes it, pool-a (the first name) of equals.
    for (let i = 0; i < 6; i++) {
      const expected = (spread['pool-c'] ?? 0) < (spread['pool-a'] ?? 0) ? 'pool-c' : 'pool-a';
      const answer = await service.http('POST', '/v1/invoke', { request_id: `pool-one-${i}`, tool: 'review-notes/append', arguments: { note: `one ${i}` } }, 'agent');
      expect(answer.body).to.include({ phase: 'settled', outcome: 'completed' });
      const name = nameOf.get(String(answer.body.executor))!;
      expect(name, `one-at-a-time call ${i} after ${JSON.stringify(spread)}`).to.equal(expected);
      spread[name] = (spread[name] ?? 0) + 1;
    }

    // The kernel addressed each authorization to the executor the supervisor chose.
    const kernelSide = await sqlite(`${service.paths.kernelDir}/kernel.db`, `SELECT executor_id, count(*) AS n FROM operations WHERE request_id LIKE 'pool-%' GROUP BY executor_id`);
    expect(Object.fromEntries(kernelSide.map((row) => [nameOf.get(String(row.executor_id)), row.n]))).to.deep.equal(spread);

    // custody status shows what each completed, and nothing left in flight.
    const rows = await children(service);
    for (const name of NAMES) {
      expect(rows.find((c) => c.name === name)!.operations, name).to.deep.equal({ in_flight: 0, completed: spread[name] ?? 0 });
    }
    const status = await service.cli(['status']);
    expect(status.stdout).to.contain('IN FLIGHT').and.to.contain('COMPLETED');
  });

  it('refuses a new invoke with executor_unavailable once every executor of the tool is down, logging nothing', async () => {
    await failExecutor(service, 'pool-a');
    await failExecutor(service, 'pool-c');
    const started = Date.now();
    const refused = await service.http('POST', '/v1/invoke', { request_id: 'pool-none', tool: 'review-notes/append', arguments: { note: 'none' } }, 'agent');
    expect(refused.status).to.equal(503);
    expect(refused.body.code).to.equal('executor_unavailable');
    expect(String(refused.body.message)).to.contain('pool-a failed').and.to.contain('timing.executor_wait_ms');
    expect(Date.now() - started, 'it waited timing.executor_wait_ms first').to.be.at.least(300);
    expect(await sqlite(`${service.paths.supervisorDir}/supervisor.db`, `SELECT request_id FROM requests WHERE request_id = 'pool-none'`)).to.deep.equal([]);
  });
});

describe('executor pools: routing around a stopped executor', function () {
  this.timeout(120_000);
  let service: TestService;
  let stopped: number | null = null;

  before(async () => {
    // A heartbeat timeout well under the 10 s an arguments check waits: a request routed to the stopped member would
    // see it killed (a new pid) before it went on elsewhere.
    service = await startService({ config: { executors: ['pool-a', 'pool-b'].map((name) => ({ name })), timing: { heartbeat_timeout_ms: 6000 } } });
  });
  after(async () => {
    // Still stopped, or killed by now for its missed heartbeat.
    if (stopped !== null && alive(stopped)) process.kill(stopped, 'SIGCONT');
    await service.stop();
    service.cleanup();
  });

  it('passes over a member stopped from outside (SIGSTOP): the call goes to the other at once, while the stopped one still waits for its heartbeat', async () => {
    const rows = await until('both running', async () => {
      const found = await children(service);
      return found.filter((c) => c.role === 'executor' && c.state === 'running' && c.pid !== null).length === 2 ? found : undefined;
    });
    // pool-a, the first name, takes a call among equals: it is the one stopped.
    const first = rows.find((c) => c.name === 'pool-a')!.pid!;
    stopped = first;
    process.kill(first, 'SIGSTOP');
    const answer = await service.http('POST', '/v1/invoke', { request_id: 'around-a-stopped-one', tool: 'review-notes/append', arguments: { note: 'x' } }, 'agent');
    const after = (await children(service)).find((c) => c.name === 'pool-a')!;
    expect(answer.body).to.include({ phase: 'settled', outcome: 'completed' });
    const [pin] = await sqlite(`${service.paths.supervisorDir}/supervisor.db`, `SELECT name FROM pins WHERE identity_id = '${String(answer.body.executor)}'`);
    expect(pin?.name).to.equal('pool-b');
    expect(after.pid, 'answered before the stopped member was killed for its heartbeat').to.equal(first);
  });
});
