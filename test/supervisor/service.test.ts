// The service as a process: tokens checked before any handler, one
// supervisor per state, restart intensity, wrapper argv, graceful SIGTERM.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { chmodSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { isGone, processStartTicks } from '../../shared/child/proc-stat.js';
import { programPath } from '../../shared/entry-points.js';
import { CLI, custody, FIXTURE_EXECUTOR, initTestState, sqlite, startService, type TestService } from '../helpers/service.js';
import { statePaths } from '../../supervisor/paths.js';
import { until, untilHolds } from '../helpers/eventually.js';
import { MODE_BOUND, modeBoundAvailable } from '../helpers/mode-bound.js';
import { REPO_ROOT } from '../helpers/vectors.js';

describe('the control API', function () {
  this.timeout(60_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: { bounds: { max_body_bytes: 2048 } } });
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const requestCount = async () => Number((await sqlite(path.join(service.paths.supervisorDir, 'supervisor.db'), 'SELECT count(*) AS n FROM requests'))[0]!.n);

  it('answers health without a token', async () => {
    const health = await service.http('GET', '/v1/health', undefined, null);
    expect(health.status).to.equal(200);
    expect(health.body).to.include({ status: 'ok' });
  });

  it('refuses a missing or wrong token before any handler runs, with a fixed body', async () => {
    const before = await requestCount();
    const missing = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'x' } }, null);
    expect(missing.status).to.equal(401);
    expect(missing.body).to.deep.equal({ code: 'unauthorized', message: 'a valid bearer token is required (Authorization: Bearer <token>)' });
    const wrong = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'x' } }, { raw: 'f'.repeat(64) });
    expect(wrong.status).to.equal(401);
    const malformed = await service.http('GET', '/v1/status', undefined, { raw: '' });
    expect(malformed.status).to.equal(401);
    expect(await requestCount(), 'no request was logged').to.equal(before);
  });

  it('gives the agent token reads and invoke, and refuses it the control endpoints', async () => {
    expect((await service.http('GET', '/v1/status', undefined, 'agent')).status).to.equal(200);
    expect((await service.http('GET', '/v1/operations', undefined, 'agent')).status).to.equal(200);
    for (const [method, route] of [
      ['POST', '/v1/authorize'],
      ['POST', '/v1/operations/x/execute'],
      ['POST', '/v1/operations/x/report'],
      ['POST', '/v1/operations/x/reconcile'],
      ['GET', '/v1/grants'],
      ['POST', '/v1/grants'],
      ['DELETE', '/v1/grants/cap-1'],
    ] as const) {
      const answer = await service.http(method, route, method === 'GET' ? undefined : {}, 'agent');
      expect(answer.status, `${method} ${route}`).to.equal(403);
      expect(answer.body).to.have.property('code', 'forbidden');
    }
  });

  it('bounds the request body: at the bound it is read and served, one byte past it is refused with 413', async () => {
    const fill = (size: number) => {
      const skeleton = JSON.stringify({ tool: 'review-notes/append', arguments: { note: '' }, request_id: 'bound' });
      return { tool: 'review-notes/append', arguments: { note: 'x'.repeat(size - skeleton.length) }, request_id: 'bound' };
    };
    const atBound = await service.http('POST', '/v1/invoke', fill(2048), 'agent');
    // Read, parsed and carried to its end: the note at the bound is appended.
    expect(atBound.status, JSON.stringify(atBound.body)).to.equal(200);
    expect(atBound.body).to.include({ request_id: 'bound', final: true, outcome: 'completed' });
    const past = await service.http('POST', '/v1/invoke', fill(2049), 'agent');
    expect(past.status).to.equal(413);
    expect(past.body).to.have.property('code', 'body_too_large');
  });

  it('answers malformed bodies and unknown routes with fixed errors that leak nothing', async () => {
    const bad = await service.http('POST', '/v1/invoke', { tool: 'Not A Tool' }, 'agent');
    expect(bad.status).to.equal(400);
    expect(bad.body).to.have.property('code', 'bad_request');
    const unknown = await service.http('GET', '/v1/nothing', undefined, 'agent');
    expect(unknown.status).to.equal(404);
    const missing = await service.http('GET', '/v1/operations/never-was', undefined, 'agent');
    expect(missing.status).to.equal(404);
    expect(missing.body).to.have.property('code', 'operation_unknown');
  });

  it('refuses a second supervisor on the same state, naming the holder pid', async () => {
    const second = await custody(['start', '--state', service.dir, '--port', '0']);
    expect(second.code).to.equal(3);
    expect(second.stderr).to.contain(`locked by pid ${service.process.pid}`).and.to.contain('store_locked');
    expect((await service.http('GET', '/v1/health', undefined, null)).status, 'the first one serves on').to.equal(200);
  });
});

describe('restart intensity', function () {
  this.timeout(60_000);

  it('stops the service with a clear message and a non-zero exit when the kernel fails past it', async () => {
    const service = await startService({ config: { restart: { max_restarts: 2, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 100 } } });
    try {
      const exited = new Promise<number | null>((resolve) => service.process.once('close', resolve));
      for (let i = 0; i < 3; i++) {
        const { body } = await service.http('GET', '/v1/status');
        const kernel = (body.children as Array<{ role: string; pid: number | null; state: string }>).find((c) => c.role === 'kernel')!;
        if (kernel.pid === null) {
          i--;
          await new Promise((resolve) => setTimeout(resolve, 50));
          continue;
        }
        process.kill(kernel.pid, 'SIGKILL');
        while (!isGone(kernel.pid, null)) await new Promise((resolve) => setTimeout(resolve, 20));
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
      expect(await exited).to.equal(1);
      expect(service.stderr.join('\n')).to.contain('the kernel failed').and.to.contain('restart.max_restarts (2)');
      expect(existsSync(service.paths.serviceJson), 'service.json is removed').to.equal(false);
    } finally {
      service.cleanup();
    }
  });

  it('names the refusal itself, not only its code, when the kernel fails at start (a damaged kernel.db)', async () => {
    const root = await initTestState({ restart: { max_restarts: 1, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 100 } });
    const kernelDb = path.join(statePaths(root).kernelDir, 'kernel.db');
    // Bytes over the first page's b-tree header: the file opens, its first read fails.
    const fd = openSync(kernelDb, 'r+');
    writeSync(fd, Buffer.from('garbage garbage garbage'), 0, 23, 100);
    closeSync(fd);
    // Bounded: were the refusal not fatal, a serving service would be ended here rather than outlive the test.
    const started = await custody(['--state', root, 'start', '--port', '0'], { timeoutMs: 45_000 });
    try {
      expect(started.code, started.stderr).to.equal(5);
      const last = started.stderr.trim().split('\n').at(-1)!;
      expect(last).to.contain('kernel failed').and.to.contain('store_schema: kernel store').and.to.contain('is not a readable SQLite database');
    } finally {
      rmSync(path.dirname(root), { recursive: true, force: true });
    }
  });
});

describe('an executor behind a wrapper command', function () {
  this.timeout(60_000);

  it('speaks the wire through sh -c exec …, as an ssh -T argv would', async () => {
    const service = await startService({
      config: (root) => ({
        executors: [
          {
            name: 'wrapped',
            argv: ['sh', '-c', `exec "${process.execPath}" "${programPath('executor')}" --dir "${path.join(root, 'executors', 'wrapped')}" --resources "${path.join(root, 'resources')}"`],
          },
        ],
      }),
    });
    try {
      const answer = await service.cli(['invoke', 'review-notes/append', '--arg', 'note=through a wrapper']);
      expect(answer.code, answer.stderr).to.equal(0);
      expect(answer.stdout).to.contain('through a wrapper');
      const status = JSON.parse((await service.cli(['status', '--json'])).stdout) as { children: Array<{ name: string; state: string }> };
      expect(status.children.find((c) => c.name === 'wrapped')?.state).to.equal('running');
    } finally {
      await service.stop();
      service.cleanup();
    }
  });
});

describe('a graceful stop', function () {
  this.timeout(60_000);

  /** Wait until every request is in phase executing (its effect under way at the executor): the signal then meets them there. */
  async function executing(service: TestService, ids: readonly string[]): Promise<void> {
    const phase = async (id: string) => ((await service.http('GET', `/v1/operations/${id}`, undefined, 'agent')).body.request as { phase?: string } | undefined)?.phase;
    await untilHolds(`${ids.join(', ')} executing`, async () => (await Promise.all(ids.map(phase))).every((p) => p === 'executing'), 20_000);
  }

  it('lets operations in flight finish on SIGTERM, stops and reaps the children, and exits 0', async () => {
    const service = await startService({
      config: { executors: [FIXTURE_EXECUTOR] },
    });
    try {
      await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 });
      const status = await service.http('GET', '/v1/status');
      const pids = (status.body.children as Array<{ pid: number }>).map((c) => c.pid);
      const ids = Array.from({ length: 4 }, (_, i) => `slow-${i}`);
      // Long enough that all four are executing at once however loaded the machine.
      const inFlight = ids.map((id) => service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: id, arguments: { ms: 3000 } }, 'agent'));
      await executing(service, ids);
      const code = await service.stop();
      const answers = await Promise.all(inFlight);
      for (const answer of answers) expect(answer.body).to.include({ outcome: 'completed' });
      expect(code).to.equal(0);
      for (const pid of pids) expect(isGone(pid, null), `child ${pid} is gone`).to.equal(true);
      expect(existsSync(service.paths.serviceJson)).to.equal(false);
      expect(service.stderr.some((line) => line.includes('"event":"service_stopped"'))).to.equal(true);
    } finally {
      service.cleanup();
    }
  });

  it('stops as gracefully on SIGHUP (its terminal closed): the operation in flight completes and it exits 0', async () => {
    const service = await startService({
      config: { executors: [FIXTURE_EXECUTOR] },
    });
    try {
      await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 });
      const slow = service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'slow-hup', arguments: { ms: 1500 } }, 'agent');
      // Signalled once the operation is executing, not after a guessed sleep.
      await executing(service, ['slow-hup']);
      const exited = new Promise<number | null>((resolve) => service.process.once('exit', (code) => resolve(code)));
      service.process.kill('SIGHUP');
      expect((await slow).body).to.include({ outcome: 'completed' });
      // It exits of itself on SIGHUP: nothing else is sent.
      expect(await exited).to.equal(0);
      const signals = service.stderr.filter((line) => line.includes('"event":"signal"'));
      expect(signals, 'one signal, SIGHUP').to.have.length(1);
      expect(signals[0]).to.contain('"signal":"SIGHUP"');
      expect(service.stderr.some((line) => line.includes('"event":"service_stopped"'))).to.equal(true);
    } finally {
      service.cleanup();
    }
  });

  it('stops gracefully when a process manager signals npm start, not the service under it (its script execs node)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-npm-'));
    const state = path.join(dir, 'state');
    // npm forwards SIGTERM to the script's process: without exec that is a shell, which dies and leaves the service running orphaned.
    // The npm that runs this suite (npm test sets npm_execpath), else the one on PATH.
    const npmArgs = ['start', '--silent', '--', '--state', state, '--port', '0'];
    const npmCli = process.env.npm_execpath;
    const npm = npmCli ? spawn(process.execPath, [npmCli, ...npmArgs], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] }) : spawn('npm', npmArgs, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    npm.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const npmExited = once(npm, 'exit');
    let supervisorPid: number | null = null;
    try {
      await until('the service serving', () => Promise.resolve(existsSync(path.join(state, 'supervisor', 'service.json')) ? true : undefined));
      supervisorPid = (JSON.parse(readFileSync(path.join(state, 'supervisor', 'service.json'), 'utf8')) as { pid: number }).pid;
      // Field 4 of /proc/<pid>/stat, after the parenthesized command name: the parent.
      const stat = readFileSync(`/proc/${supervisorPid}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      expect(parent, 'npm runs the service itself, no shell in between').to.equal(npm.pid);
      npm.kill('SIGTERM');
      await npmExited;
      await until('the service gone', () => Promise.resolve(isGone(supervisorPid!, null) ? true : undefined), 20_000);
      expect(stderr).to.match(/"event":"signal","signal":"SIGTERM"/);
      expect(stderr).to.match(/"event":"service_stopped"[^\n]*"exit_code":0/);
    } finally {
      if (supervisorPid !== null && !isGone(supervisorPid, null)) process.kill(supervisorPid, 'SIGKILL');
      if (npm.exitCode === null) npm.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('takes no new request once stopping, while the one in flight completes', async () => {
    const service = await startService({
      config: { executors: [FIXTURE_EXECUTOR] },
    });
    try {
      await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 });
      const slow = service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'slow', arguments: { ms: 1500 } }, 'agent');
      await executing(service, ['slow']);
      service.process.kill('SIGTERM');
      await new Promise((resolve) => setTimeout(resolve, 100));
      const late = await service.http('POST', '/v1/invoke', { tool: 'fixture/sleep', request_id: 'late', arguments: { ms: 1 } }, 'agent').then(
        (answer) => answer.status,
        () => 'connection refused',
      );
      expect(late, 'refused, at the socket or with 503').to.be.oneOf([503, 'connection refused']);
      expect((await slow).body).to.include({ outcome: 'completed' });
      expect(await service.stop()).to.equal(0);
      const kernel = await sqlite(path.join(service.paths.kernelDir, 'kernel.db'), "SELECT request_id FROM operations WHERE request_id = 'late'");
      expect(kernel, 'the late request never reached the kernel').to.deep.equal([]);
    } finally {
      service.cleanup();
    }
  });
});

describe('custody start on an empty state', function () {
  this.timeout(60_000);

  /** `custody start` on a state not yet made, under a new temporary folder. */
  /** Still running half a second on, and answering `custody status`. */
  async function expectServing(child: ReturnType<typeof startFresh>['child'], state: string): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(child.exitCode, 'still running').to.equal(null);
    const status = await custody(['--state', state, 'status', '--json']);
    expect(status.code).to.equal(0);
  }

  /** SIGTERM a service that must still be running, remove its directory, and hold that it was running and stopped cleanly. */
  async function stopStillRunning(child: ReturnType<typeof startFresh>['child'], dir: string): Promise<void> {
    const running = child.exitCode === null && child.signalCode === null;
    const exited = running ? once(child, 'exit') : null;
    child.kill('SIGTERM');
    const code = exited === null ? child.exitCode : ((await exited) as [number | null])[0];
    rmSync(dir, { recursive: true, force: true });
    expect(running, 'the service was still running when it was asked to stop').to.equal(true);
    expect(code, 'a clean stop').to.equal(0);
  }

  /** `custody start` on `state` until its one stdout line says it serves, `body` meanwhile (given its stderr so far), then SIGTERM and its exit. */
  async function whileServing(state: string, body: (stderr: () => string) => Promise<void>, prefix: readonly string[] = []): Promise<void> {
    const [command, ...before] = [...prefix, process.execPath];
    const child = spawn(command, [...before, CLI, 'start', '--state', state, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const exited = once(child, 'exit').then(([code]) => `exited ${String(code)}`);
    const answered = new AbortController();
    try {
      // Its line, or its exit (which would otherwise leave this waiting for a line that never comes), or 30 s of
      // neither: each fails here with what it wrote, not at mocha's timeout with nothing.
      const first = await Promise.race([once(child.stdout, 'data').then(([chunk]) => String(chunk)), exited, sleep(30_000, 'no line within 30 s', { signal: answered.signal })]);
      expect(first, stderr).to.match(/^custody is running: http:\/\/127\.0\.0\.1:\d+/);
      await body(() => stderr);
    } finally {
      answered.abort();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    }
  }

  function startFresh(prefix: string, stdout: 'pipe' | number = 'pipe') {
    const dir = mkdtempSync(path.join(tmpdir(), prefix));
    const state = path.join(dir, 'state');
    const child = spawn(process.execPath, [CLI, 'start', '--state', state, '--port', '0'], { stdio: ['ignore', stdout, 'pipe'] });
    return { dir, state, child };
  }

  it('initializes it first, then serves', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-fresh-'));
    const state = path.join(dir, 'state');
    try {
      await whileServing(state, async () => {
        const status = await custody(['--state', state, 'status', '--json']);
        expect(status.code).to.equal(0);
        const again = await custody(['init', '--state', state]);
        expect(again.code, 'init refuses an existing state').to.equal(3);
        expect(again.stderr).to.contain('state_exists');
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('finishes making the state when SIGTERM comes while it is made, then stops cleanly; the next start serves on it', async () => {
    const { dir, state, child } = startFresh('custody-term-init-');
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    try {
      // The signal lands while the keys and stores are being made (Node's default ended the process half-way).
      await until('the state being made', () => Promise.resolve(/"event":"state_initializing"/.test(stderr) ? true : undefined));
      const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
      child.kill('SIGTERM');
      const [code, signal] = await exited;
      expect({ code, signal }, stderr).to.deep.equal({ code: 0, signal: null });
      expect(stderr).to.match(/"event":"signal","signal":"SIGTERM"/);
      // The signal came while the state was made, not after (else this proves nothing).
      expect(stderr.indexOf('"event":"signal"'), 'the signal landed before the executor was provisioned').to.be.below(stderr.indexOf('"event":"executor_provisioned"'));
      await whileServing(state, async () => {
        const invoked = await custody(['--state', state, 'invoke', 'review-notes/append', '--arg', 'note=after an interrupted init']);
        expect(invoked.code, invoked.stderr).to.equal(0);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('makes again a state whose init was killed half-way (kill -9 once the kernel was provisioned), and serves on it', async () => {
    const { dir, state, child } = startFresh('custody-kill-init-');
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    try {
      await until('the kernel provisioned', () => Promise.resolve(/"event":"kernel_provisioned"/.test(stderr) ? true : undefined));
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
      // Half made: the kernel's key and store, no executor pin; the marker says so, and names the children it started.
      expect(existsSync(path.join(state, '.init-incomplete')), 'the state says it was never made whole').to.equal(true);
      const { children } = JSON.parse(readFileSync(path.join(state, '.init-incomplete'), 'utf8')) as { children: Array<{ pid: number }> };
      expect(children.length, 'the kernel at least').to.be.at.least(1);
      await whileServing(state, async (againErr) => {
        expect(againErr()).to.match(/"event":"init_interrupted_cleared"/);
        for (const { pid } of children) expect(isGone(pid, null), `the killed init's child ${pid} is gone`).to.equal(true);
        expect(existsSync(path.join(state, '.init-incomplete'))).to.equal(false);
        const invoked = await custody(['--state', state, 'invoke', 'review-notes/append', '--arg', 'note=after a killed init']);
        expect(invoked.code, invoked.stderr).to.equal(0);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reads what init fixes from the operator's custody.json placed in the empty state, never rewrites it, and names the way back when a fixed key is changed later", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-placed-config-'));
    const state = path.join(dir, 'state');
    try {
      mkdirSync(state, { mode: 0o700 });
      const grant = { tool: 'review-notes/append', subject: '*', max_invocations: 7, max_cost_units: null, ttl_ms: 3_600_000 };
      const placed = JSON.stringify({ port: 0, kernel: { settings: { default_grant: grant } }, executors: [{ name: 'default', claim_capacity: 16, settings: { refusal_reserve: 2 } }] });
      const file = path.join(state, 'custody.json');
      writeFileSync(file, placed, { mode: 0o600 });
      const counted = await custody(['init', '--state', state, '--executors', '2']);
      expect(counted.code, 'a count beside a placed custody.json is refused, not passed over').to.equal(2);
      expect(counted.stderr).to.contain('names the executors');
      const made = await custody(['init', '--state', state]);
      expect(made.code, made.stderr).to.equal(0);
      expect(readFileSync(file, 'utf8'), 'the operator\'s file is as written').to.equal(placed);
      const [ledger] = await sqlite(path.join(state, 'executors', 'default', 'ledger.db'), 'SELECT claim_capacity, refusal_reserve FROM config');
      expect(ledger).to.deep.equal({ claim_capacity: 16, refusal_reserve: 2 });
      const grants = await sqlite(path.join(state, 'kernel', 'kernel.db'), 'SELECT max_invocations FROM grants');
      expect(grants).to.deep.equal([{ max_invocations: 7 }]);
      // Raised after the fact (the natural answer to ledger_full): refused, saying it is fixed and what to set it back to.
      writeFileSync(file, placed.replace('"claim_capacity":16', '"claim_capacity":17'));
      const started = await custody(['start', '--state', state], { timeoutMs: 30_000 });
      expect(started.code).to.not.equal(0);
      expect(started.stderr).to.contain('ledger_identity').and.to.contain('executors[].claim_capacity back to 16');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses a placed custody.json it cannot use before making anything, and keeps the operator's file through an init killed half-way", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-placed-kill-'));
    const state = path.join(dir, 'state');
    try {
      mkdirSync(state, { mode: 0o700 });
      const file = path.join(state, 'custody.json');
      writeFileSync(file, JSON.stringify({ executors: [{ name: 'default', claim_capacity: 15 }] }), { mode: 0o600 });
      const refused = await custody(['init', '--state', state]);
      expect(refused.code).to.not.equal(0);
      expect(refused.stderr).to.contain('config_invalid').and.to.contain('executors.0.claim_capacity');
      expect(readdirSync(state), 'nothing was made').to.deep.equal(['custody.json']);
      const placed = JSON.stringify({ port: 0, executors: [{ name: 'default', claim_capacity: 16 }] });
      writeFileSync(file, placed);
      const child = spawn(process.execPath, [CLI, 'start', '--state', state], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
      await until('the kernel provisioned', () => Promise.resolve(/"event":"kernel_provisioned"/.test(stderr) ? true : undefined));
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
      expect(existsSync(path.join(state, '.init-incomplete')), 'killed half-way').to.equal(true);
      await whileServing(state, async (againErr) => {
        expect(againErr()).to.match(/"event":"init_interrupted_cleared"/);
        expect(readFileSync(file, 'utf8'), 'the operator\'s file outlived the killed init').to.equal(placed);
        const [ledger] = await sqlite(path.join(state, 'executors', 'default', 'ledger.db'), 'SELECT claim_capacity FROM config');
        expect(ledger).to.deep.equal({ claim_capacity: 16 });
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('clears what an init killed while it named a new child left: the marker\'s next bytes, and the child only they name', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-next-marker-'));
    const state = path.join(dir, 'state');
    // The child started last, in its own group as init starts its children; the kill came before the rename that
    // would have put it in the marker.
    const orphan = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    try {
      mkdirSync(path.join(state, 'kernel'), { recursive: true, mode: 0o700 });
      const ticks = processStartTicks(orphan.pid!);
      const killedInit = { pid: orphan.pid! + 1, start_ticks: 1, config_given: false };
      writeFileSync(path.join(state, '.init-incomplete'), JSON.stringify({ ...killedInit, children: [] }), { mode: 0o600 });
      writeFileSync(path.join(state, '.init-incomplete.next'), JSON.stringify({ ...killedInit, children: [{ pid: orphan.pid, start_ticks: ticks }] }), { mode: 0o600 });
      const made = await custody(['init', '--state', state]);
      expect(made.code, made.stderr).to.equal(0);
      expect(made.stderr).to.match(/"event":"init_interrupted_cleared"/);
      expect(isGone(orphan.pid!, null), 'the child only the next bytes named is stopped').to.equal(true);
      expect(readdirSync(state)).to.not.include('.init-incomplete.next').and.not.include('.init-incomplete');
    } finally {
      orphan.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("keeps the operator's custody.json beside a marker left empty (an init killed, or out of disk, while it wrote the marker) and makes the state from it", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-empty-marker-'));
    const state = path.join(dir, 'state');
    try {
      mkdirSync(state, { mode: 0o700 });
      const placed = JSON.stringify({ port: 0, executors: [{ name: 'default', claim_capacity: 1234 }] });
      writeFileSync(path.join(state, 'custody.json'), placed, { mode: 0o600 });
      writeFileSync(path.join(state, '.init-incomplete'), '', { mode: 0o600 });
      const made = await custody(['init', '--state', state]);
      expect(made.code, made.stderr).to.equal(0);
      expect(made.stderr).to.match(/"event":"init_interrupted_cleared"/);
      expect(readFileSync(path.join(state, 'custody.json'), 'utf8'), "the operator's file").to.equal(placed);
      const [ledger] = await sqlite(path.join(state, 'executors', 'default', 'ledger.db'), 'SELECT claim_capacity FROM config');
      expect(ledger).to.deep.equal({ claim_capacity: 1234 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('never clears a half-made state holding files init does not make: it names them', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-foreign-init-'));
    const state = path.join(dir, 'state');
    try {
      mkdirSync(state, { mode: 0o700 });
      writeFileSync(path.join(state, '.init-incomplete'), '{}\n', { mode: 0o600 });
      writeFileSync(path.join(state, 'notes.txt'), 'mine\n');
      const result = await custody(['init', '--state', state]);
      expect(result.code).to.not.equal(0);
      expect(result.stderr).to.contain('notes.txt').and.to.contain('move those aside');
      expect(readFileSync(path.join(state, 'notes.txt'), 'utf8')).to.equal('mine\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('abandons a child start that SIGTERM meets before its hello: exit 0 at once, the child\'s group gone, no fault recorded on its channel', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-term-boot-'));
    const state = path.join(dir, 'state');
    try {
      expect((await custody(['init', '--state', state])).code).to.equal(0);
      const file = path.join(state, 'custody.json');
      const config = JSON.parse(readFileSync(file, 'utf8')) as { port: number; kernel: { argv: string[] | null } };
      config.port = 0;
      // A kernel slow to say hello (a long store migration): a shell that sleeps before it becomes the kernel.
      config.kernel.argv = ['/bin/sh', '-c', 'sleep 60; exec "$@"', 'sh', process.execPath, programPath('kernel')];
      writeFileSync(file, JSON.stringify(config));
      const child = spawn(process.execPath, [CLI, 'start', '--state', state], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
      const exited = once(child, 'exit') as Promise<[number | null]>;
      const spawned = await until('the kernel spawned', () => Promise.resolve(/"child":"kernel","event":"child_state","from":"stopped","to":"starting"/.test(stderr) ? true : undefined));
      expect(spawned).to.equal(true);
      const supervisorDb = path.join(state, 'supervisor', 'supervisor.db');
      const kernelPid = await until('the kernel pid recorded', async () => (await sqlite(supervisorDb, "SELECT pid FROM children WHERE name = 'kernel' AND pid IS NOT NULL"))[0]?.pid as number | undefined);
      child.kill('SIGTERM');
      const [code] = await exited;
      expect(code, stderr).to.equal(0);
      expect(stderr).to.match(/"child":"kernel".*"event":"child_start_abandoned","code":"shutting_down"/);
      expect(stderr, 'a stop is no fault of the channel').to.not.match(/channel_poisoned|"event":"child_refused"/);
      expect(await sqlite(supervisorDb, "SELECT count(*) AS n FROM incidents WHERE kind = 'channel_poisoned'")).to.deep.equal([{ n: 0 }]);
      expect(isGone(Number(kernelPid), null), 'the sleeping kernel process is gone').to.equal(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps serving when the reader of its stdout is gone before its one line (a closed pipe stops a CLI command, not the service)', async () => {
    const { dir, state, child } = startFresh('custody-closed-');
    child.stdout!.destroy();
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    try {
      // The banner is written once the service serves; its write meets the closed pipe.
      await until('the service serving', () => Promise.resolve(existsSync(path.join(state, 'supervisor', 'service.json')) ? true : undefined));
      await until('the service started', () => Promise.resolve(/"event":"service_started"/.test(stderr) ? true : undefined));
      await expectServing(child, state);
    } finally {
      await stopStillRunning(child, dir);
      expect(stderr, 'it stopped as asked').to.match(/"event":"service_stopped"/);
      expect(stderr, 'the closed pipe raised nothing').to.not.match(/EPIPE|uncaught/i);
    }
  });

  it('keeps serving when its stdout cannot be written (/dev/full: a log file on a full disk), saying so on stderr', async () => {
    const full = openSync('/dev/full', 'w');
    const { dir, state, child } = startFresh('custody-full-out-', full);
    closeSync(full);
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    try {
      await until('the failed write said', () => Promise.resolve(/"event":"stdout_unwritable"/.test(stderr) ? true : undefined));
      expect(stderr).to.match(/"event":"stdout_unwritable","code":"ENOSPC"/);
      await expectServing(child, state);
    } finally {
      await stopStillRunning(child, dir);
    }
  });

  it('stops at once when a store cannot be written by its user (SQLite opens it read-only in silence): the supervisor\'s own, then the kernel\'s, refused for good', async function () {
    // Root writes any file whatever its mode: as root, the service runs held to the modes (test/helpers/mode-bound.ts).
    if (!modeBoundAvailable()) {
      console.warn('  skipped: root here cannot drop CAP_DAC_OVERRIDE (setpriv from util-linux, and CAP_SETPCAP, are needed)');
      this.skip();
    }
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-unwritable-'));
    const state = path.join(dir, 'state');
    try {
      expect((await custody(['init', '--state', state])).code).to.equal(0);
      const file = path.join(state, 'custody.json');
      writeFileSync(file, JSON.stringify({ ...(JSON.parse(readFileSync(file, 'utf8')) as object), port: 0 }));
      const paths = statePaths(state);
      const supervisorDb = path.join(paths.supervisorDir, 'supervisor.db');
      const kernelDb = path.join(paths.kernelDir, 'kernel.db');
      const startOnce = async () => {
        const started = Date.now();
        const result = await custody(['start', '--state', state], { timeoutMs: 60_000, prefix: MODE_BOUND });
        return { ...result, ms: Date.now() - started };
      };

      chmodSync(supervisorDb, 0o400);
      const own = await startOnce();
      expect(own.code, own.stderr).to.equal(1);
      expect(own.stderr).to.include(`supervisor store ${supervisorDb} cannot be written by this process`).and.include(`chmod 600 ${supervisorDb}`).and.include('[store_permissions]');
      expect(own.stderr, 'no child was started').to.not.match(/"event":"child_state"/);
      expect(own.ms, 'it did not wait for children it cannot record').to.be.below(20_000);

      // The operator does as told (SQLite gave the -shm it made the database's mode: the message names it too).
      const told = (stderr: string) => /run: chmod 600 ([^;\]\n]+?) \[store_permissions\]/.exec(stderr)?.[1]?.split(' ') ?? [];
      expect(told(own.stderr)).to.include(supervisorDb);
      for (const each of told(own.stderr)) chmodSync(each, 0o600);
      chmodSync(kernelDb, 0o400);
      const kernel = await startOnce();
      expect(kernel.code, kernel.stderr).to.not.equal(0);
      expect(kernel.stderr).to.include(`kernel store ${kernelDb} cannot be written by this process`).and.include(`chmod 600 ${kernelDb}`);
      expect(kernel.stderr.match(/"event":"setup_refused"/g) ?? [], 'refused once, not restarted as a crash').to.have.length(1);
      expect(kernel.ms, 'no restarts waited out').to.be.below(20_000);

      // Writable again as told, it serves.
      expect(told(kernel.stderr)).to.include(kernelDb);
      for (const each of told(kernel.stderr)) chmodSync(each, 0o600);
      await whileServing(state, () => Promise.resolve(), MODE_BOUND);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('stops at once, exit 2, when a child refuses its settings from custody.json: refused for good, not restarted as a crash', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-bad-settings-'));
    const state = path.join(dir, 'state');
    try {
      expect((await custody(['init', '--state', state])).code).to.equal(0);
      const file = path.join(state, 'custody.json');
      const config = JSON.parse(readFileSync(file, 'utf8')) as { port: number; kernel: { argv: string[] | null; settings?: Record<string, unknown> } };
      config.port = 0;
      config.kernel.settings = { ...config.kernel.settings, bogus: 1 };
      writeFileSync(file, JSON.stringify(config));
      // This build's kernel: refused when custody.json is read, before any child starts.
      const read = await custody(['start', '--state', state], { timeoutMs: 60_000 });
      expect(read.code, read.stderr).to.equal(2);
      expect(read.stderr).to.match(/kernel\.settings: .*bogus.* \[config_invalid\]/);
      expect(read.stderr, 'no child was started').to.not.match(/"event":"setup_refused"/);
      // A kernel run by a command of the operator's own (whose settings the configuration cannot know): the child refuses them.
      config.kernel.argv = [process.execPath, programPath('kernel'), '--dir', path.join(state, 'kernel')];
      writeFileSync(file, JSON.stringify(config));
      const started = Date.now();
      const result = await custody(['start', '--state', state], { timeoutMs: 60_000 });
      expect(result.code, result.stderr).to.equal(2);
      expect(result.stderr).to.match(/custody: kernel settings \(custody\.json kernel\.settings\): .*bogus.* \[config_invalid\]/);
      expect(result.stderr.match(/"event":"setup_refused"/g) ?? [], 'refused once, not restarted').to.have.length(1);
      expect(Date.now() - started, 'no restarts waited out').to.be.below(20_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
