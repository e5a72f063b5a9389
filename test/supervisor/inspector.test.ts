// SIGUSR1 must not open Node's inspector in any custody process
// (shared/inspector-guard.ts, docs/SECURITY.md "Signals"): an inspector
// listens on 127.0.0.1 with no authentication, and whoever connects runs code
// in the process, the kernel's signing key included.
import { expect } from 'chai';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { alive, parentOf } from '../helpers/procs.js';
import { untilHolds } from '../helpers/eventually.js';
import { logEvents, startService, type TestService } from '../helpers/service.js';

/** The TCP ports `pid` listens on: its socket descriptors matched against the LISTEN rows of /proc/net/tcp{,6}. */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(match[1]!);
    } catch {
      // closed while listed
    }
  }
  const ports: number[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const row of readFileSync(table, 'utf8').trim().split('\n').slice(1)) {
      const fields = row.trim().split(/\s+/);
      const [, local, , state, , , , , , inode] = fields;
      if (state === '0A' && inode !== undefined && inodes.has(inode)) ports.push(Number.parseInt(local!.split(':')[1]!, 16));
    }
  }
  return ports.sort((a, b) => a - b);
}

function adapterHostOf(executorPid: number): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    try {
      if (parentOf(pid) === executorPid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('adapter-host')) return pid;
    } catch {
      // gone while listed
    }
  }
  return undefined;
}

describe('SIGUSR1 (Node would open its inspector)', function () {
  this.timeout(60_000);
  let service: TestService;
  afterEach(() => service?.cleanup());

  it('opens no inspector in the supervisor, the kernel, the executor or the adapter host: each logs it, keeps running and serves', async () => {
    service = await startService();
    const { body } = await service.http('GET', '/v1/status');
    const children = body.children as Array<{ role: string; pid: number; restarts: number }>;
    const kernel = children.find((c) => c.role === 'kernel')!.pid;
    const executor = children.find((c) => c.role === 'executor')!.pid;
    let host: number | undefined;
    await untilHolds('the adapter host started', () => (host = adapterHostOf(executor)) !== undefined);
    const supervisor = service.process.pid!;
    const pids = { supervisor, kernel, executor, host: host! };
    const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, listeningPorts(pid)]));
    expect(before.supervisor).to.deep.equal([service.port]);

    for (const pid of Object.values(pids)) process.kill(pid, 'SIGUSR1');

    // Each process says it took the signal: the host's line reaches the log through its executor.
    await untilHolds('every process logged signal_ignored', () => {
      const direct = new Set(logEvents(service, 'signal_ignored').filter((line) => line.signal === 'SIGUSR1').map((line) => line.pid));
      const relayed = logEvents(service, 'adapter_output').some((line) => line.host_pid === pids.host && String(line.line).includes('"event":"signal_ignored"'));
      return direct.has(supervisor) && direct.has(kernel) && direct.has(executor) && relayed;
    });
    for (const [name, pid] of Object.entries(pids)) {
      expect(alive(pid), `${name} alive`).to.equal(true);
      expect(listeningPorts(pid), `${name} listens on no new port`).to.deep.equal(before[name]);
    }
    expect(service.stderr.filter((line) => line.includes('Debugger listening'))).to.deep.equal([]);

    const invoked = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=after SIGUSR1', '--wait', '20s']);
    expect(invoked.code, invoked.stderr).to.equal(0);
    const after = (await service.http('GET', '/v1/status')).body.children as Array<{ role: string; pid: number; restarts: number }>;
    expect(after.map((c) => [c.role, c.pid, c.restarts])).to.deep.equal(children.map((c) => [c.role, c.pid, c.restarts]));
  });
});
