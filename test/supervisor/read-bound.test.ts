// bounds.max_reads_in_flight (supervisor/api/read-bound.ts, README "Bounds",
// docs/SECURITY.md "Reads in flight"): reads that ask a child hold a place
// until answered; past the bound an agent's read is refused with
// service_busy (503) at once, the operator's never is; a flood of pipelined
// reads is answered 200 or 503 only, leaves the invokes their room on the
// kernel's channel, and is logged as a tally, not a line a read.
import { expect } from 'chai';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { untilHolds } from '../helpers/eventually.js';
import { parsePrometheusText, valueOf } from '../helpers/prometheus-text.js';
import { logEvents, startService, type TestService } from '../helpers/service.js';

const BOUND = 2;

async function kernelPid(service: TestService): Promise<number> {
  const status = await service.http('GET', '/v1/status');
  const children = status.body.children as Array<{ name: string; pid: number }>;
  return children.find((child) => child.name === 'kernel')!.pid;
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

    it('takes the bound\'s worth of reads while the kernel holds them, refuses one more at once with service_busy, never refuses the operator, and takes reads again once they are answered', async () => {
      const pid = await kernelPid(service);
      process.kill(pid, 'SIGSTOP');
      type Answer = Promise<{ status: number; body: Record<string, unknown> }>;
      // The reads held by the stopped kernel: the bound's worth of the agent's, then the operator's.
      const held: Answer[] = [];
      try {
        held.push(...Array.from({ length: BOUND }, (_, i) => service.http('GET', `/v1/operations/held-${i}`, undefined, 'agent')));
        // Each held read is waiting on the kernel before the next is sent past the bound.
        await new Promise((resolve) => setTimeout(resolve, 300));
        const started = performance.now();
        const past = await service.http('GET', '/v1/operations/one-past', undefined, 'agent');
        expect(performance.now() - started, 'refused at once, not after the kernel').to.be.below(2_000);
        expect(past.status).to.equal(503);
        expect(past.body.code).to.equal('service_busy');
        expect(String(past.body.message)).to.contain(`bounds.max_reads_in_flight ${BOUND}`);
        // A client pipelining reads past the bound gets one refusal, then the connection closes: the rest of its queue is dropped.
        const token = readFileSync(service.paths.agentToken, 'utf8').trim();
        const pipelined = await new Promise<string>((resolve) => {
          const socket = net.connect(service.port, '127.0.0.1');
          let text = '';
          socket.on('data', (chunk) => (text += chunk.toString('latin1')));
          socket.on('close', () => resolve(text));
          socket.write(`GET /v1/operations/p1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`.repeat(3));
        });
        expect(pipelined.match(/HTTP\/1\.1 \d{3}/g)).to.deep.equal(['HTTP/1.1 503']);
        expect(pipelined.toLowerCase()).to.contain('connection: close');
        // The list and the tools are reads that ask a child too.
        expect((await service.http('GET', '/v1/operations', undefined, 'agent')).body.code).to.equal('service_busy');
        // A read that asks no child (status) is not held to the bound.
        expect((await service.http('GET', '/v1/status', undefined, 'agent')).status).to.equal(200);
        // The operator's read is not refused: it waits for the kernel like the held ones.
        const operator = service.http('GET', '/v1/operations/by-the-operator', undefined, 'control');
        held.push(operator);
        const first = await Promise.race([operator.then((answer) => answer.status), new Promise((resolve) => setTimeout(() => resolve('waiting'), 500))]);
        expect(first).to.equal('waiting');
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      // Answered by the kernel once it runs: these operations do not exist.
      for (const answer of await Promise.all(held)) expect(answer.status, JSON.stringify(answer.body)).to.equal(404);
      expect((await service.http('GET', '/v1/operations/after', undefined, 'agent')).status).to.equal(404);
      const metrics = parsePrometheusText(await (await fetch(`http://127.0.0.1:${service.port}/metrics`)).text());
      // The one past, the list, and the pipelined reads Node had parsed from the socket before it closed (one to three).
      const refused = valueOf(metrics, 'custody_reads_refused_busy_total');
      expect(refused).to.be.within(3, 5);
      await untilHolds('every refusal tallied in reads_full', () => tallied(service) === refused, 15_000);
      expect(logEvents(service, 'reads_full')[0]).to.include({ bound: BOUND, level: 'warn' });
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
      // Eight clients, each pipelining reads as fast as the socket takes them and connecting again once closed.
      let connections = 0;
      const flood = () => {
        if (!flooding) return;
        connections++;
        const socket = net.connect(service.port, '127.0.0.1');
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
      for (let i = 0; i < 8; i++) flood();
      try {
        for (let i = 0; i < 10; i++) {
          const invoked = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: `under-flood-${i}`, arguments: { note: `n${i}` }, wait_ms: 30_000 }, 'agent');
          expect(invoked.status, JSON.stringify(invoked.body)).to.equal(200);
          expect(invoked.body.outcome).to.equal('completed');
        }
        await untilHolds('a read of the flood refused', () => (statuses.get('503') ?? 0) > 0, 20_000);
      } finally {
        flooding = false;
      }
      // Each refusal closed its connection: the clients had to connect again.
      expect(connections).to.be.above(8);
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
