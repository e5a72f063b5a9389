// A real custody service in a temporary state directory, driven the way an
// operator drives it: the `custody` CLI as a separate process, HTTP with the
// tokens from the state directory, signals, and the sqlite3 shell.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseConfig } from '../../supervisor/config/load.js';
import { initState } from '../../supervisor/init.js';
import { type StatePaths, statePaths } from '../../supervisor/paths.js';
import { programPath } from '../../shared/entry-points.js';
import { collectingLogger, distPath } from './children.js';

const run = promisify(execFile);
/** The `custody` program as the package's bin runs it (its bundle, shared/entry-points.ts). */
export const CLI = programPath('custody');

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Run the custody CLI as a separate process, as an operator would. */
export async function custody(args: readonly string[], options: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number; prefix?: readonly string[] } = {}): Promise<CliResult> {
  try {
    // `prefix`: a command that runs node (test/helpers/mode-bound.ts).
    const [command, ...before] = [...(options.prefix ?? []), process.execPath];
    const { stdout, stderr } = await run(command, [...before, CLI, ...args], { env: { ...process.env, ...options.env }, cwd: options.cwd, maxBuffer: 32 * 1024 * 1024, ...(options.timeoutMs ? { timeout: options.timeoutMs } : {}) });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failure = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof failure.code === 'number' ? failure.code : 1, stdout: failure.stdout ?? '', stderr: failure.stderr ?? '' };
  }
}

/** The fixture adapters of test/fixtures/executor-adapters.ts, loaded the way an operator loads a tool. */
export const FIXTURE_ADAPTERS = distPath('test', 'fixtures', 'executor-adapters.js');
/** The executor `default` with the fixture adapters beside review-notes (test/fixtures/executor-adapters.ts), as custody.json names it. */
export const FIXTURE_EXECUTOR = { name: 'default', tools: ['review-notes/*', 'fixture/*'], adapters: [FIXTURE_ADAPTERS] };

/** Fast timings for tests: short heartbeats, backoffs and sweeps. */
export const FAST_TIMING = {
  heartbeat_interval_ms: 1000,
  heartbeat_timeout_ms: 3000,
  hello_timeout_ms: 10_000,
  retry_backoff_initial_ms: 100,
  retry_backoff_max_ms: 1000,
  recovery_sweep_ms: 500,
  // Archival only when a test asks for it (custody archive), or sets its own interval.
  archive_interval_ms: 0,
  shutdown_grace_ms: 10_000,
  cancel_grace_ms: 500,
};

export interface TestService {
  readonly dir: string;
  readonly paths: StatePaths;
  readonly process: ChildProcess;
  readonly port: number;
  readonly stderr: string[];
  cli(args: readonly string[]): Promise<CliResult>;
  /** `token`: 'agent' or 'control' for the state's tokens, { raw } for any other value, null for none. */
  http(method: string, route: string, body?: unknown, token?: 'agent' | 'control' | { raw: string } | null): Promise<{ status: number; body: Record<string, unknown> }>;
  /** SIGTERM and wait for the exit code. */
  stop(): Promise<number | null>;
  /** Start the service again on the same state (after a stop or a kill). */
  restart(): Promise<TestService>;
  cleanup(): void;
}

export interface ServiceOptions {
  /** custody.json content (merged over the test defaults: port 0, fast timings), or a function of the state root. */
  readonly config?: Record<string, unknown> | ((root: string) => Record<string, unknown>);
  readonly env?: NodeJS.ProcessEnv;
  /** Reuse an existing state directory instead of initializing a new one. */
  readonly dir?: string;
}

/** `parent`: where the temporary directory is made (a small filesystem, for the full-disk test). */
export async function initTestState(configOf: ServiceOptions['config'] = {}, env?: NodeJS.ProcessEnv, parent = tmpdir()): Promise<string> {
  const dir = mkdtempSync(path.join(parent, 'custody-svc-'));
  const root = path.join(dir, 'state');
  const config = typeof configOf === 'function' ? configOf(root) : configOf;
  const full = parseConfig({ port: 0, ...config, timing: { ...FAST_TIMING, ...(config.timing as object | undefined) } });
  const saved = { ...process.env };
  Object.assign(process.env, env);
  try {
    await initState(root, { config: full, log: collectingLogger().log, onChildStderr: () => undefined });
  } finally {
    for (const key of Object.keys(env ?? {})) if (!(key in saved)) delete process.env[key];
  }
  return root;
}

export async function startService(options: ServiceOptions = {}): Promise<TestService> {
  const root = options.dir ?? (await initTestState(options.config, options.env));
  const paths = statePaths(root);
  rmSync(paths.serviceJson, { force: true });
  const child = spawn(process.execPath, [CLI, 'start', '--state', root], { env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr: string[] = [];
  child.stderr.setEncoding('utf8');
  let partial = '';
  child.stderr.on('data', (chunk: string) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop() ?? '';
    stderr.push(...lines);
    if (process.env.CUSTODY_TEST_LOG) process.stderr.write(chunk);
  });
  // 'close', not 'exit': the process is gone AND its stderr is fully read.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  const port = await waitForService(paths, child, stderr);
  const token = (which: 'agent' | 'control') => readFileSync(which === 'agent' ? paths.agentToken : paths.controlToken, 'utf8').trim();
  const service: TestService = {
    dir: root,
    paths,
    process: child,
    port,
    stderr,
    cli: (args) => custody(['--state', root, ...args], { env: options.env }),
    async http(method, route, body, which = 'control') {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (which === 'agent' || which === 'control') headers.authorization = `Bearer ${token(which)}`;
      else if (which !== null) headers.authorization = `Bearer ${which.raw}`;
      const response = await fetch(`http://127.0.0.1:${port}${route}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      return { status: response.status, body: (await response.json().catch(() => ({}))) as Record<string, unknown> };
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
    restart: () => startService({ ...options, dir: root }),
    cleanup() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(path.dirname(root), { recursive: true, force: true });
    },
  };
  return service;
}

async function waitForService(paths: StatePaths, child: ChildProcess, stderr: string[]): Promise<number> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`custody start exited ${child.exitCode}:\n${stderr.slice(-20).join('\n')}`);
    if (existsSync(paths.serviceJson)) {
      const { port } = JSON.parse(readFileSync(paths.serviceJson, 'utf8')) as { port: number };
      return port;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`custody start did not come up within 30 s:\n${stderr.slice(-20).join('\n')}`);
}

/** The service's log lines (stderr) of one event, parsed. */
export function logEvents(service: Pick<TestService, 'stderr'>, event: string): Array<Record<string, unknown>> {
  return service.stderr.filter((line) => line.includes(`"event":"${event}"`)).map((line) => JSON.parse(line) as Record<string, unknown>);
}

/**
 * Run a query with the sqlite3 shell, as an operator would; returns rows as
 * objects. It waits up to 5 s for a lock (`.timeout`), as a patient operator
 * would: a store a process is opening (its WAL recovered) or closing (its
 * last checkpoint) is locked for a moment, and a reader without a busy
 * timeout is refused "database is locked" at once.
 */
export async function sqlite(file: string, sql: string): Promise<Array<Record<string, unknown>>> {
  const { stdout } = await run('sqlite3', ['-json', '-readonly', '-cmd', '.timeout 5000', file, sql]);
  return stdout.trim() === '' ? [] : (JSON.parse(stdout) as Array<Record<string, unknown>>);
}
