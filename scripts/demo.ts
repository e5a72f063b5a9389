// npm run demo — the README walkthrough in a temporary state directory, each
// command shown with its output: a manual walk, the lost-reply drill, a
// watchdog firing, kill -9 of the executor and of the kernel, then the
// journal and a few sqlite3 queries on each store.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createHash } from 'node:crypto';
import { programPath } from '../shared/entry-points.js';

const run = promisify(execFile);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const CLI = programPath('custody');
const SLOW_ADAPTER = path.join(HERE, 'demo', 'slow-note-adapter.js');

const work = mkdtempSync(path.join(tmpdir(), 'custody-demo-'));
const state = path.join(work, 'state');
const env = { ...process.env, CUSTODY_DEMO_JOURNAL_DIR: path.join(state, 'resources', 'slow-notes') };
const bold = (text: string) => (process.stdout.isTTY ? `\x1b[1m${text}\x1b[0m` : text);
const say = (text: string) => process.stdout.write(`\n${bold(`## ${text}`)}\n`);

/** Run and show a command; `summary` replaces a long output (JSON) with the lines that matter. */
async function shell(display: string, command: string, args: string[], summary?: (stdout: string) => string): Promise<{ code: number; stdout: string }> {
  process.stdout.write(`\n$ ${display}\n`);
  let code = 0;
  let stdout: string;
  let stderr: string;
  try {
    ({ stdout, stderr } = await run(command, args, { env, cwd: work, maxBuffer: 16 * 1024 * 1024 }));
  } catch (error) {
    const failure = error as { code?: number; stdout?: string; stderr?: string };
    code = typeof failure.code === 'number' ? failure.code : 1;
    stdout = failure.stdout ?? '';
    stderr = failure.stderr ?? '';
  }
  process.stdout.write((summary && code === 0 ? summary(stdout) + '\n' : stdout) + stderr);
  if (code !== 0) process.stdout.write(`(exit ${code})\n`);
  return { code, stdout };
}

const quote = (arg: string) => (/^[\w@%+=:,./*-]+$/.test(arg) ? arg : `'${arg}'`);
const custody = (...args: string[]) => shell(`custody ${args.map(quote).join(' ')}`, process.execPath, [CLI, '--state', state, ...args]);
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
const custodyDigest = (field: 'report' | 'receipt', ...args: string[]) =>
  shell(`custody ${args.map(quote).join(' ')}`, process.execPath, [CLI, '--state', state, ...args], (stdout) => {
    const value = (JSON.parse(stdout) as Record<string, string>)[field]!;
    return `… (JSON; sha256 of its ${field}: ${sha256(value)})`;
  });
const sql = (store: string, query: string) => shell(`sqlite3 -box ${path.relative(work, store)} "${query}"`, 'sqlite3', ['-box', '-readonly', store, query]);

async function childPid(role: string): Promise<number> {
  const { stdout } = await run(process.execPath, [CLI, '--state', state, 'status', '--json'], { env });
  return (JSON.parse(stdout) as { children: Array<{ role: string; pid: number }> }).children.find((c) => c.role === role)!.pid;
}

async function startService(): Promise<ChildProcess> {
  process.stdout.write(`\n$ custody start --state ${path.relative(work, state)} &   (its JSON log goes to ${path.relative(work, path.join(work, 'service.log'))})\n`);
  const log = path.join(work, 'service.log');
  writeFileSync(log, '');
  const child = spawn(process.execPath, [CLI, 'start', '--state', state], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr.on('data', (chunk: Buffer) => writeFileSync(log, chunk, { flag: 'a' }));
  const line = await new Promise<string>((resolve) => child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString())));
  process.stdout.write(line);
  return child;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let service: ChildProcess | null = null;
try {
  say('Provision a state directory: each process makes its own key');
  await custody('init');
  const configFile = path.join(state, 'custody.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as { port: number; executors: Array<Record<string, unknown>> };
  config.port = 0;
  config.executors[0] = { ...config.executors[0], tools: ['review-notes/*', 'demo/*'], adapters: [SLOW_ADAPTER], deadlines_ms: { '*': 30_000, 'demo/slow-note': 3000 } };
  writeFileSync(configFile, JSON.stringify(config, null, 2) + '\n');
  process.stdout.write('\n(custody.json edited: port 0, and a demo tool demo/slow-note with a 3 s watchdog deadline, loaded from an adapter module)\n');

  say('Start the service');
  service = await startService();
  await custody('status');

  say('note-1: authorize, execute, report');
  writeFileSync(path.join(work, 'review.txt'), 'Reviewed PR #421: the fixture for #414 carries an injected comment; do not merge.\n');
  await custody('authorize', 'review-notes/append', '--arg', 'note=@review.txt', '--operation', 'note-1');
  await custody('execute', 'note-1');
  await custody('report', 'note-1');
  await custody('receipt', 'export', 'note-1', '--out', 'note-1');
  await custody('receipt', 'verify', 'note-1/receipt-2-completion.json', '--trusted-kernel-pubkey', 'state/kernel/kernel.pub');

  say('note-2: the reply is lost after the report was retained');
  await custody('authorize', 'review-notes/append', '--arg', 'note=@review.txt', '--operation', 'note-2');
  await custody('execute', 'note-2', '--drop-reply');
  const first = await custodyDigest('report', 'execute', 'note-2', '--json');
  const second = await custodyDigest('report', 'execute', 'note-2', '--json');
  const reportOf = (text: string) => (JSON.parse(text) as { report: string }).report;
  process.stdout.write(`\nthe two replayed reports are byte-identical: ${reportOf(first.stdout) === reportOf(second.stdout)}\n`);
  await custody('report', 'note-2');
  const r1 = await custodyDigest('receipt', 'report', 'note-2', '--json');
  const r2 = await custodyDigest('receipt', 'report', 'note-2', '--json');
  const receiptOf = (text: string) => (JSON.parse(text) as { receipt: string }).receipt;
  process.stdout.write(`\nthe repeated receipts are byte-identical: ${receiptOf(r1.stdout) === receiptOf(r2.stdout)}\n`);

  say('A tool that runs past its deadline: the watchdog kills, reaps, and reconciles once');
  await custody('grant', 'add', '--tool', 'demo/*', '--max', '10', '--ttl', '1h');
  await custody('invoke', 'demo/slow-note', '--arg', 'note=too slow', '--arg', 'delay_ms=8000', '--request-id', 'slow-1');
  await custody('trace', 'slow-1');

  say('kill -9 the executor while a slow operation runs');
  const slow = custody('invoke', 'demo/slow-note', '--arg', 'note=interrupted', '--arg', 'delay_ms=2000', '--request-id', 'slow-2');
  await pause(800);
  const executor = await childPid('executor');
  process.stdout.write(`\n$ kill -9 ${executor}   (the executor)\n`);
  process.kill(executor, 'SIGKILL');
  await slow;
  await custody('trace', 'slow-2');

  say('kill -9 the kernel, then carry on');
  const kernel = await childPid('kernel');
  process.stdout.write(`\n$ kill -9 ${kernel}   (the kernel)\n`);
  process.kill(kernel, 'SIGKILL');
  await pause(500);
  await custody('status');
  await custody('grant', 'add', '--tool', 'review-notes/*', '--max', '10', '--ttl', '1h');
  await custody('invoke', 'review-notes/append', '--arg', 'note=after the kernel came back', '--request-id', 'note-3');
  await custody('ops');

  say('The journal holds exactly one line per completed operation');
  await shell('wc -l state/resources/review-notes.jsonl', 'wc', ['-l', path.join(state, 'resources', 'review-notes.jsonl')]);
  const journal = path.join(state, 'resources', 'slow-notes', 'review-notes.jsonl');
  if (existsSync(journal)) await shell('cat state/resources/slow-notes/review-notes.jsonl   (fences written by reconciliation)', 'cat', [journal]);

  say('Each store, read with the sqlite3 shell while the service runs');
  await sql(path.join(state, 'kernel', 'kernel.db'), 'SELECT request_id, state, hold, receipts, last_reason FROM operations_view');
  await sql(path.join(state, 'kernel', 'kernel.db'), "SELECT request_id, decision, verdict, reason, hold_disposition FROM receipts_view WHERE request_id LIKE 'slow-%'");
  await sql(path.join(state, 'executors', 'default', 'ledger.db'), 'SELECT substr(operation_id,1,12) AS operation, state, claimed_at_iso FROM claims_view');
  await sql(path.join(state, 'supervisor', 'supervisor.db'), 'SELECT at, child, kind, operation FROM incidents_view');
} finally {
  if (service) {
    process.stdout.write('\n$ kill -TERM <custody>   (graceful stop)\n');
    service.kill('SIGTERM');
    await new Promise((resolve) => service!.once('exit', resolve));
  }
  if (process.env.CUSTODY_DEMO_KEEP) process.stdout.write(`\nkept ${work}\n`);
  else rmSync(work, { recursive: true, force: true });
}
