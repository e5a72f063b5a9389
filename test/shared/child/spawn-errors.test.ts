// Why a child could not be started, as the supervisor (shared/child/spawn.ts)
// and an executor starting its adapter host (executor-proc/adapters/
// host-client.ts) name it, and whether the restart book counts it toward the
// child failing (supervisor/children/restart-book.ts NOT_YET). The live
// cases are in test/supervisor/process-limit.test.ts and connections.test.ts;
// these cover every errno on machines where a pids cgroup cannot be made.
import { expect } from 'chai';
import { spawnError } from '../../../shared/child/spawn.js';
import { hostStartError } from '../../../executor-proc/adapters/host-client.js';
import { NOT_YET } from '../../../supervisor/children/restart-book.js';

function errno(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`spawn x ${code}`), { code, errno: -1, syscall: 'spawn' });
}

describe('a child that cannot be started, named', () => {
  it('is processes_exhausted on EAGAIN and descriptors_exhausted on EMFILE/ENFILE, from the supervisor and for an adapter host, neither counted', () => {
    for (const [code, expected] of [
      ['EAGAIN', 'processes_exhausted'],
      ['EMFILE', 'descriptors_exhausted'],
      ['ENFILE', 'descriptors_exhausted'],
    ] as const) {
      const fromSupervisor = spawnError('default', '/usr/bin/ssh', errno(code));
      const fromExecutor = hostStartError(errno(code));
      expect([fromSupervisor.code, fromExecutor.code], code).to.deep.equal([expected, expected]);
      expect(NOT_YET.has(expected), `${expected} uncounted`).to.equal(true);
    }
    expect(spawnError('default', '/usr/bin/ssh', errno('EAGAIN')).message).to.contain('pids.max').and.to.contain('ulimit -u');
  });

  it('is config_invalid, counted, when the command is missing or not executable, naming where it came from', () => {
    const missing = spawnError('ghost', '/opt/launcher', errno('ENOENT'));
    expect(missing.code).to.equal('config_invalid');
    expect(missing.message).to.contain('no such file').and.to.contain('executors[].argv');
    const denied = spawnError('ghost', '/opt/launcher', errno('EACCES'));
    expect(denied.message).to.contain('permission denied');
    // The default argv runs the node that runs custody: gone, it is not a config mistake.
    const ownNode = spawnError('kernel', process.execPath, errno('ENOENT'));
    expect(ownNode.message).to.contain('the node that runs custody').and.to.contain('restart the service');
    expect(NOT_YET.has('config_invalid')).to.equal(false);
    expect(spawnError('default', '/usr/bin/ssh', errno('E2BIG')).code).to.equal('peer_exited');
    expect(hostStartError(errno('E2BIG')).code).to.equal('config_invalid');
  });
});
