// The CLI checks each answer against the schema of its route
// (supervisor/api/answers.ts) before showing it: an answer of another shape
// is an error that names the route and the member, never a table of
// "undefined" or a crash.
import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type Server, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { custody } from '../../helpers/service.js';

describe('the CLI reading the service', () => {
  let server: Server;
  let state: string;
  let answer: unknown;

  before(async () => {
    server = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(answer));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    state = mkdtempSync(path.join(tmpdir(), 'custody-answers-'));
    mkdirSync(path.join(state, 'supervisor'), { mode: 0o700 });
    writeFileSync(path.join(state, 'supervisor', 'service.json'), JSON.stringify({ port: (server.address() as AddressInfo).port, pid: process.pid }));
    writeFileSync(path.join(state, 'supervisor', 'control.token'), `${'a'.repeat(64)}\n`, { mode: 0o600 });
  });

  after(() => {
    server.close();
    rmSync(state, { recursive: true, force: true });
  });

  it('shows an answer of the shape its route describes', async () => {
    answer = { grants: [], next_after: null };
    const result = await custody(['grant', 'list', '--state', state]);
    expect(result.stderr).to.equal('');
    expect(result.code).to.equal(0);
    expect(result.stdout).to.contain('No grants.');
  });

  it('refuses an answer of another shape with an error naming the route and the member', async () => {
    answer = { grants: [{ capability_id: 'g1' }], next_after: null };
    const result = await custody(['grant', 'list', '--state', state]);
    expect(result.code).to.equal(1);
    expect(result.stdout).to.equal('');
    expect(result.stderr).to.match(/GET \/v1\/grants\?\S* is not the shape it describes \(grants\.0\.\w+: /);
  });
});
