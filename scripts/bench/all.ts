// npm run bench — every measurement in one run, each beside the limit it runs
// against: the machine's primitives (durable commits at 1/16/64 rows per
// transaction, Ed25519, authenticated frames one way and as round trips, the
// strict decode of a frame against JSON.parse),
// the ceiling they imply for one governed operation, and governed operations
// through the real service (1, 16 and 64 in flight, CPU per process, RSS,
// store bytes per operation, after a long history, kill-to-serving,
// kill-to-next-completed, cold start).
// `--json` also writes bench-results/bench.json. docs/PERFORMANCE.md explains
// every figure. Nothing here is a test: nothing asserts a speed.
//
// CUSTODY_BENCH_SCALE scales the operation counts (default 1);
// CUSTODY_BENCH_HISTORY is the number of operations seeded on the grant
// before the long-history load (default 100000).
import { availableParallelism } from 'node:os';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { measureDecode } from './decode.js';
import { measureEd25519 } from './ed25519.js';
import { type LoadResult, measureEndToEnd, measureSqliteCommits } from './e2e.js';
import { RESULTS_DIR, measureWire, printWire } from './wire.js';
import { scriptArgs } from './args.js';

const scale = Number(process.env.CUSTODY_BENCH_SCALE ?? '1') || 1;
const history = Number(process.env.CUSTODY_BENCH_HISTORY ?? '100000');
const json = scriptArgs('usage: node dist/scripts/bench/all.js [--json]   (npm run bench -- --json)', { switches: ['--json'] }).switches.has('--json');
const out = (line = '') => process.stdout.write(line + '\n');

/**
 * The work of one governed operation (README "How one request flows";
 * docs/PERFORMANCE.md counts them): durable commits over the three stores
 * and the adapter's journal, Ed25519 signatures and verifications, and
 * authenticated frames on the two channels.
 */
export const WORK_PER_OPERATION = { commits: 13, signatures: 5, verifications: 3, frames: 8 };

const wire = await measureWire(scale);
printWire(wire);
const ed25519 = measureEd25519(1500);
out('\nEd25519 per second');
for (const row of ed25519) out(`  ${row.backend.padEnd(6)} ${row.op.padEnd(7)} ${row.perSecond.toFixed(0).padStart(9)}`);
const decode = measureDecode(500);
out('\nstrict frame decode (decodeJsonObject) against JSON.parse of the same bytes');
for (const row of decode) out(`  ${row.frame.padEnd(46)} ${String(row.bytes).padStart(5)} B: ${row.strict_us.toFixed(2).padStart(6)} µs, JSON.parse ${row.json_parse_us.toFixed(2)} µs (${(row.strict_us / row.json_parse_us).toFixed(1)} ×)`);
const commits = [1, 16, 64].map((rows) => measureSqliteCommits(1500, rows));
out('\ndurable SQLite commits (WAL, synchronous=FULL)');
for (const c of commits) out(`  ${String(c.rows_per_tx).padStart(2)} rows/tx: ${c.tx_per_s.toFixed(0).padStart(6)} tx/s, ${c.rows_per_s.toFixed(0).padStart(7)} rows/s`);

const rate = (op: string) => ed25519.find((row) => row.backend === 'node' && row.op === op)!.perSecond;
const frameRate = wire.rows.find((row) => row.mode === 'auth' && row.body_bytes === 200)!.frames_per_s;
const oneCommitMs = 1000 / commits[0]!.tx_per_s;
const cores = availableParallelism();
const w = WORK_PER_OPERATION;
const cryptoAndFramesMs = (w.signatures / rate('sign') + w.verifications / rate('verify') + w.frames / frameRate) * 1000;
// Grouped: each commit shares a 64-row transaction; the CPU work spreads over the cores.
const groupedMsPerOp = (w.commits * 1000) / commits[2]!.rows_per_s + cryptoAndFramesMs;
const ceiling = {
  formula:
    'ceiling ops/s = cores / (C / rows_per_s(64 rows/tx) + S / sign_per_s + V / verify_per_s + F / frames_per_s); ' +
    'latency floor (1 in flight) = C / tx_per_s(1 row/tx) + S / sign_per_s + V / verify_per_s + F / frames_per_s',
  work: w,
  cores,
  ops_per_s: (cores * 1000) / groupedMsPerOp,
  latency_floor_ms: w.commits * oneCommitMs + cryptoAndFramesMs,
  one_commit_ms: oneCommitMs,
};
out(`\nceiling for one governed operation (C=${w.commits} commits, S=${w.signatures} signs, V=${w.verifications} verifies, F=${w.frames} frames, ${cores} cores)`);
out(`  ${ceiling.formula}`);
out(`  ceiling ${ceiling.ops_per_s.toFixed(0)} ops/s; latency floor ${ceiling.latency_floor_ms.toFixed(2)} ms; one durable commit ${oneCommitMs.toFixed(3)} ms`);

const e2e = await measureEndToEnd(scale, history);
const roles = (record: Record<string, number>, unit: (n: number) => string) =>
  Object.entries(record).sort(([a], [b]) => a.localeCompare(b)).map(([role, n]) => `${role} ${unit(n)}`).join(', ');
const mb = (n: number) => `${(n / 1048576).toFixed(1)} MB`;
const printLoad = (label: string, load: LoadResult) => {
  out(
    `${label}: ${load.ops_per_s.toFixed(1)} ops/s (${(load.ops_per_s / ceiling.ops_per_s).toFixed(3)} × ceiling), p50 ${load.p50_ms.toFixed(1)} ms ` +
      `(${(load.p50_ms / oneCommitMs).toFixed(0)} × one commit), p95 ${load.p95_ms.toFixed(1)} ms, p99 ${load.p99_ms.toFixed(1)} ms (${(load.p99_ms / load.p50_ms).toFixed(2)} × p50), ${load.failures} not completed`,
  );
  out(
    `    CPU ms/op ${load.cpu_ms_per_op_total.toFixed(2)}: ${roles(load.cpu_ms_per_op, (n) => n.toFixed(2))}; ` +
      `the load generator (custody's client, on the same cores, not in the total) ${load.client_cpu_ms_per_op.toFixed(2)}`,
  );
  out(`    RSS: ${roles(load.rss_bytes, mb)}`);
};
out(`\ncold start (custody start → API up, best of 3): ${e2e.cold_start_ms.toFixed(0)} ms`);
out(`supervisor kill -9 → next custody start serving (best of 3): ${e2e.supervisor_kill_to_serving.best_ms.toFixed(0)} ms (trials ${e2e.supervisor_kill_to_serving.trials_ms.map((ms) => ms.toFixed(0)).join(', ')})`);
out(`custody status through the CLI (a new process per call, ${e2e.cli_call.calls} calls): p50 ${e2e.cli_call.p50_ms.toFixed(0)} ms, CPU ${e2e.cli_call.cpu_ms_per_call.toFixed(0)} ms per call`);
printLoad(`governed ops,  1 in flight, the first ${e2e.sequential_cold.operations} after a start (cold code)`, e2e.sequential_cold);
for (const load of [e2e.sequential, e2e.concurrent, e2e.wide]) printLoad(`governed ops, ${String(load.concurrency).padStart(2)} in flight`, load);
printLoad(`governed ops, 64 in flight, warm (the same load again, after ${e2e.wide_warm.operations_before} operations since the start)`, e2e.wide_warm);
const long = e2e.long_history;
printLoad(`after ${long.seeded_operations} operations on the grant (seeded in ${long.seed_seconds.toFixed(1)} s), 16 in flight`, long);
out(
  `  long history over fresh (16 in flight, each after a start and the same warm-up, ${long.rounds.length} rounds alternated): ${long.ratio.toFixed(3)} (per round ${long.rounds.map((r) => `${r.history_ops_per_s.toFixed(1)}/${r.fresh_ops_per_s.toFixed(1)}`).join(', ')} ops/s)`,
);
out(
  `  start → serving, long history over fresh: ${long.start_ratio.toFixed(3)} (per round ${long.rounds.map((r) => `${r.history_start_ms.toFixed(0)}/${r.fresh_start_ms.toFixed(0)}`).join(', ')} ms)`,
);
out(`store bytes per operation: ${e2e.storage.bytes_per_op.toFixed(0)} (${roles(e2e.storage.bytes_per_op_by_store, (n) => n.toFixed(0))}) over ${e2e.storage.operations} operations`);
out(
  `  of which signed artifacts kept as their exact bytes: ${e2e.storage.signed_bytes_per_op.toFixed(0)} (${roles(e2e.storage.signed_bytes_per_op_by_store, (n) => n.toFixed(0))}), ${(e2e.storage.signed_bytes_per_op / e2e.storage.bytes_per_op).toFixed(2)} of the whole`,
);
out(`kill -9 of the executor → first operation started after it completed: ${e2e.recovery.kill_to_next_completed_ms.toFixed(0)} ms; outcomes ${JSON.stringify(e2e.recovery.outcomes)}`);

if (json) {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, 'bench.json');
  writeFileSync(
    file,
    JSON.stringify({ measured_at: new Date().toISOString(), node: process.version, scale, wire, ed25519, decode, sqlite_commits: commits, ceiling, e2e }, null, 2) + '\n',
  );
  out(`\nwrote ${file}`);
}
