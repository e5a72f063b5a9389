// bounds.max_reads_in_flight (supervisor/api/read-bound.ts, README "Bounds",
// docs/SECURITY.md "Reads in flight"): reads that ask a child hold a place
// until answered; past the bound an agent's read is refused with
// service_busy (503) at once, the operator's never is; a flood of pipelined
// reads is answered 200 or 503 only, leaves the invokes their room on the
// kernel's channel, and is logged as a tally, not a line a read.
import { expect } from 'chai';
import net from 'node:net';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { untilHolds } from '../helpers/eventually.js';
import { parsePrometheusText, valueOf } from '../helpers/prometheus-text.js';
import { logEvents, sqlite, startService, type TestService } from '../helpers/service.js';

const BOUND = 2;

async function kernelPid(service: TestService): Promise<number> {
  const status = await service.http('GET', '/v1/status');
  const children = status.body.children as Array<{ name: string; pid: number }>;
  return children.find((child) => child.name === 'kernel')!.pid;
}

/** Run `body` with the service's kernel stopped (SIGSTOP), so every read that asks it waits; continued whatever happens. */
async function whileKernelStopped<T>(service: TestService, body: () => Promise<T>): Promise<T> {
  const pid = await kernelPid(service);
  process.kill(pid, 'SIGSTOP');
  try {
    return await body();
  } finally {
    process.kill(pid, 'SIGCONT');
  }
}

/** Every other GET that asks a child: each must hold a place under the bound. */
const READS_OF_CHILDREN = ['/v1/operations', '/v1/operations/x/trace', '/v1/operations/x/artifacts', '/v1/tools', '/v1/keys'];

/** A GET with the agent token that gives up after 5 s: a read the bound should have refused fails the test instead of hanging it. */
async function agentGet(service: TestService, route: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const token = readFileSync(service.paths.agentToken, 'utf8').trim();
  const response = await fetch(`http://127.0.0.1:${service.port}${route}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5_000) });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** Refusals the reads_full lines have tallied so far. */
function tallied(service: TestService): number {
  return logEvents(service, 'reads_full').reduce((sum, line) => sum + Number(line.refused), 0);
}

describe('the bound on reads in flight (bounds.max_reads_in_flight)', function () {
  this.timeout(90_000);

  describe('at the bound and one past', () => {
    let service: TestService;
    before(async () => {
      // A stopped kernel holds every read that asks it; the heartbeat must not kill it meanwhile.
      service = await startService({ config: { bounds: { max_reads_in_flight: BOUND }, timing: { heartbeat_interval_ms: 30_000, heartbeat_timeout_ms: 60_000 } } });
    });
    after(async () => {
      await service?.stop();
      service?.cleanup();
    });

    it('takes the bound\'s worth of reads while the kernel holds them, refuses one more at once with service_busy on every route that asks a child, never refuses the operator, and takes reads again once they are answered', async () => {
      type Answer = Promise<{ status: number; body: Record<string, unknown> }>;
      // The reads held by the stopped kernel: the bound's worth of the agent's, then the operator's.
      const held: Answer[] = [];
      await whileKernelStopped(service, async () => {
        held.push(...Array.from({ length: BOUND }, (_, i) => service.http('GET', `/v1/operations/held-${i}`, undefined, 'agent')));
        // Each held read is waiting on the kernel before the next is sent past the bound.
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        const started = performance.now();
        const past = await agentGet(service, '/v1/operations/one-past');
        expect(performance.now() - started, 'refused at once, not after the kernel').to.be.below(2_000);
        expect(past.status).to.equal(503);
        expect(past.body.code).to.equal('service_busy');
        expect(String(past.body.message)).to.contain(`bounds.max_reads_in_flight ${BOUND}`);
        // A client pipelining past the bound: the refused read is the connection's last answer, and the invoke
        // queued behind it on the same connection is refused unrun (its answer goes with the connection).
        const token = readFileSync(service.paths.agentToken, 'utf8').trim();
        const invoke = JSON.stringify({ tool: 'review-notes/append', request_id: 'behind-busy', arguments: { note: 'never run' }, wait_ms: 0 });
        const pipelined = await new Promise<string>((resolve) => {
          const socket = net.connect(service.port, '127.0.0.1');
          let text = '';
          socket.on('data', (chunk) => (text += chunk.toString('latin1')));
          socket.on('error', () => undefined);
          socket.on('close', () => resolve(text));
          socket.write(
            `GET /v1/operations/p1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n` +
              `POST /v1/invoke HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(invoke)}\r\n\r\n${invoke}`,
          );
        });
        expect(pipelined.match(/HTTP\/1\.1 \d{3}/g)).to.deep.equal(['HTTP/1.1 503']);
        expect(pipelined.toLowerCase()).to.contain('connection: close');
        // Every other read that asks a child is held to the bound too.
        for (const route of READS_OF_CHILDREN) expect((await agentGet(service, route)).body.code, route).to.equal('service_busy');
        // A read that asks no child (status) is not held to the bound.
        expect((await agentGet(service, '/v1/status')).status).to.equal(200);
        // The operator's read is not refused: it waits for the kernel like the held ones.
        const operator = service.http('GET', '/v1/operations/by-the-operator', undefined, 'control');
        held.push(operator);
        const first = await Promise.race([operator.then((answer) => answer.status), new Promise((resolve) => setTimeout(() => resolve('waiting'), 500))]);
        expect(first).to.equal('waiting');
      });
      // Answered by the kernel once it runs: these operations do not exist.
      for (const answer of await Promise.all(held)) expect(answer.status, JSON.stringify(answer.body)).to.equal(404);
      expect((await service.http('GET', '/v1/operations/after', undefined, 'agent')).status).to.equal(404);
      const metrics = parsePrometheusText(await (await fetch(`http://127.0.0.1:${service.port}/metrics`)).text());
      // Nothing of the invoke queued behind the refused read: no row, no operation, no line in the journal.
      expect(await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT request_id FROM requests WHERE request_id = 'behind-busy'")).to.have.length(0);
      expect((await service.http('GET', '/v1/operations/behind-busy', undefined, 'agent')).status).to.equal(404);
      const journal = path.join(service.paths.resourcesDir, 'review-notes.jsonl');
      expect(existsSync(journal) ? readFileSync(journal, 'utf8') : '').to.not.contain('never run');
      const refused = 2 + READS_OF_CHILDREN.length;
      expect(valueOf(metrics, 'custody_reads_refused_busy_total')).to.equal(refused);
      await untilHolds('every refusal tallied in reads_full', () => tallied(service) === refused, 15_000);
      expect(logEvents(service, 'reads_full')[0]).to.include({ bound: BOUND, level: 'warn' });
    });
  });

  describe("a read refused by the kernel's channel at its own bound", () => {
    let service: TestService;
    before(async () => {
      // The kernel's channel (kernel_max_in_flight + 8 for control messages) fills before the read bound does; nothing else asks the stopped kernel.
      service = await startService({
        config: {
          bounds: { max_reads_in_flight: 64, kernel_max_in_flight: 2 },
          timing: { heartbeat_interval_ms: 600_000, heartbeat_timeout_ms: 600_000, recovery_sweep_ms: 600_000 },
        },
      });
    });
    after(async () => {
      await service?.stop();
      service?.cleanup();
    });

    it('is answered 503 service_busy saying nothing was read, never 409, and tallied in channel_full', async () => {
      // Twelve reads one after another while the kernel is stopped: the channel carries exactly its bound,
      // kernel_max_in_flight (2) and the 8 places it holds above it (supervisor/children/spawn-options.ts), and
      // refuses the rest. Told apart by their answers once the kernel is back, not by a timer: a refusal slowed
      // by a loaded machine is still a refusal.
      const reads: Array<Promise<{ status: number; body: Record<string, unknown> }>> = [];
      await whileKernelStopped(service, async () => {
        for (let i = 0; i < 12; i++) {
          const read = service.http('GET', `/v1/operations/fill-${i}`, undefined, 'agent');
          reads.push(read);
          await Promise.race([read, new Promise((resolve) => setTimeout(resolve, 300))]);
        }
      });
      const answers = await Promise.all(reads);
      const held = answers.filter((answer) => answer.status === 404);
      const refused = answers.filter((answer) => answer.status !== 404);
      expect(held, 'exactly the channel\'s bound of reads held, then answered').to.have.length(10);
      expect(refused).to.have.length(2);
      for (const answer of refused) {
        expect(answer.status).to.equal(503);
        expect(answer.body.code).to.equal('service_busy');
        expect(String(answer.body.message)).to.match(/requests already in flight to this kernel \(bounds\.kernel_max_in_flight for the kernel.*\); nothing was read: ask again in a moment$/);
      }
      await untilHolds('the refusal tallied in channel_full', () => logEvents(service, 'channel_full').length > 0, 15_000);
      expect(logEvents(service, 'api_refused').filter((line) => line.code === 'too_many_in_flight')).to.have.length(0);
    });
  });

  describe('a read the kernel does not answer (timing.child_read_timeout_ms)', () => {
    let service: TestService;
    before(async () => {
      service = await startService({ config: { bounds: { max_reads_in_flight: 1 }, timing: { child_read_timeout_ms: 1_000, heartbeat_interval_ms: 30_000, heartbeat_timeout_ms: 60_000 } } });
    });
    after(async () => {
      await service?.stop();
      service?.cleanup();
    });

    it('is given up after the timeout with 503 service_unavailable, and its place is free again', async () => {
      const started = performance.now();
      const given = await whileKernelStopped(service, () => agentGet(service, '/v1/operations/never-answered'));
      const waited = performance.now() - started;
      expect(given.status, JSON.stringify(given.body)).to.equal(503);
      expect(given.body.code).to.equal('service_unavailable');
      expect(String(given.body.message)).to.contain('had no answer within 1000 ms').and.to.contain('(timing.child_read_timeout_ms): the read was given up');
      expect(waited).to.be.within(900, 4_000);
      // The one place (max_reads_in_flight 1) was given back: the next read is taken and answered.
      expect((await agentGet(service, '/v1/operations/after-the-timeout')).status).to.equal(404);
    });
  });

  describe('a flood of pipelined reads', () => {
    let service: TestService;
    before(async () => {
      service = await startService({ config: { bounds: { max_reads_in_flight: 8 } } });
      expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 1000, ttl_ms: 3_600_000 })).status).to.equal(201);
    });
    after(async () => {
      await service?.stop();
      service?.cleanup();
    });

    it('is answered 200 or 503 service_busy only, while invokes complete, and is logged as a tally', async () => {
      const token = readFileSync(service.paths.agentToken, 'utf8').trim();
      const read = `GET /v1/operations?limit=50 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`;
      const statuses = new Map<string, number>();
      let flooding = true;
      // Four clients, each pipelining reads as fast as the socket takes them and connecting again if closed.
      const sockets: net.Socket[] = [];
      const flood = () => {
        if (!flooding) return;
        const socket = net.connect(service.port, '127.0.0.1');
        sockets.push(socket);
        socket.on('error', () => undefined);
        socket.on('data', (chunk) => {
          for (const match of chunk.toString('latin1').matchAll(/HTTP\/1\.1 (\d{3})/g)) statuses.set(match[1]!, (statuses.get(match[1]!) ?? 0) + 1);
        });
        socket.on('close', () => setImmediate(flood));
        const pump = () => {
          while (flooding && !socket.destroyed && socket.write(read.repeat(100)));
        };
        socket.on('connect', pump);
        socket.on('drain', pump);
      };
      for (let i = 0; i < 4; i++) flood();
      try {
        for (let i = 0; i < 5; i++) {
          const invoked = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: `under-flood-${i}`, arguments: { note: `n${i}` }, wait_ms: 30_000 }, 'agent');
          expect(invoked.status, JSON.stringify(invoked.body)).to.equal(200);
          expect(invoked.body.outcome).to.equal('completed');
        }
        await untilHolds('a read of the flood refused', () => (statuses.get('503') ?? 0) > 0, 20_000);
      } finally {
        flooding = false;
        for (const socket of sockets) socket.destroy();
      }
      expect([...statuses.keys()].sort(), JSON.stringify(Object.fromEntries(statuses))).to.deep.equal(['200', '503']);
      // Refusals are a tally, not a line each; the kernel's channel never refused anything.
      const refused = statuses.get('503')!;
      await untilHolds('the refusals tallied in reads_full', () => tallied(service) >= refused, 15_000);
      expect(logEvents(service, 'reads_full').length).to.be.below(10);
      expect(logEvents(service, 'api_refused')).to.have.length(0);
      expect(logEvents(service, 'channel_full')).to.have.length(0);
    });
  });
});
