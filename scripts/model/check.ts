// The protocol model (model/custody.pml) checked with spin: every
// configuration in RUNS must answer as expected. The code's own
// configurations must pass; each deliberately broken variant must yield a
// counterexample, which shows the property would catch the race it names.
// Used by `npm run model` and by test/model/model.test.ts.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const MODEL_PATH = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'model', 'custody.pml');

export interface ModelRun {
  readonly name: string;
  readonly defines: readonly string[];
  readonly check: 'safety' | 'liveness';
  readonly expect: 'pass' | 'counterexample';
}

const LARGER = ['-DMAX_CRASH=3', '-DMAX_LOST=2', '-DMAX_WD=2'];

export const RUNS: readonly ModelRun[] = [
  { name: 'as built, local executor', defines: [], check: 'safety', expect: 'pass' },
  { name: 'as built, remote executor', defines: ['-DREMOTE=1'], check: 'safety', expect: 'pass' },
  { name: 'as built, remote, an adapter that cannot fence', defines: ['-DREMOTE=1', '-DDURABLE=0'], check: 'safety', expect: 'pass' },
  { name: 'as built, remote, larger fault budgets', defines: ['-DREMOTE=1', ...LARGER], check: 'safety', expect: 'pass' },
  { name: 'as built, local executor', defines: [], check: 'liveness', expect: 'pass' },
  { name: 'as built, remote executor', defines: ['-DREMOTE=1'], check: 'liveness', expect: 'pass' },
  { name: 'as built, remote, an adapter that cannot fence', defines: ['-DREMOTE=1', '-DDURABLE=0'], check: 'liveness', expect: 'pass' },
  { name: 'as built, remote, larger fault budgets', defines: ['-DREMOTE=1', ...LARGER], check: 'liveness', expect: 'pass' },
  { name: 'H1 broken: a refused start releases whatever the state', defines: ['-DBROKEN_RELEASE'], check: 'safety', expect: 'counterexample' },
  { name: 'H2 broken: the window checked before the claim transaction', defines: ['-DREMOTE=1', '-DBROKEN_CLAIMTX'], check: 'safety', expect: 'counterexample' },
  { name: 'H3 broken: not_applied without a fence', defines: ['-DREMOTE=1', '-DBROKEN_FENCE'], check: 'safety', expect: 'counterexample' },
  { name: 'H4 broken: reconciliation given up after one failed exchange', defines: ['-DBROKEN_RETRY'], check: 'liveness', expect: 'counterexample' },
];

export interface ModelResult extends ModelRun {
  readonly errors: number;
  readonly states: number;
  readonly ok: boolean;
  readonly trail?: string;
}

/** Whether spin and a C compiler are on this machine. */
export function modelToolsPresent(): boolean {
  try {
    execFileSync('spin', ['-V'], { stdio: 'ignore' });
    execFileSync('gcc', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export function runModel(run: ModelRun): ModelResult {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'custody-model-'));
  try {
    copyFileSync(MODEL_PATH, path.join(dir, 'custody.pml'));
    const sh = (file: string, args: string[]) => execFileSync(file, args, { cwd: dir, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    sh('spin', ['-a', ...run.defines, 'custody.pml']);
    const safety = run.check === 'safety';
    sh('gcc', ['-O0', '-w', ...(safety ? ['-DSAFETY', '-DNOCLAIM'] : ['-DNFAIR=3']), '-o', 'pan', 'pan.c']);
    // pan exits non-zero on some errors; its report is what counts.
    let report: string;
    try {
      report = sh('./pan', safety ? ['-m1000000'] : ['-a', '-f', '-m1000000']);
    } catch (error) {
      report = String((error as { stdout?: string }).stdout ?? '');
    }
    const errors = Number(/errors: (\d+)/.exec(report)?.[1] ?? NaN);
    const states = Number(/(\d+) states, stored/.exec(report)?.[1] ?? NaN);
    if (Number.isNaN(errors)) throw new Error(`pan printed no verdict for "${run.name}":\n${report}`);
    const truncated = /depth too small|max search depth too small/.test(report);
    const passed = errors === 0 && !truncated;
    const ok = run.expect === 'pass' ? passed : errors > 0;
    let trail: string | undefined;
    if (errors > 0) {
      try {
        trail = sh('spin', ['-t', ...run.defines, '-p', '-g', 'custody.pml']).split('\n').slice(-60).join('\n');
      } catch {
        trail = undefined;
      }
    }
    return { ...run, errors, states, ok, ...(trail !== undefined ? { trail } : {}) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const isMain = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  if (!modelToolsPresent()) {
    process.stderr.write('npm run model needs spin and gcc: apt-get install spin gcc\n');
    process.exit(2);
  }
  let failed = 0;
  for (const run of RUNS) {
    const result = runModel(run);
    const verdict = result.ok ? 'ok' : 'UNEXPECTED';
    process.stdout.write(`${verdict.padEnd(10)} ${run.check.padEnd(8)} ${run.name}: ${result.errors} error(s), ${result.states} states (expected ${run.expect})\n`);
    if (!result.ok) {
      failed++;
      if (result.trail) process.stdout.write(result.trail + '\n');
    }
  }
  process.stdout.write(`${RUNS.length - failed} passed, ${failed} failed\n`);
  process.exit(failed === 0 ? 0 : 1);
}
