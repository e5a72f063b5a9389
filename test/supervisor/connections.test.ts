// The supervisor's file descriptors under a flood of connections (README
// "Bounds", docs/SECURITY.md "Connections"): the API holds at most
// bounds.max_connections open and closes the next unanswered, and a child
// that cannot get pipes because the supervisor is out of descriptors is
// started again once some are free, never marked failed for it.
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { EventEmitter } from 'node:events';
import type { Server } from 'node:http';
import { boundConnections, connectionBound, DESCRIPTOR_HEADROOM, openFileLimit } from '../../supervisor/api/connections.js';
import { collectingLogger } from '../helpers/children.js';
import { logEvents, startService, type TestService } from '../helpers/service.js';
import { untilHolds } from '../helpers/eventually.js';

/** A connection that has sent nothing yet: it holds one of the server's slots. */
async function idleConnection(port: number): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.on('error', () => undefined);
  return socket;
}

/** GET /v1/health on a socket of its own: the answer's bytes, or '' when the server closed it unanswered. */
async function healthOn(socket: net.Socket): Promise<string> {
  const chunks: Buffer[] = [];
  return new Promise((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      // One answer is enough; the connection stays open (keep-alive) and keeps its slot.
      if (Buffer.concat(chunks).includes('"status"')) resolve(Buffer.concat(chunks).toString('utf8'));
    });
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.write('GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n');
  });
}



describe('the supervisor\'s file descriptors', function () {
  this.timeout(120_000);

  describe('the bound and the descriptor limit', () => {
    it('reads the soft limit on open files from /proc/self/limits, and none where it is unlimited or absent', () => {
      const text = 'Limit                     Soft Limit           Hard Limit           Units\nMax processes             63704                63704                processes\nMax open files            4096                 524288               files\n';
      expect(openFileLimit(text)).to.equal(4096);
      expect(openFileLimit(text.replace('4096  ', 'unlimited'))).to.equal(null);
      expect(openFileLimit('Max processes 1 1 processes\n')).to.equal(null);
      const own = openFileLimit();
      expect(own, 'this process has a limit').to.be.a('number');
      expect(own).to.equal(Number(/Max open files\s+(\d+)/.exec(readFileSync('/proc/self/limits', 'utf8'))![1]));
    });

    it('logs the first drop of a run at once and the rest of the run once per interval, the last tally included', async () => {
      const { log, lines } = collectingLogger();
      const server = new EventEmitter() as unknown as Server;
      let counted = 0;
      boundConnections(server, 8, log, () => counted++, 200);
      expect(server.maxConnections).to.equal(8);
      const full = () => lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === 'api_connections_full');
      for (let i = 0; i < 3; i++) server.emit('drop');
      expect(full().map((line) => line.dropped), 'the first at once').to.deep.equal([1]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(full().map((line) => line.dropped), 'the rest of the run, once its interval passed').to.deep.equal([1, 2]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      server.emit('drop');
      server.emit('drop');
      server.emit('close');
      expect(full().map((line) => line.dropped), 'a new run at once; its tail when the server closes').to.deep.equal([1, 2, 1, 1]);
      expect(counted, 'every drop counted for the metric').to.equal(5);
    });

    it(`keeps the configured bound up to the limit less ${DESCRIPTOR_HEADROOM} descriptors, and lowers it one past`, () => {
      expect(connectionBound(1024, 1024 + DESCRIPTOR_HEADROOM)).to.deep.equal({ bound: 1024, lowered: false });
      expect(connectionBound(1025, 1024 + DESCRIPTOR_HEADROOM)).to.deep.equal({ bound: 1024, lowered: true });
      expect(connectionBound(1024, null)).to.deep.equal({ bound: 1024, lowered: false });
      // A small limit keeps half for the stores and children.
      expect(connectionBound(1024, 300)).to.deep.equal({ bound: 150, lowered: true });
    });
  });

  describe('bounds.max_connections on a live service', () => {
    const BOUND = 8;
    let service: TestService;
    const held: net.Socket[] = [];

    before(async () => {
      // The default header timeout (10 s): the idle connections hold their places for the whole test.
      service = await startService({ config: { bounds: { max_connections: BOUND } } });
    });

    after(async () => {
      for (const socket of held) socket.destroy();
      await service.stop();
      service.cleanup();
    });

    it(`serves the ${BOUND}th connection, closes the next one unanswered and logs it, and serves again once one closes`, async () => {
      for (let i = 0; i < BOUND - 1; i++) held.push(await idleConnection(service.port));
      const last = await idleConnection(service.port);
      held.push(last);
      const atBound = await healthOn(last);
      expect(atBound, 'the connection at the bound is answered').to.match(/^HTTP\/1\.1 200 /);

      const past = await idleConnection(service.port);
      expect(await healthOn(past), 'the connection past the bound is closed unanswered').to.equal('');
      await untilHolds('the api_connections_full line', () => logEvents(service, 'api_connections_full').length > 0);
      expect(logEvents(service, 'api_connections_full')[0]).to.include({ level: 'warn', bound: BOUND, dropped: 1 });
      // The CLI says what a reset means rather than asking whether custody runs.
      const cli = await service.cli(['status']);
      expect(cli.code, cli.stderr).to.equal(5);
      expect(cli.stderr).to.contain('connection bound (bounds.max_connections').and.not.to.contain('is custody running');

      held.shift()!.destroy();
      // The slot is free once the server has seen the close; until then a new connection is still past the bound.
      let answer = '';
      await untilHolds('a connection answered again', async () => {
        const socket = await idleConnection(service.port);
        held.push(socket);
        answer = await healthOn(socket);
        return answer !== '';
      });
      expect(answer).to.match(/^HTTP\/1\.1 200 /);
      for (const socket of held.splice(0)) socket.destroy();
      await untilHolds('the metrics', async () => {
        const metrics = await fetch(`http://127.0.0.1:${service.port}/metrics`).then((r) => r.text(), () => '');
        const dropped = /^custody_api_connections_dropped_total (\d+)$/m.exec(metrics);
        return dropped !== null && Number(dropped[1]) >= 1;
      });
      const status = await service.http('GET', '/v1/status', undefined, 'agent');
      expect((status.body.children as Array<{ restarts: number }>).every((c) => c.restarts === 0)).to.equal(true);
    });

  });

  describe('timing.api_headers_timeout_ms on a live service', () => {
    const HEADERS_MS = 2_000;
    let service: TestService;

    before(async () => {
      service = await startService({ config: { timing: { api_headers_timeout_ms: HEADERS_MS } } });
    });

    after(async () => {
      await service.stop();
      service.cleanup();
    });

    it(`answers 408 to a connection that sends no request and frees its slot after it (${HEADERS_MS} ms), not at Node's 30 s check`, async () => {
      const silent = await idleConnection(service.port);
      const silentAt = Date.now();
      const bytes: Buffer[] = [];
      silent.on('data', (chunk: Buffer) => bytes.push(chunk));
      await new Promise((resolve) => silent.once('close', resolve));
      const held = Date.now() - silentAt;
      expect(Buffer.concat(bytes).toString('utf8')).to.match(/^HTTP\/1\.1 408 /).and.to.contain('timing.api_headers_timeout_ms');
      // Checked every second; at Node's default of every 30 s it would be closed up to 30 s later.
      expect(held, `closed after ${held} ms`).to.be.within(HEADERS_MS - 100, HEADERS_MS + 3_000);
    });
  });

  describe('a child started while the supervisor has no descriptors left', () => {
    let service: TestService;
    let supervisorPid: number;

    before(async () => {
      service = await startService({ config: { restart: { max_restarts: 1, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 200 } } });
      supervisorPid = service.process.pid!;
    });

    after(async () => {
      try {
        execFileSync('prlimit', ['--pid', String(supervisorPid), `--nofile=${openFileLimit() ?? 1024}:`]);
      } catch {
        // gone already
      }
      await service.stop();
      service.cleanup();
    });

    it('is tried again, uncounted, past restart.max_restarts, with a refusal that says why, and runs once descriptors are free', async () => {
      const status = async () => (await service.http('GET', '/v1/status', undefined, 'agent')).body.children as Array<{ name: string; role: string; pid: number | null; state: string; restarts: number }>;
      const executor = (await status()).find((c) => c.role === 'executor')!;
      // The soft limit just above what the supervisor holds now: the executor's six pipe ends cannot be made.
      const open = readdirSync(`/proc/${supervisorPid}/fd`).length;
      execFileSync('prlimit', ['--pid', String(supervisorPid), `--nofile=${open + 2}:`]);
      process.kill(executor.pid!, 'SIGKILL');
      // With max_restarts 1, counted start failures would have failed the child after two.
      await untilHolds('four refused starts', () => logEvents(service, 'restart_failed').filter((l) => l.code === 'descriptors_exhausted').length >= 4);
      const refusal = logEvents(service, 'restart_failed').find((l) => l.code === 'descriptors_exhausted')!;
      expect(String(refusal.message)).to.contain('EMFILE').and.to.contain('ulimit -n');
      expect(logEvents(service, 'child_failed'), 'never failed for it').to.deep.equal([]);
      execFileSync('prlimit', ['--pid', String(supervisorPid), `--nofile=${openFileLimit() ?? 1024}:`]);
      await untilHolds('the executor running again', async () => (await status()).find((c) => c.role === 'executor')!.state === 'running');
      const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'after the descriptors came back' } }, 'agent');
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect(answer.body).to.include({ outcome: 'completed' });
    });
  });
});
