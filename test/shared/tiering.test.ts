// optimizeSooner (shared/tiering.ts) must act as `node --interrupt-budget=…`
// does, set at run time: a function is optimized after fewer calls than with
// V8's default. Each case runs in a node of its own with TurboFan compiling
// on the main thread (--no-concurrent-recompilation), so the call at which a
// function turns optimized is exact, and reads V8's own status
// (%GetOptimizationStatus, --allow-natives-syntax).
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { expect } from 'chai';
import { INTERRUPT_BUDGET } from '../../shared/tiering.js';
import { distPath } from '../helpers/children.js';

const TIERING = pathToFileURL(distPath('shared', 'tiering.js')).href;

/** Calls of a small function until V8 reports it optimized, in a fresh node with `flags`, after optimizeSooner() when `sooner`. */
function callsUntilOptimized(flags: readonly string[], sooner: boolean): number {
  const script = `
    ${sooner ? `(await import(${JSON.stringify(TIERING)})).optimizeSooner();` : ''}
    function work(o) { let s = 0; for (let i = 0; i < 20; i++) s += o.a * i + o.b; return s; }
    let calls = 0;
    // V8's OptimizationStatus: bit 4 is "optimized by TurboFan".
    while ((%GetOptimizationStatus(work) & 16) === 0 && calls < 1000000) { work({ a: calls, b: 1 }); calls++; }
    process.stdout.write(String(calls));
  `;
  const run = spawnSync(process.execPath, ['--allow-natives-syntax', '--no-concurrent-recompilation', ...flags, '--input-type=module', '-e', script], { encoding: 'utf8' });
  expect(run.status, run.stderr).to.equal(0);
  return Number(run.stdout);
}

describe('shared/tiering: hot code optimized sooner', function () {
  this.timeout(20_000);

  it('optimizes a function after fewer calls than the default, exactly as the command-line flag does', () => {
    const byDefault = callsUntilOptimized([], false);
    const sooner = callsUntilOptimized([], true);
    const byFlag = callsUntilOptimized([`--interrupt-budget=${INTERRUPT_BUDGET}`], false);
    expect(byDefault).to.be.below(1000000);
    expect(sooner).to.be.below(byDefault / 2);
    expect(sooner).to.equal(byFlag);
  });
});
