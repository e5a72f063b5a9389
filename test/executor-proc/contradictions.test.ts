// The operations a tool said were applied though the ledger never claimed
// them (executor-proc/handlers/reconcile.ts): remembered so the tool is not
// asked again, at most CONTRADICTIONS_KEPT of them, the oldest let go first.
import { expect } from 'chai';
import { CONTRADICTIONS_KEPT, remember } from '../../executor-proc/handlers/reconcile.js';

describe('executor-proc: contradictions remembered', () => {
  it(`keeps ${CONTRADICTIONS_KEPT} and lets the oldest go at one more`, () => {
    const set = new Set<string>();
    for (let i = 0; i < CONTRADICTIONS_KEPT; i++) remember(set, `op-${i}`);
    expect(set.size).to.equal(CONTRADICTIONS_KEPT);
    expect(set.has('op-0')).to.equal(true);
    remember(set, 'one-more');
    expect(set.size).to.equal(CONTRADICTIONS_KEPT);
    expect(set.has('op-0'), 'the oldest let go').to.equal(false);
    expect(set.has('op-1')).to.equal(true);
    expect(set.has('one-more')).to.equal(true);
  });
});
