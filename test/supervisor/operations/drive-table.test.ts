import { expect } from 'chai';
import { ANSWER_STEPS, type Action, DRIVE_TABLE, GOALS, type Goal, REFUSALS, WORK_STEPS, goalAfterRelease, stepFor } from '../../../supervisor/operations/drive-table.js';
import { REQUEST_MACHINE, REQUEST_PHASES, type RequestPhase } from '../../../supervisor/operations/phases.js';

const KINDS = ['invoke', 'authorize'] as const;
const KNOWN: ReadonlySet<string> = new Set<string>([...WORK_STEPS, ...ANSWER_STEPS, ...REFUSALS]);

/** Every cell of the table, per request kind. */
function cells(): { phase: RequestPhase; goal: Goal; kind: (typeof KINDS)[number]; action: Action }[] {
  return REQUEST_PHASES.flatMap((phase) => GOALS.flatMap((goal) => KINDS.map((kind) => ({ phase, goal, kind, action: stepFor(phase, goal, kind) }))));
}

/** The phases a work step moves its request to; the request machine must allow one of them from the cell's phase. */
const STEP_LEADS_TO: Record<Exclude<(typeof WORK_STEPS)[number], 'release'>, readonly RequestPhase[]> = {
  reserve: ['reserved'],
  start: ['authorized'],
  execute: ['executing', 'reported', 'reconciling'],
  await_reconcile: ['reconciling'],
  reconcile: ['reported'],
  settle: ['settled'],
};

describe('the drive table', () => {
  it('has exactly one row per request phase and one column per goal', () => {
    expect(Object.keys(DRIVE_TABLE)).to.have.members([...REQUEST_PHASES]);
    for (const phase of REQUEST_PHASES) expect(Object.keys(DRIVE_TABLE[phase]), phase).to.have.members([...GOALS]);
  });

  it('names a known step or refusal in every cell, for both kinds of request', () => {
    const all = cells();
    expect(all).to.have.length(REQUEST_PHASES.length * GOALS.length * KINDS.length);
    for (const { phase, goal, kind, action } of all) expect(KNOWN.has(action), `${phase} × ${goal} (${kind}): ${action}`).to.equal(true);
  });

  it('only takes a work step whose moves the request machine allows from that phase', () => {
    for (const { phase, goal, kind, action } of cells()) {
      if (action === 'release' || !(WORK_STEPS as readonly string[]).includes(action)) continue;
      const targets = STEP_LEADS_TO[action as keyof typeof STEP_LEADS_TO];
      expect(targets.some((to) => REQUEST_MACHINE.canMove(phase, to)), `${phase} × ${goal} (${kind}): ${action} → ${targets.join('|')}`).to.equal(true);
    }
  });

  it('executes only for invoke, execute, and the resume of an invoke', () => {
    const executing = cells().filter((c) => c.action === 'execute');
    expect(executing.length).to.be.greaterThan(0);
    for (const { phase, goal, kind } of executing) {
      expect(['invoke', 'execute', 'resume'], `${phase} × ${goal} (${kind})`).to.include(goal);
      if (goal === 'resume') expect(kind, `${phase} × resume`).to.equal('invoke');
    }
  });

  it('carries resume as its own goal: an invoke resumes like an invoke, an authorize walk is never executed or settled by it', () => {
    for (const phase of REQUEST_PHASES) expect(stepFor(phase, 'resume', 'invoke'), phase).to.equal(stepFor(phase, 'invoke', 'invoke'));
    const walk = REQUEST_PHASES.map((phase) => [phase, stepFor(phase, 'resume', 'authorize')]);
    expect(Object.fromEntries(walk)).to.deep.equal({
      received: 'reserve',
      reserved: 'start',
      authorized: 'stop',
      executing: 'await_reconcile',
      reconciling: 'reconcile',
      reported: 'stop',
      settled: 'stop',
      refused: 'stop',
      quarantined: 'quarantined',
    });
  });

  it('releases a quarantined request only for reconcile, and refuses every other goal', () => {
    for (const goal of GOALS) expect(stepFor('quarantined', goal, 'invoke'), goal).to.equal(goal === 'reconcile' ? 'release' : 'quarantined');
    expect(cells().filter((c) => c.action === 'release').map((c) => c.phase)).to.satisfy((phases: string[]) => phases.every((p) => p === 'quarantined'));
  });

  it('does no work on a request at its end', () => {
    for (const { phase, goal, action } of cells()) {
      if (phase !== 'settled' && phase !== 'refused') continue;
      expect((ANSWER_STEPS as readonly string[]).includes(action), `${phase} × ${goal}: ${action}`).to.equal(true);
    }
  });

  it('carries a released request as its kind before an authorization and only reconciles it after one', () => {
    expect(goalAfterRelease(false)).to.equal('resume');
    expect(goalAfterRelease(true)).to.equal('reconcile');
  });
});
