// The one timeout race (shared/timeout.ts): which branch is taken, by provoking each.
import { expect } from 'chai';
import { withTimeout } from '../../shared/timeout.js';

const never = new Promise<string>(() => undefined);

describe('withTimeout', () => {
  it('answers with the work when it settles first, and never calls the timeout branch', async () => {
    let called = false;
    const value = await withTimeout(Promise.resolve('done'), 1_000, () => ((called = true), 'late'));
    expect(value).to.equal('done');
    expect(called).to.equal(false);
  });

  it("passes the work's own rejection through, not the timeout's", async () => {
    const error = await withTimeout(Promise.reject(new Error('broke')), 1_000, () => 'late').catch((e: unknown) => e as Error);
    expect(error).to.be.instanceOf(Error).with.property('message', 'broke');
  });

  it('takes the timeout branch when the work is still pending: its value is the answer', async () => {
    expect(await withTimeout(never, 10, () => 'timed out')).to.equal('timed out');
  });

  it('takes the timeout branch and rejects with the error it throws', async () => {
    const error = await withTimeout(never, 10, () => {
      throw new Error('no answer within 10 ms');
    }).catch((e: unknown) => e as Error);
    expect(error).to.have.property('message', 'no answer within 10 ms');
  });

  it('treats a bound of 0 like setTimeout does: the timeout branch after a tick, not a refusal', async () => {
    expect(await withTimeout(never, 0, () => 'expired')).to.equal('expired');
    expect(await withTimeout(Promise.resolve('ready'), 0, () => 'expired')).to.equal('ready');
  });

  it('never answers from the timeout branch before the whole bound has passed by performance.now()', async () => {
    for (let i = 0; i < 20; i += 1) {
      const blocked = Date.now() + 8;
      while (Date.now() < blocked); // the turn runs long, as a commit's fsync does: the loop's cached time lags
      const started = performance.now();
      const waited = await withTimeout(never, 15, () => performance.now() - started);
      expect(waited).to.be.at.least(15);
    }
  });

  it('makes nothing for the timeout branch until the bound passes', async () => {
    let made = 0;
    await Promise.all(Array.from({ length: 100 }, () => withTimeout(Promise.resolve(1), 1_000, () => ((made += 1), 0))));
    expect(made).to.equal(0);
  });
});
