// The reconcile bound is a rate over a sliding window: exhausted, it refuses
// and says when the next reconciliation is allowed; once the window has
// moved past the oldest one, it allows again, for as long as the session runs.
import { expect } from 'chai';
import { ReconcileBudget } from '../../executor-proc/reconcile-budget.js';
import { codeOf } from '../helpers/codes.js';

function budgetAt(bounds: { perTool: number; perSession: number; windowMs: number }) {
  const clock = { now: 1_000 };
  return { clock, budget: new ReconcileBudget(bounds, () => clock.now) };
}

function messageOf(fn: () => void): string {
  try {
    fn();
  } catch (error) {
    return (error as Error).message;
  }
  return expect.fail('expected reconcile_budget_exhausted');
}

describe('executor-proc reconcile budget', () => {
  it('allows reconcile_per_tool reconciliations of a tool within the window and refuses one more, saying when the next is allowed', () => {
    const { clock, budget } = budgetAt({ perTool: 2, perSession: 100, windowMs: 60_000 });
    budget.take('a/b');
    clock.now += 10_000;
    budget.take('a/b');
    expect(codeOf(() => budget.take('a/b'))).to.equal('reconcile_budget_exhausted');
    expect(messageOf(() => budget.take('a/b'))).to.match(/tool a\/b made 2 in the last 60000 ms \(reconcile_per_tool 2\).*allowed in 50000 ms \(at \d{4}-\d\d-\d\dT/);
    // Another tool has its own count.
    expect(codeOf(() => budget.take('c/d'))).to.equal(undefined);
  });

  it('refills as the window slides past the oldest reconciliation, not all at once', () => {
    const { clock, budget } = budgetAt({ perTool: 2, perSession: 100, windowMs: 60_000 });
    budget.take('a/b');
    clock.now += 10_000;
    budget.take('a/b');
    clock.now += 49_999;
    expect(codeOf(() => budget.take('a/b'))).to.equal('reconcile_budget_exhausted');
    clock.now += 1; // the first has left the window
    expect(codeOf(() => budget.take('a/b'))).to.equal(undefined);
    expect(messageOf(() => budget.take('a/b'))).to.match(/allowed in 10000 ms/);
  });

  it('never starves a tool that is asked again and again with backoff: it is allowed once per window forever', () => {
    const { clock, budget } = budgetAt({ perTool: 1, perSession: 1, windowMs: 1_000 });
    for (let round = 0; round < 1_000; round += 1) {
      expect(codeOf(() => budget.take('a/b')), `round ${round}`).to.equal(undefined);
      expect(codeOf(() => budget.take('a/b'))).to.equal('reconcile_budget_exhausted');
      clock.now += 1_000;
    }
  });

  it('bounds all tools together by reconcile_per_session within the window', () => {
    const { clock, budget } = budgetAt({ perTool: 10, perSession: 3, windowMs: 60_000 });
    budget.take('a/b');
    budget.take('c/d');
    clock.now += 30_000;
    budget.take('e/f');
    const message = messageOf(() => budget.take('g/h'));
    expect(message).to.match(/this session made 3 adapter reconciliations in the last 60000 ms \(reconcile_per_session 3\)/);
    expect(message).to.match(/next reconciliation of g\/h is allowed in 30000 ms/);
    clock.now += 30_000;
    expect(codeOf(() => budget.take('g/h'))).to.equal(undefined);
  });

  it('names the later of two waits when the tool and the session are both exhausted', () => {
    const { clock, budget } = budgetAt({ perTool: 2, perSession: 3, windowMs: 60_000 });
    budget.take('c/d');
    clock.now += 10_000;
    budget.take('a/b');
    clock.now += 10_000;
    budget.take('a/b');
    // The session has room again in 40 s (c/d leaves the window), the tool only in 50 s.
    const message = messageOf(() => budget.take('a/b'));
    expect(message).to.match(/reconcile_per_session 3.*reconcile_per_tool 2.*allowed in 50000 ms/);
    expect(codeOf(() => budget.take('c/d'))).to.equal('reconcile_budget_exhausted');
    clock.now += 40_000;
    expect(codeOf(() => budget.take('c/d'))).to.equal(undefined);
  });
});
