// The frames a channel sends in one turn leave its output in one write
// (shared/wire/channel.ts): counted on a Writable that records each write
// call it gets, in front of a real server channel that must still read every
// frame, in order.
import { expect } from 'chai';
import { Writable } from 'node:stream';
import { channelPair } from '../../helpers/channel-pair.js';

/** A client whose output records how many frames each write call carried, passing them on to an echoing server. */
async function recordedPair() {
  const writes: number[] = [];
  const seen: unknown[] = [];
  const { client } = await channelPair({
    serverBound: 100,
    clientBound: 100,
    handler: (_kind, body) => {
      seen.push(body);
      return Promise.resolve(body);
    },
    clientOutput: (toServer) =>
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          writes.push(1);
          toServer.write(chunk, done);
        },
        writev(chunks, done) {
          writes.push(chunks.length);
          toServer.write(Buffer.concat(chunks.map((c) => c.chunk as Buffer)), done);
        },
      }),
  });
  return { client, writes, seen };
}

describe('frames written in one turn', () => {
  it('leave in one write, in order, and every one is answered; a frame of a later turn leaves in its own', async () => {
    const { client, writes, seen } = await recordedPair();
    writes.length = 0;
    // Five requests in one turn, two of them from microtasks of that turn.
    const answers = [1, 2, 3].map((n) => client.request('echo', { n }));
    await Promise.resolve().then(() => answers.push(client.request('echo', { n: 4 }), client.request('echo', { n: 5 })));
    expect(writes, 'nothing left before the end of the turn').to.deep.equal([]);
    expect(await Promise.all(answers)).to.deep.equal([1, 2, 3, 4, 5].map((n) => ({ n })));
    expect(writes, 'one write carried the five frames').to.deep.equal([5]);
    expect(seen).to.deep.equal([1, 2, 3, 4, 5].map((n) => ({ n })));
    expect(await client.request('echo', { n: 6 })).to.deep.equal({ n: 6 });
    expect(writes).to.deep.equal([5, 1]);
  });

  it('carry what a callback wrote itself and what promises it settled send later in its turn: the kernel\'s head frame and the answers of its batch', async () => {
    const { client, writes, seen } = await recordedPair();
    writes.length = 0;
    // As kernel-proc/commit-queue.ts does from setImmediate: one frame at once, then answers from continuations a few hops down.
    const answers = await new Promise<Array<Promise<unknown>>>((resolve) =>
      setImmediate(() => {
        const first = client.request('echo', { n: 1 });
        const later = (async () => {
          for (let hop = 0; hop < 3; hop++) await Promise.resolve();
          return client.request('echo', { n: 2 });
        })();
        resolve([first, later]);
      }),
    );
    expect(await Promise.all(answers)).to.deep.equal([{ n: 1 }, { n: 2 }]);
    expect(writes, 'one write carried both frames').to.deep.equal([2]);
    expect(seen).to.deep.equal([{ n: 1 }, { n: 2 }]);
  });
});
