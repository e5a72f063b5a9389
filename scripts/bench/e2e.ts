// End-to-end measurements (ARCHITECTURE.md §13), in one run, each beside the limit it
// runs against: durable SQLite commits/s on this machine (the floor every
// governed operation pays several times), then governed operations through
// the real service: sequential and concurrent throughput with latency
// percentiles, cold start, the time from `kill -9` of the supervisor to the
// next one serving, and the time from `kill -9` of the executor to the next
// completed operation. Ratios, not lone numbers.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { programPath } from '../../shared/entry-points.js';
import { createLogger } from '../../shared/log.js';
import { parseConfig } from '../../supervisor/config/load.js';
import { initState } from '../../supervisor/init.js';
import { statePaths } from '../../supervisor/paths.js';
import type { CustodyClient } from '../../supervisor/client/index.js';
import { benchClient, callApi, invokeNote, ownCpuMs } from './client.js';
import { cpuBetween, reapedChildrenCpuMs, rssByRole, sampleTree, storeBytes } from './procfs.js';
import { seedHistory } from './seed.js';
import { signedBytes } from './signed-bytes.js';

const CLI = programPath('custody');

/** Durable commits of `rows` rows each (WAL, synchronous=FULL): transactions and rows per second. */
export function measureSqliteCommits(ms: number, rows = 1): { rows_per_tx: number; tx_per_s: number; rows_per_s: number } {
  const dir = mkdtempSync(path.join(tmpdir(), 'custody-bench-sqlite-'));
  const db = new Database(path.join(dir, 'bench.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO t (payload) VALUES (?)');
  const commit = db.transaction((payload: string) => {
    for (let i = 0; i < rows; i++) insert.run(payload);
  });
  const payload = 'x'.repeat(200);
  let count = 0;
  const started = performance.now();
  while (performance.now() - started < ms) {
    commit(payload);
    count++;
  }
  const seconds = (performance.now() - started) / 1000;
  db.close();
  rmSync(dir, { recursive: true, force: true });
  return { rows_per_tx: rows, tx_per_s: count / seconds, rows_per_s: (count * rows) / seconds };
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

interface Running {
  readonly root: string;
  readonly port: number;
  readonly token: string;
  readonly process: ChildProcess;
  readonly coldStartMs: number;
  /** custody's typed client (scripts/bench/client.ts). */
  readonly client: CustodyClient;
}

/** `custody start` on a state, once it serves (its own service.json written). */
export async function startService(root: string): Promise<Running> {
  const paths = statePaths(root);
  const started = performance.now();
  const child = spawn(process.execPath, [CLI, 'start', '--state', root], { stdio: ['ignore', 'ignore', 'ignore'] });
  let port: number;
  for (;;) {
    // A predecessor killed with -9 leaves its service.json: wait for this process's own.
    const written = existsSync(paths.serviceJson) ? (JSON.parse(readFileSync(paths.serviceJson, 'utf8')) as { pid: number; port: number }) : null;
    if (written !== null && written.pid === child.pid) {
      port = written.port;
      break;
    }
    if (child.exitCode !== null) throw new Error(`service exited ${child.exitCode}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const coldStartMs = performance.now() - started;
  const token = readFileSync(paths.controlToken, 'utf8').trim();
  return { root, port, token, process: child, coldStartMs, client: benchClient(port, token) };
}

/**
 * A new state in a temporary folder, initialized with `settings` (as
 * custody.json holds them), started, and granted review-notes/* for
 * millions of invokes: the service the one-question benches load.
 * `remove` stops it and deletes the folder.
 */
export async function startGrantedService(prefix: string, settings: Record<string, unknown>): Promise<{ service: Running; remove: () => Promise<void> }> {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  const root = path.join(dir, 'state');
  await initState(root, { config: parseConfig({ port: 0, ...settings }), log: createLogger({}, { level: 'error' }), onChildStderr: () => undefined });
  const service = await startService(root);
  const remove = async () => {
    await stopService(service);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await callApi(service.client, 'POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000_000, ttl_ms: 3_600_000 });
  } catch (error) {
    await remove();
    throw error;
  }
  return { service, remove };
}

function call(service: Running, method: 'GET' | 'POST', route: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  return callApi(service.client, method, route, body);
}

let sequence = 0;
async function invokeOnce(service: Running): Promise<{ ms: number; startedAt: number; outcome: unknown }> {
  const started = performance.now();
  const outcome = await invokeNote(service.client, `bench note ${++sequence}`);
  return { ms: performance.now() - started, startedAt: started, outcome };
}

async function childrenOf(service: Running): Promise<Array<{ role: string; name: string; pid: number | null }>> {
  const status = await call(service, 'GET', '/v1/status');
  return status.body.children as Array<{ role: string; name: string; pid: number | null }>;
}

async function runLoad(service: Running, total: number, concurrency: number) {
  const latencies: number[] = [];
  let failures = 0;
  let next = 0;
  const children = await childrenOf(service);
  const before = sampleTree(service.process.pid!, children);
  const clientBefore = ownCpuMs();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next++;
        const { ms, outcome } = await invokeOnce(service);
        if (outcome === 'completed') latencies.push(ms);
        else failures++;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const after = sampleTree(service.process.pid!, children);
  const clientCpuMs = ownCpuMs() - clientBefore;
  latencies.sort((a, b) => a - b);
  const cpu = cpuBetween(before, after);
  const completed = Math.max(1, latencies.length);
  const cpuPerOp = Object.fromEntries(Object.entries(cpu).map(([role, ms]) => [role, ms / completed]));
  return {
    concurrency,
    operations: total,
    failures,
    ops_per_s: latencies.length / seconds,
    p50_ms: percentile(latencies, 50),
    p95_ms: percentile(latencies, 95),
    p99_ms: percentile(latencies, 99),
    /** CPU ms per completed operation, by process (from /proc utime+stime, 10 ms ticks). */
    cpu_ms_per_op: cpuPerOp,
    cpu_ms_per_op_total: Object.values(cpuPerOp).reduce((a, b) => a + b, 0),
    /** CPU ms per operation of the load generator (this process, custody's typed client): on the same cores, not in the total. */
    client_cpu_ms_per_op: clientCpuMs / completed,
    rss_bytes: rssByRole(after),
  };
}

export type LoadResult = Awaited<ReturnType<typeof runLoad>>;

/**
 * kill -9 the executor while operations stream; time until the first
 * operation started after the kill completes (operations already past their
 * execute when the kill landed do not count: they never needed the executor).
 */
async function measureKillToRecovered(service: Running): Promise<{ kill_to_next_completed_ms: number; outcomes: Record<string, number> }> {
  const status = await call(service, 'GET', '/v1/status');
  const executor = (status.body.children as Array<{ role: string; pid: number }>).find((c) => c.role === 'executor')!;
  const outcomes: Record<string, number> = {};
  let killedAt = 0;
  let recoveredAt = 0;
  let stop = false;
  const stream = async () => {
    while (!stop) {
      const { outcome, startedAt } = await invokeOnce(service);
      const key = String(outcome);
      outcomes[key] = (outcomes[key] ?? 0) + 1;
      if (killedAt > 0 && startedAt >= killedAt && outcome === 'completed' && recoveredAt === 0) recoveredAt = performance.now();
    }
  };
  const workers = [stream(), stream(), stream(), stream()];
  await new Promise((resolve) => setTimeout(resolve, 500));
  killedAt = performance.now();
  process.kill(executor.pid, 'SIGKILL');
  while (recoveredAt === 0) await new Promise((resolve) => setTimeout(resolve, 5));
  stop = true;
  await Promise.all(workers);
  return { kill_to_next_completed_ms: recoveredAt - killedAt, outcomes };
}

/** Time from a `custody start` on a provisioned state to the API answering (best of three). */
async function measureColdStart(root: string): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 3; i++) {
    const service = await startService(root);
    times.push(service.coldStartMs);
    service.process.kill('SIGTERM');
    await new Promise((resolve) => service.process.once('exit', resolve));
  }
  return Math.min(...times);
}

/**
 * kill -9 of the supervisor (its children left running, as a crash leaves
 * them), then `custody start` on the same state, as a service manager would:
 * time from the kill to the new service answering /v1/health, which it does
 * only after killing the predecessor's children, taking the state lock and
 * starting fresh children. Best of three.
 */
export async function measureSupervisorKillToServing(root: string): Promise<{ best_ms: number; trials_ms: number[] }> {
  const trials: number[] = [];
  let service = await startService(root);
  for (let i = 0; i < 3; i++) {
    await call(service, 'POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: `before kill ${i}` } });
    const exited = new Promise((resolve) => service.process.once('exit', resolve));
    const killedAt = performance.now();
    service.process.kill('SIGKILL');
    await exited;
    service = await startService(root);
    while ((await call(service, 'GET', '/v1/health')).status !== 200) await new Promise((resolve) => setTimeout(resolve, 5));
    trials.push(performance.now() - killedAt);
  }
  service.process.kill('SIGTERM');
  await new Promise((resolve) => service.process.once('exit', resolve));
  return { best_ms: Math.min(...trials), trials_ms: trials };
}

/**
 * A client command through the CLI, as an agent calling `custody` per tool
 * call runs it: `custody status` against the running service, `calls` times,
 * each a new Node process (docs/PERFORMANCE.md "CLI start"). Wall time per
 * call (median) and the CPU of the CLI process (every thread).
 */
function measureCliCall(service: Running, calls: number): { calls: number; p50_ms: number; cpu_ms_per_call: number } {
  const walls: number[] = [];
  const cpuBefore = reapedChildrenCpuMs();
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    const run = spawnSync(process.execPath, [CLI, '--state', service.root, 'status', '--json'], { stdio: ['ignore', 'ignore', 'pipe'] });
    walls.push(performance.now() - started);
    if (run.status !== 0) throw new Error(`custody status exited ${run.status}: ${run.stderr.toString()}`);
  }
  return { calls, p50_ms: percentile(walls.sort((a, b) => a - b), 50), cpu_ms_per_call: (reapedChildrenCpuMs() - cpuBefore) / calls };
}

export async function stopService(service: Running): Promise<void> {
  service.process.kill('SIGTERM');
  await new Promise((resolve) => service.process.once('exit', resolve));
}

const sum = (sizes: Record<string, number>) => Object.values(sizes).reduce((a, b) => a + b, 0);

/** Fresh and long-history loads, alternated this many times each. */
const LONG_HISTORY_ROUNDS = 3;

/**
 * Every end-to-end figure in one run on one state: cold start, supervisor
 * kill-to-serving, governed load at 1, 16 and 64 in flight (latency, CPU per
 * process, RSS), store bytes per operation (the stores measured with the
 * service stopped, so WAL files are checkpointed), then `history` operations
 * seeded on the same grant (seed.ts) and the 16-in-flight load on it,
 * alternated with the same load on a fresh state, and last the executor
 * kill-to-next-completed.
 */
export async function measureEndToEnd(scale = 1, history = 100_000) {
  const dir = mkdtempSync(path.join(tmpdir(), 'custody-bench-e2e-'));
  const root = path.join(dir, 'state');
  const config = parseConfig({ port: 0, timing: { retry_backoff_initial_ms: 50, retry_backoff_max_ms: 500, recovery_sweep_ms: 1000 } });
  await initState(root, { config, log: createLogger({}, { level: 'error' }), onChildStderr: () => undefined });
  const coldStartMs = await measureColdStart(root);
  const supervisorRestart = await measureSupervisorKillToServing(root);
  let service = await startService(root);
  try {
    const grant = await call(service, 'POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000_000, ttl_ms: 3_600_000 });
    const capabilityId = String(grant.body.capability_id);
    await runLoad(service, 20, 1);
    await stopService(service);
    const bytesBefore = storeBytes(root);
    const signedBefore = signedBytes(root);
    service = await startService(root);
    // The first operations after a start run on cold code (V8 optimizes what
    // runs often; docs/PERFORMANCE.md "Cold and warm"): measured apart, then a
    // warm-up nobody measures, so the 1-in-flight figures are a running
    // service's, as the 16 and 64 ones after them always were.
    const cold = await runLoad(service, Math.round(100 * scale), 1);
    const warmUp = Math.round(500 * scale);
    await runLoad(service, warmUp, 16);
    const sequential = await runLoad(service, Math.round(300 * scale), 1);
    const concurrent = await runLoad(service, Math.round(1000 * scale), 16);
    const wide = await runLoad(service, Math.round(1500 * scale), 64);
    // The same load again, some 3,400 operations after the start: the figure a
    // service that has run a while gives, its hot code optimized (docs/PERFORMANCE.md
    // "Stop 28: optimized sooner"). Printed beside the first, never instead of it.
    const sinceStart = cold.operations + warmUp + sequential.operations + concurrent.operations + wide.operations;
    const wideWarm = { ...(await runLoad(service, Math.round(3000 * scale), 64)), operations_before: sinceStart };
    const measured = sinceStart + wideWarm.operations;
    const cliCall = measureCliCall(service, 20);
    await stopService(service);
    const bytesAfter = storeBytes(root);
    const perStore = Object.fromEntries(Object.keys(bytesAfter).map((file) => [file, ((bytesAfter[file] ?? 0) - (bytesBefore[file] ?? 0)) / measured]));
    // Of those bytes, the signed artifacts kept as their exact bytes (scripts/bench/signed-bytes.ts): what no schema change can take away.
    const signedAfter = signedBytes(root);
    const signedPerStore = Object.fromEntries(Object.keys(signedAfter).map((file) => [file, ((signedAfter[file] ?? 0) - (signedBefore[file] ?? 0)) / measured]));
    const storage = {
      operations: measured,
      bytes_per_op: (sum(bytesAfter) - sum(bytesBefore)) / measured,
      bytes_per_op_by_store: perStore,
      bytes_after: bytesAfter,
      signed_bytes_per_op: (sum(signedAfter) - sum(signedBefore)) / measured,
      signed_bytes_per_op_by_store: signedPerStore,
    };
    // The long-history ratio: loads taken the same way (a started service,
    // the same unmeasured warm-up, then 16 in flight) on a fresh state and
    // on this one after the seeded history, alternated so that the machine's
    // drift falls on both sides alike (docs/PERFORMANCE.md "The seeded history").
    const freshRoot = path.join(dir, 'fresh');
    await initState(freshRoot, { config, log: createLogger({}, { level: 'error' }), onChildStderr: () => undefined });
    const loadOn = async (at: string, grantFirst: boolean) => {
      service = await startService(at);
      const startMs = service.coldStartMs;
      if (grantFirst) await call(service, 'POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000_000, ttl_ms: 3_600_000 });
      await runLoad(service, warmUp, 16);
      return { ...(await runLoad(service, Math.round(1000 * scale), 16)), start_ms: startMs };
    };
    const seeded = seedHistory(statePaths(root), capabilityId, history);
    const rounds: Array<{ fresh: Awaited<ReturnType<typeof loadOn>>; history: Awaited<ReturnType<typeof loadOn>> }> = [];
    for (let round = 0; round < LONG_HISTORY_ROUNDS; round++) {
      const fresh = await loadOn(freshRoot, round === 0);
      await stopService(service);
      // The last one stays up: the executor kill below runs on it.
      const onHistory = await loadOn(root, false);
      if (round < LONG_HISTORY_ROUNDS - 1) await stopService(service);
      rounds.push({ fresh, history: onHistory });
    }
    const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    const longHistory = {
      seeded_operations: history,
      seed_seconds: seeded.seconds,
      rounds: rounds.map((r) => ({
        fresh_ops_per_s: r.fresh.ops_per_s,
        history_ops_per_s: r.history.ops_per_s,
        ratio: r.history.ops_per_s / r.fresh.ops_per_s,
        fresh_start_ms: r.fresh.start_ms,
        history_start_ms: r.history.start_ms,
      })),
      ratio: mean(rounds.map((r) => r.history.ops_per_s)) / mean(rounds.map((r) => r.fresh.ops_per_s)),
      // `custody start` to the API answering, on each side: a start walks past none of the history (docs/PERFORMANCE.md "History on the start path").
      start_ratio: mean(rounds.map((r) => r.history.start_ms)) / mean(rounds.map((r) => r.fresh.start_ms)),
      before_history: rounds[rounds.length - 1]!.fresh,
      ...rounds[rounds.length - 1]!.history,
    };
    const recovery = await measureKillToRecovered(service);
    return { cold_start_ms: coldStartMs, supervisor_kill_to_serving: supervisorRestart, cli_call: cliCall, sequential_cold: cold, sequential, concurrent, wide, wide_warm: wideWarm, storage, long_history: longHistory, recovery };
  } finally {
    if (service.process.exitCode === null && service.process.signalCode === null) await stopService(service);
    rmSync(dir, { recursive: true, force: true });
  }
}
