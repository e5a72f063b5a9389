// supervisor/service.json left behind by a supervisor killed with -9 names a
// port any local process may have taken since: the CLI, custody/client and
// custody mcp must send that process nothing, least of all a token
// (supervisor/service-file.ts).
import { expect } from 'chai';
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { CustodyError } from '../../shared/errors.js';
import { isGone } from '../../shared/child/proc-stat.js';
import { CustodyClient } from '../../supervisor/client/index.js';
import { until } from '../helpers/eventually.js';
import { custody, startService, type TestService } from '../helpers/service.js';

describe('service.json of a supervisor that is gone', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService();
  });

  after(() => service?.cleanup());

  it('sends nothing to a process that took its port since: the CLI and custody/client say the service is not running', async () => {
    const written = JSON.parse(readFileSync(service.paths.serviceJson, 'utf8')) as { pid: number; port: number; pid_start_ticks: number | null; pid_ns: string | null };
    expect(written.pid).to.equal(service.process.pid);
    expect(written.pid_start_ticks, 'the supervisor names its start time').to.be.a('number');
    expect(written.pid_ns, 'and its pid namespace: only a reader in it judges the pid').to.match(/^pid:\[\d+\]$/);
    // While it runs, the file is trusted.
    expect((await custody(['--state', service.dir, 'status', '--json'])).code).to.equal(0);

    service.process.kill('SIGKILL');
    await until('the supervisor gone', () => Promise.resolve(isGone(written.pid, null) ? true : undefined));
    // Another local process on the port the file names. (Its own port, named in the file as the supervisor left it: the
    // supervisor's port itself may be taken meanwhile, as a connection's source port of any other process.)
    const seen: IncomingHttpHeaders[] = [];
    const stranger = createServer((request, response) => {
      seen.push(request.headers);
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
    stranger.listen(0, '127.0.0.1');
    await once(stranger, 'listening');
    writeFileSync(service.paths.serviceJson, JSON.stringify({ ...written, port: (stranger.address() as AddressInfo).port }));
    try {
      const status = await custody(['--state', service.dir, 'status']);
      expect(status.code, status.stderr).to.equal(5);
      expect(status.stderr).to.include(`names pid ${written.pid}, which has ended`).and.include('custody start --state');
      const invoked = await custody(['--state', service.dir, 'invoke', 'review-notes/append', '--arg', 'note=to nobody']);
      expect(invoked.code, invoked.stderr).to.equal(5);
      let refusal: unknown = null;
      try {
        await CustodyClient.fromState(service.dir).health();
      } catch (error) {
        refusal = error;
      }
      expect(refusal).to.be.instanceOf(CustodyError).with.property('code', 'service_unavailable');
      expect(seen, 'the stranger on the port heard nothing').to.deep.equal([]);
    } finally {
      stranger.close();
    }
  });
});
