// The chaos campaign (docs/RELIABILITY.md): `npm run chaos -- --seconds N --workers W`.
// A real service in a temporary state directory; W client loops invoke the
// built-in review-notes tool, each request with its own request id, while a
// killer sends SIGKILL to a random process — the kernel, an executor, the
// adapter host, or the supervisor, which is then started again on the same
// state as a service manager would. When the time is up the killing stops,
// every request id is retried with its own arguments until it has a final
// answer, the service is stopped, and the invariant checker
// (scripts/chaos/invariants.ts) reads the three stores and the journal.
// Prints ONE JSON line (the verdict) on stdout; exits 1 on any violation or
// any request left without a final answer, 2 on a usage error.
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { createLogger } from '../shared/log.js';
import { parseConfig } from '../supervisor/config/load.js';
import { programPath } from '../shared/entry-points.js';
import { initState } from '../supervisor/init.js';
import { statePaths } from '../supervisor/paths.js';
import { checkInvariants } from './chaos/invariants.js';

const CLI = programPath('custody');
const TOOL = 'review-notes/append';

type Target = 'kernel' | 'executor' | 'adapter_host' | 'supervisor';
const TARGETS: readonly Target[] = ['kernel', 'executor', 'adapter_host', 'supervisor'];

interface Options {
  readonly seconds: number;
  readonly workers: number;
  /** Mean pause between kills. */
  readonly killEveryMs: number;
  /** Keep the state directory (its path is in the verdict). */
  readonly keep: boolean;
  /** How long the final retries may take. */
  readonly settleSeconds: number;
}

function usage(message: string): never {
  process.stderr.write(`chaos: ${message}\nusage: npm run chaos -- [--seconds N] [--workers W] [--kill-every-ms MS] [--settle-seconds N] [--keep]\n`);
  process.exit(2);
}

export function parseArgs(argv: readonly string[]): Options {
  const options = { seconds: 60, workers: 4, killEveryMs: 2500, keep: false, settleSeconds: 180 };
  const number = (flag: string, value: string | undefined, min: number, max: number): number => {
    const parsed = Number(value);
    if (!Number.isInteger(parsed) || parsed < min || parsed > max) usage(`${flag} takes an integer in [${min}, ${max}], got ${value ?? 'nothing'}`);
    return parsed;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    switch (flag) {
      case '--seconds':
        options.seconds = number(flag, argv[++i], 1, 86_400);
        break;
      case '--workers':
        options.workers = number(flag, argv[++i], 1, 64);
        break;
      case '--kill-every-ms':
        options.killEveryMs = number(flag, argv[++i], 100, 600_000);
        break;
      case '--settle-seconds':
        options.settleSeconds = number(flag, argv[++i], 10, 3600);
        break;
      case '--keep':
        options.keep = true;
        break;
      default:
        usage(`unknown argument ${flag ?? ''}`);
    }
  }
  return options;
}

/** The supervisor under a minimal service manager: started again whenever it dies, until told to stop. */
class Managed {
  readonly root: string;
  readonly #log: NodeJS.WritableStream;
  #child: ChildProcess | null = null;
  #port: number | null = null;
  #stopping = false;
  #ready: Promise<void> = Promise.resolve();
  restarts = 0;
  /** Longest time from a supervisor's death to the next one serving, ms. */
  worstDowntimeMs = 0;

  constructor(root: string, logFile: string) {
    this.root = root;
    this.#log = createWriteStream(logFile, { flags: 'a' });
  }

  get pid(): number | null {
    return this.#child?.pid ?? null;
  }

  get port(): number | null {
    return this.#port;
  }

  /** Resolves once a supervisor serves. */
  get ready(): Promise<void> {
    return this.#ready;
  }

  start(): Promise<void> {
    this.#ready = this.#spawn();
    return this.#ready;
  }

  async #spawn(): Promise<void> {
    const paths = statePaths(this.root);
    rmSync(paths.serviceJson, { force: true });
    this.#port = null;
    const child = spawn(process.execPath, [CLI, 'start', '--state', this.root], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.#child = child;
    child.stderr.pipe(this.#log, { end: false });
    const spawnedAt = performance.now();
    child.once('exit', () => {
      if (this.#stopping || this.#child !== child) return;
      this.restarts += 1;
      const deadAt = performance.now();
      // As a service manager would (Restart=on-failure, a short RestartSec).
      this.#ready = sleep(200).then(() => this.#spawn()).then(() => {
        this.worstDowntimeMs = Math.max(this.worstDowntimeMs, performance.now() - deadAt);
      });
    });
    while (!existsSync(paths.serviceJson)) {
      if (child.exitCode !== null || child.signalCode !== null) return; // its exit handler starts the next one
      if (performance.now() - spawnedAt > 60_000) throw new Error('the supervisor did not serve within 60 s');
      await sleep(25);
    }
    this.#port = (JSON.parse(readFileSync(paths.serviceJson, 'utf8')) as { port: number }).port;
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    await this.#ready.catch(() => undefined);
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    await exited;
    clearTimeout(timer);
  }
}

interface Answer {
  readonly status: number;
  readonly body: { final?: boolean; outcome?: string | null; phase?: string; code?: string };
}

async function invoke(managed: Managed, token: string, requestId: string, waitMs: number): Promise<Answer | null> {
  const port = managed.port;
  if (port === null) return null;
  try {
    const response = await fetch(`http://127.0.0.1:${port}/v1/invoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ tool: TOOL, request_id: requestId, arguments: { note: `chaos ${requestId}` }, wait_ms: waitMs }),
      signal: AbortSignal.timeout(waitMs + 15_000),
    });
    return { status: response.status, body: (await response.json().catch(() => ({}))) as Answer['body'] };
  } catch {
    return null; // a killed supervisor drops its connections
  }
}

function isFinal(answer: Answer | null): boolean {
  return answer !== null && answer.status === 200 && (answer.body.final === true || answer.body.outcome === 'unknown');
}

/** Children of a process, from /proc (Linux). */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

async function childPid(managed: Managed, token: string, role: 'kernel' | 'executor'): Promise<number | null> {
  if (managed.port === null) return null;
  try {
    const response = await fetch(`http://127.0.0.1:${managed.port}/v1/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5_000) });
    const body = (await response.json()) as { children?: Array<{ role: string; pid: number | null }> };
    return body.children?.find((child) => child.role === role)?.pid ?? null;
  } catch {
    return null;
  }
}

async function killOne(managed: Managed, token: string, target: Target): Promise<boolean> {
  let pid: number | null;
  switch (target) {
    case 'supervisor':
      pid = managed.pid;
      break;
    case 'kernel':
    case 'executor':
      pid = await childPid(managed, token, target);
      break;
    case 'adapter_host': {
      const executor = await childPid(managed, token, 'executor');
      pid = executor === null ? null : (childrenOf(executor)[0] ?? null);
      break;
    }
  }
  if (pid === null) return false;
  try {
    process.kill(pid, 'SIGKILL');
    return true;
  } catch {
    return false;
  }
}

export async function runChaos(options: Options): Promise<{ verdict: Record<string, unknown>; ok: boolean }> {
  const started = performance.now();
  const base = mkdtempSync(path.join(tmpdir(), 'custody-chaos-'));
  const root = path.join(base, 'state');
  const config = parseConfig({
    port: 0,
    // Kills here are random, not poison pills: a request in flight at two of
    // them must not be parked (quarantine has its own tests).
    restart: { max_restarts: 1000, period_s: 60, backoff_initial_ms: 50, backoff_max_ms: 1000, quarantine_after_crashes: 100 },
    // A 10-minute campaign runs more operations than the default 50 000
    // claims a ledger holds without archival (a full ledger is ledger_full,
    // an operator's cue to run custody archive, not a fault under test).
    executors: [{ name: 'default', claim_capacity: 2_000_000 }],
    timing: { heartbeat_interval_ms: 1000, heartbeat_timeout_ms: 3000, retry_backoff_initial_ms: 100, retry_backoff_max_ms: 2000, recovery_sweep_ms: 1000 },
  });
  const logFile = path.join(base, 'service.log');
  const sink = createWriteStream(logFile, { flags: 'a' });
  await initState(root, { config, log: createLogger({}, { level: 'warn', write: (line) => sink.write(line) }), onChildStderr: () => undefined });
  const paths = statePaths(root);
  const agent = readFileSync(paths.agentToken, 'utf8').trim();
  const control = readFileSync(paths.controlToken, 'utf8').trim();
  const managed = new Managed(root, logFile);
  await managed.start();
  const grant = await fetch(`http://127.0.0.1:${managed.port}/v1/grants`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${control}` },
    body: JSON.stringify({ tool: 'review-notes/*', max_invocations: 10_000_000, ttl_ms: 7 * 86_400_000 }),
  });
  if (grant.status !== 201) throw new Error(`grant add answered ${grant.status}`);

  const ids: string[] = [];
  const kills: Record<Target, number> = { kernel: 0, executor: 0, adapter_host: 0, supervisor: 0 };
  const endAt = performance.now() + options.seconds * 1000;
  let answeredFinalFirstTime = 0;

  const worker = async (w: number) => {
    for (let n = 0; performance.now() < endAt; n++) {
      const id = `chaos-${w}-${n}`;
      ids.push(id);
      if (managed.port === null) await managed.ready.catch(() => undefined);
      const answer = await invoke(managed, agent, id, 5_000);
      if (isFinal(answer)) answeredFinalFirstTime += 1;
      if (answer === null) await sleep(100);
    }
  };
  const killer = async () => {
    while (performance.now() < endAt) {
      // The pause counts from a serving supervisor: its own restart is not a pause between kills.
      await managed.ready.catch(() => undefined);
      await sleep(options.killEveryMs / 2 + Math.random() * options.killEveryMs);
      if (performance.now() >= endAt) break;
      const target = TARGETS[Math.floor(Math.random() * TARGETS.length)]!;
      if (await killOne(managed, agent, target)) kills[target] += 1;
    }
  };
  await Promise.all([killer(), ...Array.from({ length: options.workers }, (_, w) => worker(w))]);
  const loadSeconds = (performance.now() - started) / 1000;

  // Every request id again, with its own arguments, until its answer is final.
  await managed.ready;
  const settleBy = performance.now() + options.settleSeconds * 1000;
  const open = new Set(ids);
  while (open.size > 0 && performance.now() < settleBy) {
    const batch = [...open];
    for (let i = 0; i < batch.length; i += 16) {
      const slice = batch.slice(i, i + 16);
      const answers = await Promise.all(slice.map((id) => invoke(managed, agent, id, 10_000)));
      slice.forEach((id, j) => {
        if (isFinal(answers[j]!)) open.delete(id);
      });
    }
    if (open.size > 0) await sleep(500);
  }
  await managed.stop();
  sink.end();

  const result = checkInvariants({ root, mustBeFinal: ids });
  const ok = result.violations.length === 0 && result.final === ids.length;
  const verdict = {
    ok,
    seconds: options.seconds,
    workers: options.workers,
    requests: ids.length,
    answered_final_first_time: answeredFinalFirstTime,
    requests_final: result.final,
    kills,
    kills_total: Object.values(kills).reduce((a, b) => a + b, 0),
    supervisor_restarts: managed.restarts,
    worst_supervisor_downtime_ms: Math.round(managed.worstDowntimeMs),
    operations: result.operations,
    states: result.states,
    effects: result.effects,
    violations: result.violations.length,
    first_violations: result.violations.slice(0, 10),
    load_seconds: Math.round(loadSeconds),
    duration_seconds: Math.round((performance.now() - started) / 1000),
    state_dir: options.keep || !ok ? root : null,
  };
  if (!options.keep && ok) rmSync(base, { recursive: true, force: true });
  return { verdict, ok };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const options = parseArgs(process.argv.slice(2));
  runChaos(options).then(
    ({ verdict, ok }) => {
      process.stdout.write(JSON.stringify(verdict) + '\n');
      process.exit(ok ? 0 : 1);
    },
    (error: unknown) => {
      process.stdout.write(JSON.stringify({ ok: false, error: (error as Error).message }) + '\n');
      process.exit(1);
    },
  );
}
