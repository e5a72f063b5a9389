// CPU profiles of every process under a governed load (docs/PERFORMANCE.md
// "Profiling"): the supervisor runs under `node --cpu-prof`, the kernel and
// the executor through their configurable argv, `ops` invokes of
// review-notes/append at `in-flight` clients, then a graceful stop writes the
// profiles. Prints each process's busy time and its heaviest functions by
// self time, per operation, so a change can be judged where it lands.
//
//   node dist/scripts/bench/profile.js [--ops 800] [--in-flight 16] [--top 15] [--keep DIR]
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createLogger } from '../../shared/log.js';
import { parseConfig } from '../../supervisor/config/load.js';
import { initState } from '../../supervisor/init.js';
import { statePaths } from '../../supervisor/paths.js';
import { programPath } from '../../shared/entry-points.js';
import { benchClient, callApi, invokeNote } from './client.js';
import { heaviest, summarizeProfile } from './cpuprofile.js';

const CLI_ENTRY = programPath('custody');

function summarize(file: string, label: string, operations: number, top: number): string {
  const summary = summarizeProfile(file);
  const busy = summary.all - summary.idle;
  const lines = [`${label}: sampled ${summary.all.toFixed(0)} ms, busy ${busy.toFixed(0)} ms = ${(busy / operations).toFixed(3)} ms/op`];
  for (const [name, ms] of heaviest(summary, top)) lines.push(`  ${(ms / operations).toFixed(3).padStart(7)} ms/op  ${name}`);
  return lines.join('\n');
}

const USAGE = 'usage: node dist/scripts/bench/profile.js [--ops 800] [--in-flight 16] [--top 15] [--keep DIR]';

/** The options, or a usage line on stderr and exit 2 (exit 0 for --help). */
function options(): { operations: number; inFlight: number; top: number; keep: string | undefined } {
  const fail = (why: string): never => {
    process.stderr.write(`${why}\n${USAGE}\n`);
    process.exit(2);
  };
  let values;
  try {
    ({ values } = parseArgs({ options: { ops: { type: 'string', default: '800' }, 'in-flight': { type: 'string', default: '16' }, top: { type: 'string', default: '15' }, keep: { type: 'string' }, help: { type: 'boolean' } } }));
  } catch (error) {
    return fail(error instanceof Error ? error.message : String(error));
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const count = (flag: string, text: string): number => {
    const value = Number(text);
    return Number.isInteger(value) && value >= 1 ? value : fail(`--${flag} takes a whole number of at least 1, got ${text}`);
  };
  return { operations: count('ops', values.ops), inFlight: count('in-flight', values['in-flight']), top: count('top', values.top), keep: values.keep };
}

async function main(): Promise<void> {
  const values = options();
  const { operations, inFlight } = values;
  const dir = mkdtempSync(path.join(tmpdir(), 'custody-profile-'));
  const profiles = values.keep ?? path.join(dir, 'profiles');
  mkdirSync(profiles, { recursive: true });
  const root = path.join(dir, 'state');
  const paths = statePaths(root);
  const prof = ['--cpu-prof', `--cpu-prof-dir=${profiles}`];
  const config = parseConfig({
    port: 0,
    kernel: { argv: [process.execPath, ...prof, programPath('kernel'), '--dir', paths.kernelDir] },
    executors: [{ name: 'default', argv: [process.execPath, ...prof, programPath('executor'), '--dir', paths.executorDir('default'), '--resources', paths.resourcesDir] }],
  });
  await initState(root, { config, log: createLogger({}, { level: 'error' }), onChildStderr: () => undefined });
  for (const file of readdirSync(profiles)) rmSync(path.join(profiles, file));
  const service = spawn(process.execPath, [...prof, CLI_ENTRY, 'start', '--state', root], { stdio: ['ignore', 'ignore', 'ignore'] });
  let port = 0;
  while (port === 0) {
    if (existsSync(paths.serviceJson)) {
      const written = JSON.parse(readFileSync(paths.serviceJson, 'utf8')) as { pid: number; port: number };
      if (written.pid === service.pid) port = written.port;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const token = readFileSync(paths.controlToken, 'utf8').trim();
  const client = benchClient(port, token);
  await callApi(client, 'POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 10_000_000, ttl_ms: 3_600_000 });
  let next = 0;
  let completed = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < operations) {
        next += 1;
        if ((await invokeNote(client, `profile note ${next}`)) === 'completed') completed += 1;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const status = (await client.status()) as { children: Array<{ name: string; pid: number | null }> };
  const roles = new Map<number, string>([[service.pid!, 'supervisor'], ...status.children.map((c): [number, string] => [c.pid ?? -1, c.name])]);
  service.kill('SIGTERM');
  await new Promise((resolve) => service.once('exit', resolve));
  console.log(`${completed}/${operations} completed at ${inFlight} in flight, ${(completed / seconds).toFixed(1)} ops/s; profiles in ${profiles}`);
  for (const file of readdirSync(profiles).filter((name) => name.endsWith('.cpuprofile')).sort()) {
    const pid = Number(/\.(\d+)\.\d+\.\d+\.cpuprofile$/.exec(file)?.[1] ?? /\.(\d+)\.\d+\.cpuprofile$/.exec(file)?.[1]);
    console.log(summarize(path.join(profiles, file), roles.get(pid) ?? `pid ${pid} (adapter host)`, completed, values.top));
  }
  // The state always goes; the profiles stay only in --keep DIR.
  rmSync(dir, { recursive: true, force: true });
}

await main();
