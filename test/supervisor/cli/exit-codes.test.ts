// Which exit code the CLI ends with for each way an operation can end: one
// set of "ended without effect" states (supervisor/operations/outcome.ts)
// decides 3 for the CLI and `refused` for the driver alike.
import { expect } from 'chai';
import { CLI_EXIT } from '../../../shared/exit-codes.js';
import { OPERATION_STATES, type OperationState } from '../../../shared/protocol/kernel-messages.js';
import { exitCodeForOutcome } from '../../../supervisor/cli/exit-codes.js';
import { NO_EFFECT_STATES, REFUSED_STATES, SETTLED_STATES } from '../../../supervisor/operations/outcome.js';

/** The exit of `custody invoke` for an operation the kernel ended in each state (README "Exit codes"). */
const INVOKE_EXIT: Record<OperationState, number> = {
  reserved: CLI_EXIT.unknown,
  dispatch_committed: CLI_EXIT.unknown,
  awaiting_report: CLI_EXIT.unknown,
  completed: CLI_EXIT.done,
  expired: CLI_EXIT.refused,
  denied: CLI_EXIT.refused,
  start_denied: CLI_EXIT.refused,
  released: CLI_EXIT.refused,
  finalization_denied: CLI_EXIT.unknown,
  unknown: CLI_EXIT.unknown,
};

function phaseOf(state: OperationState): string {
  if (REFUSED_STATES.has(state)) return 'refused';
  return SETTLED_STATES.has(state) ? 'settled' : 'reconciling';
}

describe('the CLI exit code for an outcome', () => {
  for (const state of OPERATION_STATES) {
    it(`ends custody invoke with ${INVOKE_EXIT[state]} for an operation the kernel holds as ${state}`, () => {
      const phase = phaseOf(state);
      expect(exitCodeForOutcome({ final: phase !== 'reconciling', outcome: state, phase }, 'complete')).to.equal(INVOKE_EXIT[state]);
    });
  }

  it('counts as ended without effect exactly the refusals and a released settlement, never a finalization denial', () => {
    expect([...NO_EFFECT_STATES].sort()).to.deep.equal([...REFUSED_STATES, 'released'].sort());
    expect(NO_EFFECT_STATES.has('finalization_denied')).to.equal(false);
    for (const state of REFUSED_STATES) expect(SETTLED_STATES.has(state), state).to.equal(false);
  });

  it('ends an execute whose report is retained with 0, and one settled without effect with 3', () => {
    expect(exitCodeForOutcome({ final: false, outcome: null, phase: 'reported' }, 'reported')).to.equal(CLI_EXIT.done);
    expect(exitCodeForOutcome({ final: true, outcome: 'released', phase: 'settled' }, 'reported')).to.equal(CLI_EXIT.refused);
  });
});
