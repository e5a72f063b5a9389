// npm run bench:ab -- --build old=/path/to/old/dist --build new=dist
//
// Two (or more) builds compared on a shared, noisy machine: each round runs
// every build once, in turn, on a fresh state directory started by that
// build's own CLI, so that load from other work on the machine falls on all
// of them alike. What a round measures for a build: governed ops/s at each
// concurrency, CPU ms per operation per process (/proc), and the store bytes
// one operation leaves in each store, whole-file and per table and index
// (sqlite's dbstat, the service stopped so every WAL is checkpointed).
// docs/PERFORMANCE.md reads the ratios, never the lone numbers.
//
// Options: --rounds N (default 3), --ops N per load (default 600),
// --concurrency 16,64 (default), --profile DIR (node --cpu-prof of the
// supervisor, the kernel and the executor into DIR/<build>-<round>/), --json FILE,
// --node-flags name="--flag …" (node flags for that build's supervisor, kernel
// and executor: the same code under other V8 settings, as a build of its own);
// CUSTODY_AB_KEEP=1 keeps each state directory for reading.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { CustodyClient } from '../../supervisor/client/index.js';
import { benchClient, callApi, invokeNote } from './client.js';
import { cpuBetween, sampleTree, storeBytes, writtenBetween } from './procfs.js';

interface Build {
  readonly name: string;
  readonly dist: string;
  /** node flags for the build's supervisor, kernel and executor (--node-flags). */
  flags: string[];
}

const USAGE =
  'usage: node dist/scripts/bench/ab.js --build NAME=DIST [--build NAME=DIST …] [--node-flags NAME="--flag …"] [--rounds 3] [--ops 600] [--concurrency 16,64] [--profile DIR] [--json FILE]';

/** A usage error: the reason and the usage line on stderr, exit 2 (a stack trace says nothing to whoever typed the command). */
function usage(why: string): never {
  process.stderr.write(`${why}\n${USAGE}\n`);
  process.exit(2);
}

/** A whole number of at least 1, or a usage error naming the option. */
function count(option: string, text: string): number {
  const value = Number(text);
  return Number.isInteger(value) && value >= 1 ? value : usage(`${option} takes a whole number of at least 1, got ${JSON.stringify(text)}`);
}

function options() {
  const args = process.argv.slice(2);
  if (args.includes('--help')) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const builds: Build[] = [];
  let rounds = 3;
  let ops = 600;
  let concurrency = [16, 64];
  let profile: string | null = null;
  let json: string | null = null;
  for (let i = 0; i < args.length; i++) {
    const value = args[i + 1] ?? '';
    switch (args[i]) {
      case '--build': {
        const [name, dist] = value.split('=');
        if (!name || !dist) usage(`--build wants name=dist, got ${JSON.stringify(value)}`);
        builds.push({ name, dist: path.resolve(dist), flags: [] });
        break;
      }
      case '--node-flags': {
        const at = value.indexOf('=');
        const build = builds.find((b) => b.name === value.slice(0, at));
        if (at < 0 || !build) usage(`--node-flags wants name="--flag …" after --build name=…, got ${JSON.stringify(value)}`);
        build.flags = value.slice(at + 1).split(/\s+/).filter(Boolean);
        break;
      }
      case '--rounds':
        rounds = count('--rounds', value);
        break;
      case '--ops':
        ops = count('--ops', value);
        break;
      case '--concurrency':
        concurrency = value.split(',').map((part) => count('--concurrency', part));
        break;
      case '--profile':
        profile = path.resolve(value);
        break;
      case '--json':
        json = path.resolve(value);
        break;
      default:
        usage(`unknown option ${JSON.stringify(args[i])}`);
    }
    i++;
  }
  if (builds.length === 0) usage('name at least one --build name=dist');
  return { builds, rounds, ops, concurrency, profile, json };
}

interface Running {
  readonly port: number;
  readonly token: string;
  readonly process: ChildProcess;
}

async function start(build: Build, root: string, profileDir: string | null = null): Promise<Running> {
  const cli = path.join(build.dist, 'supervisor', 'cli', 'main.js');
  const prof = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, '--cpu-prof-name=supervisor.cpuprofile'] : [];
  const child = spawn(process.execPath, [...build.flags, ...prof, cli, 'start', '--state', root, '--port', '0'], { stdio: ['ignore', 'ignore', 'ignore'] });
  const serviceJson = path.join(root, 'supervisor', 'service.json');
  for (;;) {
    const written = existsSync(serviceJson) ? (JSON.parse(readFileSync(serviceJson, 'utf8')) as { pid: number; port: number }) : null;
    if (written !== null && written.pid === child.pid) {
      return { port: written.port, token: readFileSync(path.join(root, 'supervisor', 'control.token'), 'utf8').trim(), process: child };
    }
    if (child.exitCode !== null) throw new Error(`${build.name}: service exited ${child.exitCode}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

async function stop(service: Running): Promise<void> {
  if (service.process.exitCode !== null) return;
  const exited = new Promise((resolve) => service.process.once('exit', resolve));
  service.process.kill('SIGTERM');
  await exited;
}

function call(service: Running, method: 'GET' | 'POST', route: string, body?: unknown): Promise<Record<string, unknown>> {
  return callApi(benchClientOf(service), method, route, body).then((answer) => answer.body);
}

const clients = new WeakMap<Running, CustodyClient>();
/** One keep-alive client per running service (scripts/bench/client.ts). */
function benchClientOf(service: Running): CustodyClient {
  let client = clients.get(service);
  if (!client) clients.set(service, (client = benchClient(service.port, service.token)));
  return client;
}

let sequence = 0;
async function load(service: Running, total: number, concurrency: number) {
  const children = (await call(service, 'GET', '/v1/status')).children as Array<{ role: string; name: string; pid: number | null }>;
  const before = sampleTree(service.process.pid!, children);
  let next = 0;
  let completed = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next++;
        if ((await invokeNote(benchClientOf(service), `ab note ${++sequence}`)) === 'completed') completed++;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const after = sampleTree(service.process.pid!, children);
  const cpu = cpuBetween(before, after);
  const perOp = Object.fromEntries(Object.entries(cpu).map(([role, ms]) => [role, ms / Math.max(1, completed)]));
  // What each process wrote toward the disk per operation: its stores' WAL frames and checkpoints (write amplification).
  const written = Object.fromEntries(Object.entries(writtenBetween(before, after)).map(([role, bytes]) => [role, bytes / Math.max(1, completed)]));
  return { concurrency, completed, ops_per_s: completed / seconds, cpu_ms_per_op: perOp, cpu_ms_per_op_total: Object.values(perOp).reduce((a, b) => a + b, 0), written_bytes_per_op: written };
}

/** Mean units per committed transaction of each store since the service started (GET /metrics, custody_commit_batch_size). */
async function meanBatches(service: Running): Promise<Record<string, number>> {
  const response = await fetch(`http://127.0.0.1:${service.port}/metrics`, { headers: { authorization: `Bearer ${service.token}` } });
  const text = await response.text();
  const read = (suffix: string) =>
    new Map([...text.matchAll(new RegExp(`^custody_commit_batch_size_${suffix}\\{store="([^"]+)"\\} ([0-9.e+]+)$`, 'gm'))].map((m) => [m[1]!, Number(m[2])]));
  const sums = read('sum');
  const counts = read('count');
  return Object.fromEntries([...sums].map(([store, sum]) => [store, sum / Math.max(1, counts.get(store) ?? 0)]));
}

/** Bytes per table and index of every store under `root` (dbstat), by "<store>:<object>". */
function objectBytes(root: string): Record<string, number> {
  const sizes: Record<string, number> = {};
  for (const file of Object.keys(storeBytes(root))) {
    if (!file.endsWith('.db')) continue;
    const db = new Database(path.join(root, file), { readonly: true });
    try {
      for (const row of db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name').all() as Array<{ name: string; bytes: number }>) {
        sizes[`${file}:${row.name}`] = row.bytes;
      }
    } finally {
      db.close();
    }
  }
  return sizes;
}

function perOperation(after: Record<string, number>, before: Record<string, number>, ops: number): Record<string, number> {
  return Object.fromEntries(Object.keys(after).map((key) => [key, ((after[key] ?? 0) - (before[key] ?? 0)) / ops]));
}

/** Point the kernel and the executor at this build's entries under its node flags and, given a DIR, `node --cpu-prof` (kernel.argv, executors[].argv). */
function childArgv(build: Build, root: string, dir: string | null): void {
  if (dir) mkdirSync(dir, { recursive: true });
  const file = path.join(root, 'custody.json');
  const config = JSON.parse(readFileSync(file, 'utf8')) as { kernel?: Record<string, unknown>; executors?: Array<Record<string, unknown>> };
  const prof = [process.execPath, ...build.flags, ...(dir ? ['--cpu-prof', `--cpu-prof-dir=${dir}`] : [])];
  // The bundles, as the supervisor starts them by default (shared/entry-points.ts); a build before them, its modules.
  const entry = (bundle: string, module: string) => (existsSync(path.join(build.dist, 'bundle', bundle)) ? path.join(build.dist, 'bundle', bundle) : path.join(build.dist, module));
  config.kernel = { ...(config.kernel ?? {}), argv: [...prof, entry('kernel.js', 'kernel-proc/main.js'), '--dir', path.join(root, 'kernel')] };
  config.executors = (config.executors ?? [{ name: 'default' }]).map((executor) => ({
    ...executor,
    argv: [
      ...prof,
      entry('executor.js', 'executor-proc/main.js'),
      '--dir',
      path.join(root, 'executors', String(executor.name)),
      '--resources',
      path.join(root, 'resources'),
    ],
  }));
  writeFileSync(file, JSON.stringify(config, null, 2));
}

async function round(build: Build, index: number, ops: number, concurrency: readonly number[], profile: string | null) {
  const dir = mkdtempSync(path.join(tmpdir(), `custody-ab-${build.name}-`));
  const root = path.join(dir, 'state');
  let service = await start(build, root);
  try {
    await call(service, 'POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000_000, ttl_ms: 3_600_000 });
    await load(service, 30, 4);
    await stop(service);
    const profileDir = profile ? path.join(profile, `${build.name}-${index}`) : null;
    if (profileDir || build.flags.length > 0) childArgv(build, root, profileDir);
    const filesBefore = storeBytes(root);
    const objectsBefore = objectBytes(root);
    service = await start(build, root, profileDir);
    const loads = [];
    for (const c of concurrency) loads.push(await load(service, ops, c));
    const batches = await meanBatches(service);
    await stop(service);
    const measured = loads.reduce((n, l) => n + l.completed, 0);
    return {
      build: build.name,
      round: index,
      loads,
      mean_commit_batch: batches,
      store_bytes_per_op: perOperation(storeBytes(root), filesBefore, measured),
      object_bytes_per_op: perOperation(objectBytes(root), objectsBefore, measured),
    };
  } finally {
    await stop(service);
    if (process.env.CUSTODY_AB_KEEP) process.stdout.write(`kept ${root}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

type Round = Awaited<ReturnType<typeof round>>;

const { builds, rounds, ops, concurrency, profile, json } = options();
const results: Round[] = [];
const out = (line = '') => process.stdout.write(line + '\n');
for (let r = 0; r < rounds; r++) {
  // Alternate the order too: the first build of a round is not always the same one.
  const order = r % 2 === 0 ? builds : [...builds].reverse();
  for (const build of order) {
    const result = await round(build, r, ops, concurrency, profile);
    results.push(result);
    const loads = result.loads.map((l) => `${l.concurrency}: ${l.ops_per_s.toFixed(1)} ops/s, CPU ${l.cpu_ms_per_op_total.toFixed(2)} ms/op (${Object.entries(l.cpu_ms_per_op).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')})`);
    out(`round ${r} ${build.name}: ${loads.join(' | ')}; mean commit batch ${JSON.stringify(result.mean_commit_batch)}`);
  }
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
out('\nmeans over rounds');
for (const build of builds) {
  const mine = results.filter((r) => r.build === build.name);
  for (const c of concurrency) {
    const at = mine.map((r) => r.loads.find((l) => l.concurrency === c)!);
    const roles = [...new Set(at.flatMap((l) => Object.keys(l.cpu_ms_per_op)))].sort();
    const cpu = roles.map((role) => `${role} ${mean(at.map((l) => l.cpu_ms_per_op[role] ?? 0)).toFixed(2)}`).join(', ');
    out(`  ${build.name} ${c} in flight: ${mean(at.map((l) => l.ops_per_s)).toFixed(1)} ops/s, CPU ${mean(at.map((l) => l.cpu_ms_per_op_total)).toFixed(2)} ms/op (${cpu})`);
    const written = roles.map((role) => `${role} ${mean(at.map((l) => l.written_bytes_per_op[role] ?? 0)).toFixed(0)}`).join(', ');
    out(`    written toward the disk, bytes/op: ${written}`);
  }
  const files = [...new Set(mine.flatMap((r) => Object.keys(r.store_bytes_per_op)))].filter((f) => f.endsWith('.db')).sort();
  out(`  ${build.name} store bytes/op (file, WAL checkpointed): ${files.map((f) => `${f} ${mean(mine.map((r) => r.store_bytes_per_op[f] ?? 0)).toFixed(0)}`).join(', ')}`);
  const objects = [...new Set(mine.flatMap((r) => Object.keys(r.object_bytes_per_op)))].sort();
  for (const o of objects) {
    const v = mean(mine.map((r) => r.object_bytes_per_op[o] ?? 0));
    if (Math.abs(v) >= 20) out(`    ${o} ${v.toFixed(0)}`);
  }
}
if (builds.length >= 2) {
  const [first, ...rest] = builds;
  out(`\nratios against ${first!.name} (per round, then the mean)`);
  for (const other of rest) {
    for (const c of concurrency) {
      const ratios = [];
      const cpuRatios = [];
      for (let r = 0; r < rounds; r++) {
        const a = results.find((x) => x.build === first!.name && x.round === r)!.loads.find((l) => l.concurrency === c)!;
        const b = results.find((x) => x.build === other.name && x.round === r)!.loads.find((l) => l.concurrency === c)!;
        ratios.push(b.ops_per_s / a.ops_per_s);
        cpuRatios.push(b.cpu_ms_per_op_total / a.cpu_ms_per_op_total);
      }
      out(`  ${other.name}/${first!.name} ${c} in flight: ops/s ${ratios.map((x) => x.toFixed(2)).join(' ')} (mean ${mean(ratios).toFixed(2)}), CPU/op ${cpuRatios.map((x) => x.toFixed(2)).join(' ')} (mean ${mean(cpuRatios).toFixed(2)})`);
    }
  }
}
if (json) {
  writeFileSync(json, JSON.stringify({ measured_at: new Date().toISOString(), rounds, ops, concurrency, results }, null, 2) + '\n');
  out(`wrote ${json}`);
}
if (profile) out(`profiles in ${profile}/<build>-<round>/ (${readdirSync(profile).length} directories)`);
