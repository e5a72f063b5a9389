// Waiting on the service's stop signal with one 'abort' listener however
// many wait: Slots (room on an executor) and Backoff (the wait between
// retries) each join the one listener, and leave it when their wait ends.
import { getEventListeners } from 'node:events';
import { expect } from 'chai';
import { whenAborted } from '../../shared/abort-waiters.js';
import { Slots } from '../../supervisor/children/slots.js';
import { Backoff } from '../../supervisor/operations/backoff.js';
import { codeOfAnswer } from '../helpers/codes.js';

const listeners = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;

describe('shared: many waiters on one abort signal', () => {
  it('keep one listener on the signal, call every waiter still waiting on abort, and none that left', () => {
    const controller = new AbortController();
    const called: number[] = [];
    const leaves = Array.from({ length: 50 }, (_, index) => whenAborted(controller.signal, () => called.push(index)));
    expect(listeners(controller.signal)).to.equal(1);
    for (const leave of leaves.slice(0, 25)) leave();
    controller.abort();
    expect(called).to.deep.equal(Array.from({ length: 25 }, (_, index) => index + 25));
  });

  it('Slots: 200 requests queued behind one slot leave one listener, flat after they all ran', async () => {
    const controller = new AbortController();
    const slots = new Slots(1);
    const first = await slots.acquire(controller.signal);
    const waiting = Array.from({ length: 200 }, () => slots.acquire(controller.signal));
    expect(listeners(controller.signal)).to.equal(1);
    first();
    for (const next of waiting) (await next)();
    expect(listeners(controller.signal)).to.equal(1);
    expect(slots.used).to.equal(0);
  });

  it('Slots: a stop rejects every queued request with shutting_down and frees nothing it never took', async () => {
    const controller = new AbortController();
    const slots = new Slots(1);
    await slots.acquire(controller.signal);
    const waiting = Array.from({ length: 20 }, () => codeOfAnswer(slots.acquire(controller.signal)));
    controller.abort();
    expect(await Promise.all(waiting)).to.deep.equal(Array.from({ length: 20 }, () => 'shutting_down'));
    expect(slots.used).to.equal(1);
  });

  it('Backoff: 100 operations waiting to retry leave one listener, and a stop ends every wait with shutting_down', async () => {
    const controller = new AbortController();
    const done = Array.from({ length: 100 }, () => new Backoff({ initialMs: 1, maxMs: 1, signal: controller.signal }).wait());
    expect(listeners(controller.signal)).to.equal(1);
    await Promise.all(done);
    const stopped = Array.from({ length: 100 }, () => codeOfAnswer(new Backoff({ initialMs: 60_000, maxMs: 60_000, signal: controller.signal }).wait()));
    expect(listeners(controller.signal)).to.equal(1);
    controller.abort();
    expect(await Promise.all(stopped)).to.deep.equal(Array.from({ length: 100 }, () => 'shutting_down'));
  });
});
