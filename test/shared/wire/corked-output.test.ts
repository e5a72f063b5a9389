// The frames a channel sends in one turn leave its output in one write
// (shared/wire/channel.ts): counted on a Writable that records each write
// call it gets, in front of a real server channel that must still read every
// frame, in order.
import { expect } from 'chai';
import { PassThrough, Writable } from 'node:stream';
import { Signer, generateSeed } from '../../../shared/crypto/ed25519.js';
import { createLogger } from '../../../shared/log.js';
import { ClientChannel } from '../../../shared/wire/client.js';
import { DEFAULT_FRAME_LIMITS } from '../../../shared/wire/frame-reader.js';
import { signHello } from '../../../shared/wire/hello.js';
import { ServerChannel } from '../../../shared/wire/server.js';
import { SessionEndpoint } from '../../../shared/wire/session.js';
import { createSessionSecrets } from '../../../shared/wire/session-keys.js';

const quiet = createLogger({}, { write: () => undefined });

/** A client whose output records how many frames each write call carried, passing them on to an echoing server. */
async function recordedPair() {
  const secrets = createSessionSecrets();
  const toServer = new PassThrough();
  const toClient = new PassThrough();
  const writes: number[] = [];
  const seen: unknown[] = [];
  const recorder = new Writable({
    write(chunk: Buffer, _encoding, done) {
      writes.push(1);
      toServer.write(chunk, done);
    },
    writev(chunks, done) {
      writes.push(chunks.length);
      toServer.write(Buffer.concat(chunks.map((c) => c.chunk as Buffer)), done);
    },
  });
  const server = new ServerChannel({
    input: toServer,
    output: toClient,
    endpoint: new SessionEndpoint({ secrets, side: 'child', self: 'kernel', peer: 'supervisor', limits: DEFAULT_FRAME_LIMITS }),
    log: quiet,
    role: 'kernel',
    maxInFlight: 100,
    onTerminated: () => undefined,
    handler: (_kind, body) => {
      seen.push(body);
      return Promise.resolve(body);
    },
  });
  const client = new ClientChannel({
    input: toClient,
    output: recorder,
    endpoint: new SessionEndpoint({ secrets, side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: DEFAULT_FRAME_LIMITS }),
    log: quiet,
    peerRole: 'kernel',
    maxInFlight: 100,
  });
  client.start();
  server.start(signHello(Signer.fromSeed(generateSeed()), secrets.sid, 'c'.repeat(64), { role: 'kernel', id: 'kernel', keyEpoch: 1 }));
  await client.hello;
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
});
