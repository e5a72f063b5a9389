// The bound on requests in flight, at the bound and one past it: on the
// supervisor's end (refused locally, nothing sent), on the child's end
// (answered too_many_in_flight, control messages still answered), and the
// supervisor's per-executor slots.
import { expect } from 'chai';
import { Slots } from '../../../supervisor/children/slots.js';
import { channelPair } from '../../helpers/channel-pair.js';
import { codeOfAnswer } from '../../helpers/codes.js';

/** A client and a server channel joined in memory; the server's echo waits until `release` is called. */
async function pair(clientBound: number, serverBound: number) {
  const held: Array<() => void> = [];
  const { client, server } = await channelPair({
    clientBound,
    serverBound,
    handler: (kind, body) => {
      if (kind === 'ping') return Promise.resolve({ now: Date.now() });
      return new Promise((resolve) => held.push(() => resolve(body)));
    },
  });
  return { client, server, release: () => held.splice(0).forEach((go) => go()) };
}

describe('the bound on requests in flight', () => {
  it('on the supervisor end: the bound-th request is sent, one more is refused locally without being sent', async () => {
    const { client, server, release } = await pair(3, 100);
    const sent = [1, 2, 3].map((n) => client.request('echo', { n }));
    expect(await codeOfAnswer(client.request('echo', { n: 4 }))).to.equal('too_many_in_flight');
    await new Promise((resolve) => setImmediate(resolve));
    expect(server.inFlight, 'only the three were sent').to.equal(3);
    release();
    expect(await Promise.all(sent)).to.deep.equal([{ n: 1 }, { n: 2 }, { n: 3 }]);
  });

  it('on the supervisor end: a ping at the bound is still sent and answered, so a flood of reads cannot blind the heartbeat', async () => {
    const { client, server, release } = await pair(2, 100);
    const sent = [1, 2].map((n) => client.request('echo', { n }));
    expect(await codeOfAnswer(client.request('echo', { n: 3 }))).to.equal('too_many_in_flight');
    expect((await client.request('ping', {}, { timeoutMs: 5_000 })).now).to.be.a('number');
    expect(server.inFlight, 'the two echoes are still held').to.equal(2);
    release();
    expect(await Promise.all(sent)).to.deep.equal([{ n: 1 }, { n: 2 }]);
  });

  it('on the child end: the bound-th request is handled, one more is answered too_many_in_flight, a ping still answered', async () => {
    const { client, release } = await pair(100, 2);
    const handled = [1, 2].map((n) => client.request('echo', { n }));
    expect(await codeOfAnswer(client.request('echo', { n: 3 }))).to.equal('too_many_in_flight');
    expect((await client.request('ping', {})).now).to.be.a('number');
    release();
    expect(await Promise.all(handled)).to.deep.equal([{ n: 1 }, { n: 2 }]);
  });

  it("in the supervisor's slots: the capacity-th acquire is granted at once, one more waits for a release", async () => {
    const slots = new Slots(2);
    const first = await slots.acquire();
    await slots.acquire();
    let third = false;
    const waiting = slots.acquire().then((release) => ((third = true), release));
    await new Promise((resolve) => setImmediate(resolve));
    expect(third).to.equal(false);
    expect(slots.used).to.equal(2);
    first();
    await waiting;
    expect(third).to.equal(true);
    expect(slots.used).to.equal(2);
    const controller = new AbortController();
    const aborted = codeOfAnswer(slots.acquire(controller.signal));
    controller.abort();
    expect(await aborted).to.equal('shutting_down');
  });
});

describe("a request's own timeout", () => {
  it('rejects deadline_exceeded naming the request, frees its place at once, and drops the late answer without closing the channel', async () => {
    const { client, release } = await pair(1, 100);
    const late = client.request('echo', { n: 1 }, { timeoutMs: 30 });
    const failure = await late.then(
      () => expect.fail('answered before its release'),
      (error: unknown) => error as Error & { code?: string },
    );
    expect(failure.code).to.equal('deadline_exceeded');
    expect(failure.message).to.match(/^echo q1 had no answer within 30 ms$/);
    // Abandoned, not pending: the bound of one has room again.
    expect(client.inFlight).to.equal(0);
    const next = client.request('echo', { n: 2 });
    release();
    await new Promise((resolve) => setImmediate(resolve));
    release();
    expect(await next).to.deep.equal({ n: 2 });
    expect(client.state).to.equal('open');
  });
});
