// optimizeSooner (shared/tiering.ts) must act as `node --interrupt-budget=…`
// does, set at run time: a function is optimized after fewer calls than with
// V8's default. Each case runs in a node of its own with TurboFan compiling
// on the main thread (--no-concurrent-recompilation), so the call at which a
// function turns optimized is exact (it counts bytecode, not time), and
// reads V8's own status (%GetOptimizationStatus, --allow-natives-syntax).
// Then the real service: every long-running process says, in the line that
// says it serves, that it set the budget, and a process started with a
// budget of its own keeps it.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect } from 'chai';
import { programPath } from '../../shared/entry-points.js';
import { INTERRUPT_BUDGET, hasOwnBudget } from '../../shared/tiering.js';
import { distPath } from '../helpers/children.js';
import { type TestService, startService } from '../helpers/service.js';

const TIERING = pathToFileURL(distPath('shared', 'tiering.js')).href;
const V8_11 = process.versions.v8.split('.')[0] === '11';

/** Calls of a small function until V8 reports it optimized, in a fresh node with `flags`, after optimizeSooner() when `sooner`. */
function callsUntilOptimized(flags: readonly string[], sooner: boolean): number {
  const script = `
    ${sooner ? `if (!(await import(${JSON.stringify(TIERING)})).optimizeSooner()) throw new Error('optimizeSooner set nothing');` : ''}
    function work(o) { let s = 0; for (let i = 0; i < 20; i++) s += o.a * i + o.b; return s; }
    let calls = 0;
    // V8's OptimizationStatus bit 4 (kOptimized): by an optimizing tier, which in Node 20 is TurboFan alone (Maglev is off).
    while ((%GetOptimizationStatus(work) & 16) === 0 && calls < 1000000) { work({ a: calls, b: 1 }); calls++; }
    process.stdout.write(String(calls));
  `;
  // A clean environment: no NODE_OPTIONS (--jitless, a coverage hook) from the test runner.
  const run = spawnSync(process.execPath, ['--allow-natives-syntax', '--no-concurrent-recompilation', ...flags, '--input-type=module', '-e', script], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '' },
  });
  expect(run.status, run.stderr).to.equal(0);
  return Number(run.stdout);
}

/** The JSON log lines of `event` the service's stderr carried (its own and its children's, relayed). */
function logged(service: TestService, event: string): Array<Record<string, unknown>> {
  return service.stderr
    .filter((line) => line.includes(`"${event}"`))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((entry) => entry.event === event);
}

describe('shared/tiering: hot code optimized sooner', function () {
  this.timeout(60_000);

  it('optimizes a function after fewer calls than the default, exactly as the command-line flag does (V8 11, Node 20)', function () {
    if (!V8_11) this.skip();
    const byDefault = callsUntilOptimized([], false);
    const sooner = callsUntilOptimized([], true);
    const byFlag = callsUntilOptimized([`--interrupt-budget=${INTERRUPT_BUDGET}`], false);
    expect(byDefault).to.be.below(1000000);
    expect(sooner).to.be.below(byDefault / 2);
    expect(sooner).to.equal(byFlag);
  });

  it('leaves a budget given on the command line alone, and only the budget itself counts as one', () => {
    expect(hasOwnBudget(['--interrupt-budget=50000'])).to.equal(true);
    expect(hasOwnBudget(['--max-old-space-size=512', '--interrupt_budget=50000'])).to.equal(true);
    expect(hasOwnBudget(['--interrupt-budget-for-feedback-allocation=100'])).to.equal(false);
    expect(hasOwnBudget(['--interrupt-budget-factor-for-feedback-allocation=4', '--cpu-prof'])).to.equal(false);
    expect(hasOwnBudget([])).to.equal(false);
  });

  describe('on a real service', () => {
    let service: TestService;
    after(() => service?.cleanup());

    it('sets it in the supervisor, the kernel, the executor and its adapter host once they serve; a budget given on the command line stays', async () => {
      // The kernel started as a custom argv may: with a budget of its own.
      service = await startService({ config: (root) => ({ kernel: { argv: [process.execPath, '--interrupt-budget=50000', programPath('kernel'), '--dir', path.join(root, 'kernel')] } }) });
      // The adapter host starts with the first call that needs it.
      const answer = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', request_id: 'tiering-1', arguments: { note: 'tiering' } }, 'agent');
      expect(answer.body).to.include({ outcome: 'completed' });
      await service.stop();
      const serving = logged(service, 'child_serving');
      const sooner = (role: string) => serving.filter((entry) => entry.role === role).map((entry) => entry.optimized_sooner);
      expect(logged(service, 'service_started').map((entry) => entry.optimized_sooner)).to.deep.equal([V8_11]);
      expect(sooner('executor')).to.deep.equal([V8_11]);
      expect(sooner('kernel')).to.deep.equal([false]);
      expect(logged(service, 'host_serving').map((entry) => (entry.fields as Record<string, unknown> | undefined)?.optimized_sooner ?? entry.optimized_sooner)).to.deep.equal([V8_11]);
    });
  });
});
