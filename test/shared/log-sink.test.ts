// The bounded log backlog (shared/log-sink.ts): a stderr reader that stops
// makes lines wait in the process's memory up to CUSTODY_LOG_BACKLOG_BYTES,
// then they are dropped and counted, and the count is the first line once
// the reader catches up; a reader that left never ends the process.
import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { LOG_BACKLOG_DEFAULT_BYTES, LogSink, logBacklogBytes } from '../../shared/log-sink.js';
import { startService, type TestService } from '../helpers/service.js';

/** A stream whose reader has stopped: every write waits until `release`. */
function stalledStream(): { stream: Writable; written: string[]; release: () => void } {
  const written: string[] = [];
  const pending: Array<() => void> = [];
  const stream = new Writable({
    highWaterMark: 1,
    write(chunk: Buffer, _encoding, callback) {
      written.push(chunk.toString('utf8'));
      pending.push(() => callback());
    },
  });
  return { stream, written, release: () => pending.splice(0).forEach((done) => done()) };
}

describe('the log sink', () => {
  it('queues lines up to the bound in bytes, drops the one past it, and reports the drops first once the reader caught up', async () => {
    const { stream, written, release } = stalledStream();
    const sink = new LogSink(stream, 100);
    const first = `${'a'.repeat(59)}\n`;
    // 38 characters, 40 bytes: the bound is in bytes.
    const second = `${'é'.repeat(2)}${'b'.repeat(35)}\n`;
    expect(Buffer.byteLength(first) + Buffer.byteLength(second)).to.equal(100);
    sink.write(first);
    sink.write(second);
    expect(stream.writableLength).to.equal(100);
    sink.write('c\n');
    expect(sink.dropped).to.equal(1);
    release();
    await new Promise((resolve) => setImmediate(resolve));
    release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(stream.writableLength).to.equal(0);
    sink.write('d\n');
    expect(sink.dropped).to.equal(0);
    release();
    await new Promise((resolve) => setImmediate(resolve));
    const report = JSON.parse(written.at(-2)!) as Record<string, unknown>;
    expect(report).to.include({ level: 'warn', event: 'log_lines_dropped', lines: 1, bytes: 2 });
    expect(written.slice(0, 2)).to.deep.equal([first, second]);
    expect(written.at(-1)).to.equal('d\n');
  });

  it('writes a line longer than the bound when nothing waits, and drops the next while it waits', () => {
    const { stream, written } = stalledStream();
    const sink = new LogSink(stream, 100);
    sink.write(`${'a'.repeat(199)}\n`);
    sink.write('b\n');
    expect(written).to.have.length(1);
    expect(sink.dropped).to.equal(1);
  });

  it('keeps dropping while the report itself would not fit', () => {
    const { stream } = stalledStream();
    const sink = new LogSink(stream, 100);
    sink.write(`${'a'.repeat(99)}\n`);
    sink.write('b\n');
    sink.write('c\n');
    expect(sink.dropped).to.equal(2);
  });

  it('survives a reader that left: the error is swallowed and later writes do nothing', async () => {
    const stream = new Writable({
      write(_chunk, _encoding, callback) {
        callback(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
      },
    });
    const sink = new LogSink(stream, 1000);
    sink.write('a\n');
    await new Promise((resolve) => setImmediate(resolve));
    expect(stream.destroyed).to.equal(true);
    expect(() => sink.write('b\n')).to.not.throw();
  });

  it('reads CUSTODY_LOG_BACKLOG_BYTES within 4096 bytes and 1 GiB, the default otherwise', () => {
    expect(logBacklogBytes(undefined)).to.equal(LOG_BACKLOG_DEFAULT_BYTES);
    expect(logBacklogBytes('4096')).to.equal(4096);
    expect(logBacklogBytes('4095')).to.equal(LOG_BACKLOG_DEFAULT_BYTES);
    expect(logBacklogBytes(String(1024 ** 3))).to.equal(1024 ** 3);
    expect(logBacklogBytes(String(1024 ** 3 + 1))).to.equal(LOG_BACKLOG_DEFAULT_BYTES);
    expect(logBacklogBytes('8k')).to.equal(LOG_BACKLOG_DEFAULT_BYTES);
    expect(logBacklogBytes('-1')).to.equal(LOG_BACKLOG_DEFAULT_BYTES);
  });

  it('says once, on stderr, that a CUSTODY_LOG_BACKLOG_BYTES it cannot take was not taken; a value it takes is not said', () => {
    const logOnce = `import(${JSON.stringify(new URL('../../shared/log.js', import.meta.url).href)}).then(({ createLogger }) => { const log = createLogger({}); log.info('one', {}); log.info('two', {}); })`;
    const run = (value: string) => spawnSync(process.execPath, ['-e', logOnce], { env: { ...process.env, CUSTODY_LOG_BACKLOG_BYTES: value, CUSTODY_LOG_LEVEL: 'info' }, encoding: 'utf8' }).stderr;
    for (const bad of ['8k', '4095', String(1024 ** 3 + 1)]) {
      const said = run(bad).split('\n').filter((line) => line.includes('log_backlog_ignored'));
      expect(said, bad).to.have.length(1);
      expect((JSON.parse(said[0]!) as { message: string }).message).to.contain(`CUSTODY_LOG_BACKLOG_BYTES=${JSON.stringify(bad)}`).and.to.contain(`the default ${LOG_BACKLOG_DEFAULT_BYTES} is used`);
    }
    for (const good of ['4096', String(LOG_BACKLOG_DEFAULT_BYTES)]) expect(run(good), good).to.not.contain('log_backlog_ignored');
  });
});

/** Writes ten 330-byte lines through the stderr sink, says "full" on stdout, and three more lines on SIGUSR2. */
const TEN_THEN_THREE = `
const { stderrSink } = await import(process.argv[1]);
const sink = stderrSink();
let i = 0;
const line = () => sink.write(JSON.stringify({ i: i++, pad: 'x'.repeat(300) }) + '\\n');
for (let k = 0; k < 10; k++) line();
process.stdout.write('full\\n');
process.on('SIGUSR2', () => { for (let k = 0; k < 3; k++) line(); process.exit(0); });
setInterval(() => undefined, 1000);
`;

function hasPrlimit(): boolean {
  return spawnSync('prlimit', ['--version']).status === 0;
}

describe('stderr redirected to a file that fills', () => {
  it('drops what the file refuses, ends a line cut short, and once the file takes writes again says how many lines were lost', async function () {
    if (!hasPrlimit()) {
      if (process.env.CI === 'true') throw new Error('prlimit (util-linux) missing; CI requires it');
      this.skip();
    }
    const dir = mkdtempSync(path.join(tmpdir(), 'custody-log-full-'));
    const file = path.join(dir, 'custody.log');
    const fd = openSync(file, 'a');
    try {
      // The file's size is bounded for this process (RLIMIT_FSIZE, 2000 bytes): the 7th line is cut short, the rest refused (EFBIG), as a full disk would.
      const module = new URL('../../shared/log-sink.js', import.meta.url).href;
      const child = spawn('prlimit', ['--fsize=2000:unlimited', process.execPath, '--input-type=module', '-e', TEN_THEN_THREE, module], { stdio: ['ignore', 'pipe', fd] });
      const exited = once(child, 'exit') as Promise<[number | null]>;
      await once(child.stdout!, 'data');
      // Room again: the limit is lifted, and three more lines come.
      expect(spawnSync('prlimit', ['--pid', String(child.pid), '--fsize=unlimited:unlimited']).status).to.equal(0);
      child.kill('SIGUSR2');
      expect((await exited)[0]).to.equal(0);
      const lines = readFileSync(file, 'utf8').split('\n');
      expect(lines.pop(), 'the file ends with a whole line').to.equal('');
      const parsed = lines.map((line) => {
        try {
          return JSON.parse(line) as { i?: number; event?: string; lines?: number; message?: string };
        } catch {
          return null;
        }
      });
      expect(parsed.slice(0, 6).map((line) => line?.i)).to.deep.equal([0, 1, 2, 3, 4, 5]);
      expect(parsed[6], 'the line cut short stands alone').to.equal(null);
      expect(lines[6]).to.match(/^\{"i":6,"pad":"x+$/);
      expect(parsed[7]).to.deep.include({ event: 'log_lines_dropped', lines: 4 });
      expect(parsed[7]?.message).to.include('(EFBIG)');
      expect(parsed.slice(8).map((line) => line?.i), 'logging goes on once the file takes writes').to.deep.equal([10, 11, 12]);
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the service\'s stderr', function () {
  this.timeout(120_000);
  let service: TestService;

  before(async () => {
    // At debug level an operation writes several KB of log: 150 fill the pipe's 64 KiB and the 4 KiB backlog many times over.
    service = await startService({ env: { CUSTODY_LOG_BACKLOG_BYTES: '4096', CUSTODY_LOG_LEVEL: 'debug' } });
    const grant = await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 1000, ttl_ms: 3_600_000 });
    expect(grant.status, JSON.stringify(grant.body)).to.equal(201);
  });

  after(async () => {
    await service.stop();
    service.cleanup();
  });

  const invokeMany = async (count: number, prefix: string) => {
    for (let i = 0; i < count; i++) {
      const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: `${prefix} ${i}` } }, 'agent');
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
    }
  };

  it('with its reader stopped, serves on and drops past the backlog, then says how many lines it dropped', async () => {
    service.process.stderr!.pause();
    await invokeMany(150, 'reader stopped');
    service.process.stderr!.resume();
    await invokeMany(1, 'reader back');
    const deadline = Date.now() + 10_000;
    let report: Record<string, unknown> | undefined;
    while (!report && Date.now() < deadline) {
      const line = service.stderr.find((l) => l.includes('"event":"log_lines_dropped"'));
      report = line ? (JSON.parse(line) as Record<string, unknown>) : undefined;
      if (!report) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(report, 'a log_lines_dropped line').to.not.equal(undefined);
    expect(report!.pid).to.equal(service.process.pid);
    expect(report!.lines).to.be.a('number').greaterThan(0);
  });

  it('with its reader gone (EPIPE), serves on and still stops cleanly', async () => {
    service.process.stderr!.destroy();
    await invokeMany(20, 'reader gone');
    const status = await service.http('GET', '/v1/status', undefined, 'agent');
    expect((status.body.children as Array<{ state: string; restarts: number }>).map((c) => [c.state, c.restarts])).to.deep.equal([
      ['running', 0],
      ['running', 0],
    ]);
    expect(await service.stop()).to.equal(0);
  });
});
