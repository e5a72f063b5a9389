import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Signer, generateSeed } from '../../../shared/crypto/ed25519.js';
import type { ChildSession } from '../../../shared/child/spawn.js';
import { distPath, startFixture } from '../../helpers/children.js';

type Fixture = ChildSession & { stderr: string[] };

/** Capture the next frame line the supervisor writes to the child, without sending it. */
function interceptWrites(child: Fixture): { lines: Buffer[]; release(): void } {
  const stdin = child.process.stdin!;
  const original = stdin.write.bind(stdin);
  const lines: Buffer[] = [];
  stdin.write = ((chunk: Buffer) => {
    lines.push(Buffer.from(chunk));
    return true;
  }) as typeof stdin.write;
  return { lines, release: () => (stdin.write = original) };
}

/** The code the child logged when its channel was poisoned. */
async function poisonCodeOf(child: Fixture): Promise<string | undefined> {
  const exit = await child.exited;
  await child.drained;
  expect(exit.code, 'a poisoned child exits 70').to.equal(70);
  const record = child.stderr.map((line) => JSON.parse(line) as Record<string, unknown>).find((r) => r.event === 'channel_poisoned');
  return record?.code as string | undefined;
}

async function expectFreshSessionWorks(): Promise<void> {
  const fresh = await startFixture();
  expect((await fresh.channel.request('ping', {})).now).to.be.a('number');
  await fresh.channel.request('shutdown', {});
  expect((await fresh.exited).code).to.equal(0);
}

describe('channel over a real child process', function () {
  this.timeout(20_000);

  it('opens a session, proves the child identity and answers requests', async () => {
    const seed = generateSeed();
    const pin = { id: 'fixture', publicKey: Signer.fromSeed(seed).publicKeyHex, keyEpoch: 1 };
    const child = await startFixture({ settings: { seed: Buffer.from(seed).toString('hex') }, expect: pin });
    expect(child.hello).to.include({ role: 'kernel', id: 'fixture', public_key: pin.publicKey, key_epoch: 1 });
    expect(await child.channel.request('echo', { nested: { list: [1, 'two', null, true] } })).to.deep.equal({ nested: { list: [1, 'two', null, true] } });
    await child.channel.request('shutdown', {});
    expect(await child.exited).to.deep.equal({ code: 0, signal: null });
  });

  it('takes a ping answered in time but read after its deadline, as a supervisor resumed from SIGSTOP reads it: no missed heartbeat', async () => {
    const child = await startFixture();
    try {
      for (let round = 0; round < 3; round += 1) {
        const pong = child.channel.request('ping', {}, { timeoutMs: 50 });
        // The frame leaves at the end of this turn (frames of one turn share a write); this process then stalls
        // 400 ms (stopped), and the child's answer waits in the pipe.
        await new Promise((resolve) => setImmediate(resolve));
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_500); // long enough for the child to answer on a loaded machine
        expect((await pong).now, `round ${round}`).to.be.a('number');
      }
    } finally {
      await child.channel.request('shutdown', {});
      await child.exited;
    }
  });

  it('refuses a child whose hello proves another identity than the pin, and kills it', async () => {
    const pin = { id: 'fixture', publicKey: Signer.fromSeed(generateSeed()).publicKeyHex, keyEpoch: 1 };
    const error = await startFixture({ expect: pin }).then(() => null, (e: unknown) => e);
    expect(error).to.have.property('code', 'identity_mismatch');
  });

  it('refuses a forged hello signed by another key than the one it claims', async () => {
    const error = await startFixture({ settings: { forge_hello: true } }).then(() => null, (e: unknown) => e);
    expect(error).to.have.property('code', 'hello_invalid');
  });

  it('reports a child that refuses to serve with its own error code', async () => {
    const error = await startFixture({ settings: { refuse: 'store_missing' } }).then(() => null, (e: unknown) => e);
    expect(error).to.have.property('code', 'store_missing');
  });

  it('keeps console.log and process.stdout.write of the child off the channel', async () => {
    const child = await startFixture();
    expect(await child.channel.request('echo', { misbehave: 'console' })).to.deep.equal({ misbehave: 'console' });
    expect((await child.channel.request('ping', {})).now).to.be.a('number');
    expect(child.stderr.join('\n')).to.contain('console.log from the child').and.to.contain('process.stdout.write from the child');
    await child.channel.request('shutdown', {});
    expect((await child.exited).code).to.equal(0);
  });

  for (const [how, code] of [
    ['garbage', 'frame_malformed'],
    ['oversized', 'frame_too_large'],
    ['bad_mac', 'bad_mac'],
  ] as const) {
    it(`poisons the channel when the child sends a ${how} frame (${code}), rejecting pending requests with that cause`, async () => {
      const child = await startFixture();
      const pending = child.channel.request('ping', {}, { id: 'waiting' });
      const answer = child.channel.request('echo', { misbehave: how });
      const [first, second] = await Promise.allSettled([pending, answer]);
      expect(second.status).to.equal('rejected');
      expect((second as PromiseRejectedResult).reason).to.have.property('code', code);
      if (first.status === 'rejected') expect(first.reason).to.have.property('code', code);
      expect(child.channel.state).to.equal('poisoned');
      await child.channel.request('ping', {}).then(
        () => expect.fail('a poisoned channel refuses further requests'),
        (error: unknown) => expect(error).to.have.property('code', code),
      );
      child.kill();
      await child.exited;
      await expectFreshSessionWorks();
    });
  }

  it('sends an error whose message is past the wire\'s 4,096 code points cut to them, well-formed, and the channel stays open', async () => {
    const child = await startFixture();
    const refused = await child.channel.request('echo', { misbehave: 'refuse_long' }).then(
      () => expect.fail('the echo is refused'),
      (error: unknown) => error as Error & { code: string },
    );
    expect(refused.code).to.equal('bad_request');
    expect([...refused.message]).to.have.length(4096);
    expect(refused.message.startsWith('\ufffdlong refusal ')).to.equal(true);
    expect(child.channel.state).to.equal('open');
    expect(await child.channel.request('ping', {})).to.be.an('object');
    child.kill();
    await child.exited;
  });

  it('discards the child after a corrupted frame (bad_mac), and a fresh session works', async () => {
    const child = await startFixture();
    const capture = interceptWrites(child);
    void child.channel.request('echo', { n: 1 }).catch(() => undefined);
    capture.release();
    const line = capture.lines[0]!;
    line[line.indexOf('"n":1') + 4] = 0x39;
    child.process.stdin!.write(line);
    expect(await poisonCodeOf(child)).to.equal('bad_mac');
    await expectFreshSessionWorks();
  });

  it('discards the child after a replayed frame (bad_sequence)', async () => {
    const child = await startFixture();
    const capture = interceptWrites(child);
    const answer = child.channel.request('echo', { n: 1 });
    capture.release();
    child.process.stdin!.write(capture.lines[0]!);
    await answer;
    child.process.stdin!.write(capture.lines[0]!);
    expect(await poisonCodeOf(child)).to.equal('bad_sequence');
    await expectFreshSessionWorks();
  });

  it('discards the child after reordered frames (bad_sequence)', async () => {
    const child = await startFixture();
    const capture = interceptWrites(child);
    void child.channel.request('echo', { n: 1 }).catch(() => undefined);
    void child.channel.request('echo', { n: 2 }).catch(() => undefined);
    capture.release();
    child.process.stdin!.write(capture.lines[1]!);
    child.process.stdin!.write(capture.lines[0]!);
    expect(await poisonCodeOf(child)).to.equal('bad_sequence');
  });

  it('discards the child when its own frame is reflected back to it (frame_reflected)', async () => {
    const child = await startFixture();
    const seen: Buffer[] = [];
    child.process.stdout!.on('data', (chunk: Buffer) => seen.push(chunk));
    await child.channel.request('ping', {});
    const lines = Buffer.concat(seen).toString('utf8').split('\n').filter(Boolean);
    child.process.stdin!.write(lines[lines.length - 1] + '\n');
    expect(await poisonCodeOf(child)).to.equal('frame_reflected');
  });

  it('discards the child after an oversized frame, refused before its newline (frame_too_large)', async () => {
    const child = await startFixture({ limits: { maxFrameBytes: 4096, maxDepth: 32 } });
    child.process.stdin!.write(Buffer.alloc(4097, 0x61));
    expect(await poisonCodeOf(child)).to.equal('frame_too_large');
  });

  it('discards the child after a frame that does not match its message schema (schema_violation)', async () => {
    const child = await startFixture();
    const raw = child.channel.endpoint.sealRawBody('ping', 'q1', Buffer.from('{"unexpected":1}'));
    child.process.stdin!.write(raw);
    expect(await poisonCodeOf(child)).to.equal('schema_violation');
  });

  it('discards the child after a request kind it does not serve (unexpected_message)', async () => {
    const child = await startFixture();
    const raw = child.channel.endpoint.sealRawBody('execute', 'q1', Buffer.from('{}'));
    child.process.stdin!.write(raw);
    expect(await poisonCodeOf(child)).to.equal('unexpected_message');
  });

  for (const [name, preamble, code] of [
    ['garbage', 'hello there\n', 'preamble_malformed'],
    ['oversized', 'x'.repeat(5000), 'preamble_too_large'],
    ['non-object', '[1,2,3]\n', 'preamble_malformed'],
  ] as const) {
    it(`refuses a ${name} preamble before any frame (${code}, exit 65)`, async () => {
      const child = spawn(process.execPath, [distPath('test', 'fixtures', 'wire-child.js')], { stdio: ['pipe', 'pipe', 'pipe'] });
      const stderr: Buffer[] = [];
      const stdout: Buffer[] = [];
      child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
      child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
      child.stdin.write(preamble);
      const [exitCode] = (await once(child, 'close')) as [number];
      expect(exitCode).to.equal(65);
      expect(Buffer.concat(stdout).length, 'nothing is written to the frame channel').to.equal(0);
      const log = Buffer.concat(stderr).toString('utf8');
      expect(log).to.contain('"event":"preamble_refused"').and.to.contain(`"code":"${code}"`);
    });
  }

  it('delivers a frame the child sent in the turn it exited in (its output holds the frames of a turn until the turn ends)', async () => {
    const heads: number[] = [];
    const child = await startFixture({ onHead: (head) => void heads.push(head) });
    const answer = child.channel.request('echo', { misbehave: 'head_then_exit' }).catch((e: unknown) => e);
    expect(await child.exited).to.deep.equal({ code: 0, signal: null });
    await child.drained;
    expect(heads, 'the head frame written just before process.exit').to.deep.equal([7]);
    expect(await answer, 'the echo is never answered: the channel closed').to.have.property('code', 'channel_closed');
  });

  it('lets the child finish and leave cleanly when its stdin ends', async () => {
    const child = await startFixture();
    await child.channel.request('ping', {});
    child.process.stdin!.end();
    expect(await child.exited).to.deep.equal({ code: 0, signal: null });
  });
});
