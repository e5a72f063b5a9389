// A store locked from the sqlite3 shell (README "Looking inside the stores"):
// an operator's `BEGIN IMMEDIATE` left open holds the lock, each process
// waits its 5 s busy timeout, then answers store_busy naming the store, a
// 503 rather than a 500 "internal error" (supervisor.db) or a 202 promising
// a drive that had ended (kernel.db). Nothing is lost and nothing runs twice:
// asked again with the same name once the shell commits, the request
// completes with one journal line.
import { expect } from 'chai';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { sqlite, startService, type TestService } from '../helpers/service.js';

/** A sqlite3 shell holding the write lock of `file` until `release` commits and ends it. */
async function lockStore(file: string): Promise<{ release(): Promise<void> }> {
  const shell: ChildProcessWithoutNullStreams = spawn('sqlite3', [file]);
  let output = '';
  shell.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const ended = new Promise<void>((resolve) => shell.once('close', () => resolve()));
  shell.stdin.write("BEGIN IMMEDIATE;\nSELECT 'locked';\n");
  const deadline = Date.now() + 10_000;
  while (!output.includes('locked')) {
    if (Date.now() > deadline) throw new Error('the sqlite3 shell did not take the lock');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    async release() {
      shell.stdin.end('COMMIT;\n');
      await ended;
    },
  };
}

describe('a store locked from the sqlite3 shell', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    // The default heartbeat timeout (10 s): a kernel waiting out its 5 s busy timeout still answers its pings.
    service = await startService({ config: { timing: { heartbeat_timeout_ms: 10_000 } } });
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const invoke = (requestId: string, note: string) => service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: requestId, arguments: { note } }, 'agent');
  const journalLines = (note: string) =>
    readFileSync(path.join(service.paths.resourcesDir, 'review-notes.jsonl'), 'utf8')
      .split('\n')
      .filter((line) => line !== '' && (JSON.parse(line) as { note: string }).note === note).length;

  it('answers 503 store_busy naming supervisor.db, records nothing, and completes once asked again after the commit', async () => {
    const supervisorDb = path.join(service.paths.supervisorDir, 'supervisor.db');
    const lock = await lockStore(supervisorDb);
    let busy;
    try {
      busy = await invoke('busy-supervisor', 'supervisor locked');
    } finally {
      await lock.release();
    }
    expect(busy.status, JSON.stringify(busy.body)).to.equal(503);
    expect(busy.body.code).to.equal('store_busy');
    expect(String(busy.body.message)).to.contain('supervisor store supervisor.db').and.to.contain('sqlite3 shell').and.to.contain('same name');
    expect(String(busy.body.message), 'no path reaches the caller').to.not.contain(service.dir);
    expect(await sqlite(supervisorDb, "SELECT request_id FROM requests WHERE request_id = 'busy-supervisor'")).to.deep.equal([]);
    const again = await invoke('busy-supervisor', 'supervisor locked');
    expect(again.status, JSON.stringify(again.body)).to.equal(200);
    expect(again.body).to.include({ outcome: 'completed' });
    expect(journalLines('supervisor locked')).to.equal(1);
  });

  it('answers 503 store_busy naming kernel.db, the request logged as received; asked again after the commit, it runs once', async () => {
    const lock = await lockStore(path.join(service.paths.kernelDir, 'kernel.db'));
    let busy;
    try {
      busy = await invoke('busy-kernel', 'kernel locked');
    } finally {
      await lock.release();
    }
    expect(busy.status, JSON.stringify(busy.body)).to.equal(503);
    expect(busy.body.code).to.equal('store_busy');
    expect(String(busy.body.message)).to.contain('kernel store kernel.db').and.to.contain('sqlite3 shell');
    const logged = await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), "SELECT phase FROM requests WHERE request_id = 'busy-kernel'");
    expect(logged).to.deep.equal([{ phase: 'received' }]);
    expect(journalLines('kernel locked'), 'nothing ran while the kernel could not decide').to.equal(0);
    const again = await invoke('busy-kernel', 'kernel locked');
    expect(again.status, JSON.stringify(again.body)).to.equal(200);
    expect(again.body).to.include({ outcome: 'completed' });
    expect(journalLines('kernel locked')).to.equal(1);
    expect(service.stderr.some((line) => line.includes('"code":"store_busy"') && line.includes('kernel store kernel.db')), 'the service log names the store').to.equal(true);
  });
});
