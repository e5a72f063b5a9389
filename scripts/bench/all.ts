// npm run bench — every measurement in one run, each beside its baseline:
// the wire (raw JSON lines vs authenticated frames), Ed25519 per backend,
// durable SQLite commits, and governed operations end to end. Prints a
// summary and writes bench-results/bench.json. Nothing here is a test.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { measureEd25519 } from './ed25519.js';
import { measureEndToEnd, measureSqliteCommits } from './e2e.js';
import { RESULTS_DIR, measureWire, printWire } from './wire.js';

const scale = Number(process.env.CUSTODY_BENCH_SCALE ?? '1') || 1;
const out = (line = '') => process.stdout.write(line + '\n');

const wire = await measureWire(scale);
printWire(wire);
const ed25519 = measureEd25519(1500);
out('\nEd25519 per second');
for (const row of ed25519) out(`  ${row.backend.padEnd(6)} ${row.op.padEnd(7)} ${row.perSecond.toFixed(0).padStart(9)}`);
const sqliteCommits = measureSqliteCommits(2000);
out(`\ndurable SQLite commits/s (WAL, synchronous=FULL): ${sqliteCommits.toFixed(0)}`);
const e2e = await measureEndToEnd(scale);
out(`\ncold start (custody start → API up, best of 3): ${e2e.cold_start_ms.toFixed(0)} ms`);
out(`supervisor kill -9 → next custody start serving (best of 3): ${e2e.supervisor_kill_to_serving.best_ms.toFixed(0)} ms (trials ${e2e.supervisor_kill_to_serving.trials_ms.map((ms) => ms.toFixed(0)).join(', ')})`);
for (const load of [e2e.sequential, e2e.concurrent]) {
  out(
    `governed ops, ${String(load.concurrency).padStart(2)} in flight: ${load.ops_per_s.toFixed(1)} ops/s, p50 ${load.p50_ms.toFixed(1)} ms, ` +
      `p95 ${load.p95_ms.toFixed(1)} ms, p99 ${load.p99_ms.toFixed(1)} ms (${load.failures} not completed)`,
  );
}
const fastest = Math.max(e2e.sequential.ops_per_s, e2e.concurrent.ops_per_s);
out(`ratio governed ops/s over durable commits/s: ${(fastest / sqliteCommits).toFixed(3)} (best of sequential and concurrent)`);
out(`ratio concurrent over sequential: ${(e2e.concurrent.ops_per_s / e2e.sequential.ops_per_s).toFixed(2)}`);
out(`kill -9 of the executor → first operation started after it completed: ${e2e.recovery.kill_to_next_completed_ms.toFixed(0)} ms; outcomes ${JSON.stringify(e2e.recovery.outcomes)}`);

mkdirSync(RESULTS_DIR, { recursive: true });
const file = path.join(RESULTS_DIR, 'bench.json');
writeFileSync(file, JSON.stringify({ measured_at: new Date().toISOString(), node: process.version, scale, wire, ed25519, sqlite_commits_per_s: sqliteCommits, e2e }, null, 2) + '\n');
out(`\nwrote ${file}`);
