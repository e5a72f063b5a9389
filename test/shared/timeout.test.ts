// The one timeout race (shared/timeout.ts): which branch is taken, by provoking each.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { withTimeout } from '../../shared/timeout.js';

const never = new Promise<string>(() => undefined);

describe('withTimeout', () => {
  it('answers with the work when it settles first, and never calls the timeout branch', async () => {
    let called = false;
    const value = await withTimeout(Promise.resolve('done'), 1_000, () => ((called = true), 'late'));
    expect(value).to.equal('done');
    expect(called).to.equal(false);
  });

  it("passes the work's own rejection through, not the timeout's", async () => {
    const error = await withTimeout(Promise.reject(new Error('broke')), 1_000, () => 'late').catch((e: unknown) => e as Error);
    expect(error).to.be.instanceOf(Error).with.property('message', 'broke');
  });

  it('takes an answer that arrived before its deadline but is read after it (a process resumed from SIGSTOP): its timers run before the loop reads the pipe', async () => {
    // A child that echoes each line at once and then says so in a file; this process's loop stalls, as a stopped
    // process's does, until the echo is in the pipe and the deadline has passed.
    const marker = path.join(mkdtempSync(path.join(tmpdir(), 'custody-timeout-')), 'echoed');
    const script = `const fs = require('node:fs'); process.stdin.on('data', (d) => process.stdout.write(d, () => fs.writeFileSync(${JSON.stringify(marker)}, String(d))))`;
    const echo = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
    const stall = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
    try {
      echo.stdin.write('ready\n');
      await once(echo.stdout, 'data');
      for (let round = 0; round < 3; round += 1) {
        const answer = once(echo.stdout, 'data').then(([chunk]) => String(chunk).trim());
        echo.stdin.write(`answer ${round}\n`);
        const armed = performance.now();
        const raced = withTimeout(answer, 50, () => 'timed out');
        const echoed = () => existsSync(marker) && readFileSync(marker, 'utf8') === `answer ${round}\n`;
        while (!echoed() && performance.now() - armed < 10_000) stall(5);
        expect(echoed(), 'the child answered').to.equal(true);
        stall(Math.max(0, 100 - (performance.now() - armed))); // and the deadline is past before the loop reads it
        expect(await raced, `round ${round}`).to.equal(`answer ${round}`);
      }
      // The deadline still holds for an answer that was not there: a stall with nothing to read times out.
      const silent = new Promise<string>(() => undefined);
      const raced = withTimeout(silent, 50, () => 'timed out');
      stall(200);
      expect(await raced).to.equal('timed out');
    } finally {
      echo.kill();
    }
  });

  it('does not count time its process was stopped (SIGSTOP, then SIGCONT): an answer that comes soon after the resume is taken; one that never comes still times out', async function () {
    this.timeout(20_000);
    // Two races of 1 s each in a process that is stopped for 2 s a moment after it armed them: the first's work
    // settles 100 ms after SIGCONT (an executor that waited on the stopped supervisor), the second's never does.
    const module = new URL('../../shared/timeout.js', import.meta.url).href;
    const script = `
      const { discountStalls, withTimeout } = await import(process.argv[1]);
      discountStalls();
      const resumed = new Promise((resolve) => process.once('SIGCONT', () => setTimeout(() => resolve('answered'), 100)));
      const started = performance.now();
      const races = [withTimeout(resumed, 1000, () => 'timed out'), withTimeout(new Promise(() => undefined), 1000, () => 'timed out')];
      process.stdout.write('armed\\n');
      const results = await Promise.all(races);
      process.stdout.write(JSON.stringify({ results, ms: Math.round(performance.now() - started) }) + '\\n');
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script, module], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
    const exited = once(child, 'exit');
    while (!out.includes('armed')) await new Promise((resolve) => setTimeout(resolve, 10));
    child.kill('SIGSTOP');
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    child.kill('SIGCONT');
    await exited;
    const { results, ms } = JSON.parse(out.split('\n')[1]!) as { results: string[]; ms: number };
    expect(results).to.deep.equal(['answered', 'timed out']);
    // The second waited about its 1 s of running time besides the 2 s stop (up to one sample period of the stop counts as running).
    expect(ms, 'without the fix it ends at the resume, ~2,050 ms').to.be.at.least(2_500);
  });

  it('takes the timeout branch when the work is still pending: its value is the answer', async () => {
    expect(await withTimeout(never, 10, () => 'timed out')).to.equal('timed out');
  });

  it('takes the timeout branch and rejects with the error it throws', async () => {
    const error = await withTimeout(never, 10, () => {
      throw new Error('no answer within 10 ms');
    }).catch((e: unknown) => e as Error);
    expect(error).to.have.property('message', 'no answer within 10 ms');
  });

  it('treats a bound of 0 like setTimeout does: the timeout branch after a tick, not a refusal', async () => {
    expect(await withTimeout(never, 0, () => 'expired')).to.equal('expired');
    expect(await withTimeout(Promise.resolve('ready'), 0, () => 'expired')).to.equal('ready');
  });

  it('never answers from the timeout branch before the whole bound has passed by performance.now()', async () => {
    for (let i = 0; i < 20; i += 1) {
      const blocked = Date.now() + 8;
      while (Date.now() < blocked); // the turn runs long, as a commit's fsync does: the loop's cached time lags
      const started = performance.now();
      const waited = await withTimeout(never, 15, () => performance.now() - started);
      expect(waited).to.be.at.least(15);
    }
  });

  it('makes nothing for the timeout branch until the bound passes', async () => {
    let made = 0;
    await Promise.all(Array.from({ length: 100 }, () => withTimeout(Promise.resolve(1), 1_000, () => ((made += 1), 0))));
    expect(made).to.equal(0);
  });
});
