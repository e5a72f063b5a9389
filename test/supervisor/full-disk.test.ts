// A full disk is a named condition (docs/POISON-AND-DISK.md): the whole
// state directory on a small tmpfs, invokes under load while a filler file
// takes the last byte. Every answer is a completion or `storage_full` (507),
// never `internal`; no completed answer lacks its journal line and signed
// report; SIGTERM stops cleanly; once the filler is removed the service
// starts again and every request reaches a final answer.
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { CustodyError } from '../../shared/errors.js';
import { createKeyPair } from '../../shared/crypto/key-files.js';
import { type TestService, custody, initTestState, sqlite, startService } from '../helpers/service.js';

/** Room for the state (four stores, keys, the journal) and little else. */
const TMPFS_SIZE = '12m';
const CONCURRENCY = 4;

/** Write zeros until the filesystem refuses (ENOSPC); the file is left in place. */
function fill(file: string): number {
  const fd = openSync(file, 'w', 0o600);
  const chunk = Buffer.alloc(64 * 1024);
  let written = 0;
  try {
    for (;;) {
      try {
        written += writeSync(fd, chunk, 0, chunk.length);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
        // The last partial chunk: fill block by block, then byte by byte.
        for (const size of [4096, 1]) {
          for (;;) {
            try {
              written += writeSync(fd, chunk, 0, size);
            } catch {
              break;
            }
          }
        }
        return written;
      }
    }
  } finally {
    closeSync(fd);
  }
}

interface Answer {
  readonly requestId: string;
  readonly status: number;
  readonly body: Record<string, unknown>;
}

interface Scenario {
  readonly what: string;
  /** Keep supervisor.db on another filesystem (a bind mount), so the kernel's and the executor's stores and the journal fill first. */
  readonly supervisorElsewhere: boolean;
}

const SCENARIOS: readonly Scenario[] = [
  { what: 'the disk of the whole state', supervisorElsewhere: false },
  { what: 'the disk of the kernel, the executor and the journal', supervisorElsewhere: true },
];

let mountPoint: string | null = null;
let bindMount: string | null = null;
let stateParent: string | null = null;
let elsewhere: string | null = null;
let service: TestService | null = null;

describe('a full disk', function () {
  this.timeout(90_000);
  before(function () {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-fulldisk-'));
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_SIZE},mode=0700`, 'tmpfs', dir], { stdio: 'pipe' });
      mountPoint = dir;
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      const why = String((error as { stderr?: Buffer }).stderr ?? (error as Error).message).trim();
      console.warn(`  skipped: this machine cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): ${why}`);
      this.skip();
    }
  });

  afterEach(() => {
    if (service && service.process.exitCode === null) service.process.kill('SIGKILL');
    service = null;
    if (bindMount) execFileSync('umount', ['-l', bindMount], { stdio: 'pipe' });
    bindMount = null;
    rmSync(path.join(mountPoint ?? '/nonexistent', 'filler'), { force: true });
    for (const dir of [stateParent, elsewhere]) if (dir) rmSync(dir, { recursive: true, force: true });
    stateParent = null;
    elsewhere = null;
  });

  after(() => {
    if (mountPoint) {
      try {
        execFileSync('umount', ['-l', mountPoint], { stdio: 'pipe' });
      } catch {
        // already unmounted
      }
      rmSync(mountPoint, { recursive: true, force: true });
    }
  });

  it('refuses to start on a full disk naming the file it could not write, and starts once space returns', async () => {
    stateParent = mkdtempSync(path.join(mountPoint!, 'start-'));
    const root = await initTestState({}, undefined, stateParent);
    expect(fill(path.join(mountPoint!, 'filler'))).to.be.greaterThan(0);
    const refused = await custody(['start', '--state', root], { timeoutMs: 30_000 });
    expect(refused.code, refused.stderr).to.equal(4);
    // It said "a store of this process" and "ask again with the same name", which means nothing to a start.
    expect(refused.stderr).to.match(new RegExp(`custody: the disk is full: (the lock ${root}/supervisor/store\\.lock cannot be taken|supervisor store ${root}/supervisor/supervisor\\.db)`));
    expect(refused.stderr).to.match(/free space on its filesystem, then start (it )?again \[storage_full\]/);
    expect(refused.stderr).to.not.contain('a store of this process');
    rmSync(path.join(mountPoint!, 'filler'));
    service = await startService({ dir: root });
    expect((await service.http('GET', '/v1/health', undefined, 'agent')).status).to.equal(200);
    expect(await service.stop()).to.equal(0);
  });

  it('refuses a key pair it cannot write with storage_full naming the key file, and leaves no partial key behind', () => {
    const dir = path.join(mountPoint!, 'keys');
    mkdirSync(dir, { mode: 0o700 });
    try {
      expect(fill(path.join(mountPoint!, 'filler'))).to.be.greaterThan(0);
      const refusal = (() => {
        try {
          createKeyPair(dir, 'kernel');
        } catch (error) {
          return error as CustodyError;
        }
        return expect.fail('the key pair was written on a full disk');
      })();
      expect(refusal.code).to.equal('storage_full');
      expect(refusal.message).to.include(path.join(dir, 'kernel.key')).and.include('free space');
      expect(readdirSync(dir)).to.deep.equal([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const scenario of SCENARIOS) {
    it(`answers storage_full (never internal) when ${scenario.what} fills, loses no completed answer, stops cleanly and serves again once space returns`, async () => {
      await runScenario(scenario);
    });
  }
});

async function runScenario(scenario: Scenario): Promise<void> {
  // A request stuck in reconciliation on the full disk holds a graceful stop for the whole grace: keep it short.
  const root = await initTestState({ timing: { shutdown_grace_ms: 2_000 } }, undefined, mountPoint!);
  stateParent = path.dirname(root);
  if (scenario.supervisorElsewhere) {
    elsewhere = mkdtempSync(path.join(tmpdir(), 'custody-supervisor-'));
    execFileSync('cp', ['-a', path.join(root, 'supervisor'), elsewhere]);
    execFileSync('mount', ['--bind', path.join(elsewhere, 'supervisor'), path.join(root, 'supervisor')]);
    bindMount = path.join(root, 'supervisor');
  }
  service = await startService({ dir: root });
  expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000, ttl_ms: 3_600_000 })).status).to.equal(201);
  const filler = path.join(mountPoint!, 'filler');
  const answers: Answer[] = [];
  let next = 0;
  const note = 'x'.repeat(2048);
  const worker = async (until: () => boolean) => {
    while (!until()) {
      const requestId = `load-${next++}`;
      const { status, body } = await service!.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: requestId, arguments: { note }, wait_ms: 2_000 }, 'agent');
      answers.push({ requestId, status, body });
    }
  };
  // Load, then the filler takes the last byte while invokes are in flight, then load on a full disk.
  let filledAt = -1;
  const fullAnswers = () => (filledAt < 0 ? 0 : answers.length - filledAt);
  const load = Promise.all(Array.from({ length: CONCURRENCY }, () => worker(() => fullAnswers() >= 12)));
  while (answers.length < 8) await new Promise((resolve) => setTimeout(resolve, 20));
  expect(fill(filler)).to.be.greaterThan(0);
  filledAt = answers.length;
  await load;

  // While full: the CLI says the same, with the "not complete" exit code.
  const cli = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=on a full disk', '--request-id', 'cli-full', '--wait', '5s']);
  answers.push({ requestId: 'cli-full', status: cli.code === 0 ? 200 : 507, body: cli.code === 0 ? { outcome: 'completed' } : { code: 'storage_full' } });
  expect(cli.code, cli.stderr).to.be.oneOf([0, 4]);
  if (cli.code === 4) expect(cli.stderr).to.include('storage_full');

  const summary = JSON.stringify(answers.map((a) => `${a.requestId} ${a.status} ${String(a.body.code ?? a.body.outcome ?? a.body.phase)}`));
  expect(answers.filter((a) => a.status === 507).length, summary).to.be.greaterThan(0);
  for (const answer of answers) {
    expect(answer.status, summary).to.be.oneOf([200, 202, 507]);
    if (answer.status === 200) expect(answer.body.outcome, summary).to.equal('completed');
    if (answer.status === 507 && answer.requestId !== 'cli-full') {
      expect(answer.body.code).to.equal('storage_full');
      // It names the store and says what to free.
      expect(String(answer.body.message)).to.match(/store .*\.db .*MiB free\) needs at least [\d.]+ MiB more/);
    }
  }

  // A graceful stop on the full disk stops cleanly.
  expect(await service.stop(), service.stderr.slice(-5).join('\n')).to.equal(0);
  expect(service.stderr.join('\n')).to.not.match(/uncaught|SqliteError/i);

  rmSync(filler);
  service = await startService({ dir: root });
  // Every request reaches a final answer once space returns: asked again with the same name.
  for (const answer of answers.filter((a) => a.status !== 200)) {
    const again = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: answer.requestId, arguments: { note: answer.requestId === 'cli-full' ? 'on a full disk' : note }, wait_ms: 30_000 }, 'agent');
    expect(again.status, JSON.stringify(again.body)).to.equal(200);
    expect(again.body.final).to.equal(true);
  }
  const after = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: 'after-space', arguments: { note: 'space is back' } }, 'agent');
  expect(after.body.outcome).to.equal('completed');

  // No completed answer lacks its journal line and signed report; nothing was applied twice.
  // Effects are the lines that parse as notes, as the journal itself reads them
  // (executor-proc/adapters/journal.ts): a write cut short by the full disk
  // leaves a torn fragment that names the operation but is no note, and the
  // fence that reconciliation then writes names it too.
  const notes = new Map<string, number>();
  for (const line of readFileSync(path.join(root, 'resources', 'review-notes.jsonl'), 'utf8').split('\n')) {
    let entry: unknown;
    try {
      entry = JSON.parse(line);
    } catch {
      continue;
    }
    const id = (entry as { operation_id?: unknown; note?: unknown } | null)?.operation_id;
    if (typeof id === 'string' && typeof (entry as { note?: unknown }).note === 'string') notes.set(id, (notes.get(id) ?? 0) + 1);
  }
  const effectsOf = (operationId: unknown) => notes.get(String(operationId)) ?? 0;
  const settled = await sqlite(path.join(root, 'supervisor', 'supervisor.db'), "SELECT request_id, operation_id, outcome FROM requests WHERE phase = 'settled'");
  const reports = await sqlite(path.join(root, 'executors', 'default', 'ledger.db'), 'SELECT operation_id, report_status AS status FROM claims_view');
  const reportOf = new Map(reports.map((r) => [String(r.operation_id), r]));
  for (const answer of answers.filter((a) => a.status === 200)) {
    const row = settled.find((r) => r.request_id === answer.requestId);
    expect(row?.outcome, answer.requestId).to.equal('completed');
    expect(reportOf.get(String(row!.operation_id))?.status, answer.requestId).to.be.oneOf(['completed', 'reconciled_applied']);
    expect(effectsOf(row!.operation_id), answer.requestId).to.equal(1);
  }
  for (const row of settled) expect(effectsOf(row.operation_id), String(row.request_id)).to.be.at.most(1);
  expect(settled.length).to.be.at.least(answers.length + 1);
  expect(await service.stop()).to.equal(0);
}
