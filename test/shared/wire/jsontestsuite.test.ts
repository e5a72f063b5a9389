// JSONTestSuite (nst/JSONTestSuite) against the frame decoder and against a
// live channel: every n_ file refused and poisoning (each over a channel
// pair in memory, the same channel code, and a sample of them over a child
// process, which leaves with exit 70), every y_ object accepted unchanged,
// every i_ file the documented answer in docs/vectors/jsontestsuite-i.json.
import { expect } from 'chai';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { decodeJsonObject } from '../../../shared/wire/decode.js';
import { channelPair } from '../../helpers/channel-pair.js';
import { startFixture } from '../../helpers/children.js';
import { REPO_ROOT, requireVectors } from '../../helpers/vectors.js';

interface Case {
  readonly name: string;
  readonly bytes: Buffer;
}

type Outcome = { answer: 'accepted'; value: unknown } | { answer: 'refused'; code: string };

/** Each body as an echo request on a live channel; a fresh child after every poisoning. */
async function sendOnLiveChannels(cases: readonly Case[], workers: number): Promise<Map<string, Outcome>> {
  const outcomes = new Map<string, Outcome>();
  const queue = [...cases];
  const work = async () => {
    let child = await startFixture();
    for (let next = queue.shift(); next; next = queue.shift()) {
      try {
        const value = await child.channel.requestRawBody('echo', next.bytes, 'body');
        outcomes.set(next.name, { answer: 'accepted', value });
      } catch {
        const exit = await child.exited;
        await child.drained;
        const poisoned = child.stderr.map((line) => JSON.parse(line) as Record<string, unknown>).find((r) => r.event === 'channel_poisoned');
        expect(exit.code, `${next.name}: the child leaves with exit 70`).to.equal(70);
        outcomes.set(next.name, { answer: 'refused', code: String(poisoned?.code) });
        child = await startFixture();
      }
    }
    await child.channel.request('shutdown', {});
    await child.exited;
  };
  await Promise.all(Array.from({ length: workers }, work));
  return outcomes;
}

/** Each body as a request on its own channel pair in memory; the code the server poisoned its channel with, or the value echoed. */
async function sendOnChannelPairs(cases: readonly Case[]): Promise<Map<string, Outcome>> {
  const outcomes = new Map<string, Outcome>();
  for (const next of cases) {
    let poisoned: string | undefined;
    const { client } = await channelPair({ onServerEnd: (reason) => (poisoned = reason.code), closeOnServerEnd: true });
    try {
      outcomes.set(next.name, { answer: 'accepted', value: await client.requestRawBody('echo', next.bytes, 'body') });
    } catch {
      outcomes.set(next.name, { answer: 'refused', code: String(poisoned) });
    }
  }
  return outcomes;
}

describe('JSONTestSuite', function () {
  this.timeout(120_000);
  const dir = requireVectors(this, 'jsontestsuite/test_parsing');
  const load = (prefix: string): Case[] =>
    readdirSync(dir)
      .filter((name) => name.startsWith(prefix))
      .sort()
      .map((name) => ({ name, bytes: readFileSync(path.join(dir, name)) }));

  const isObjectText = (bytes: Buffer) => /^\s*\{/.test(bytes.toString('latin1'));
  // Valid JSON whose meaning RFC 8259 leaves to the reader: the protocol refuses
  // an object with a member twice (docs/PROTOCOL.md §3, step 6).
  const DUPLICATED_MEMBER = ['y_object_duplicated_key.json', 'y_object_duplicated_key_and_value.json'];

  describe('the frame decoder', () => {
    it('refuses every n_ file', () => {
      const cases = load('n_');
      expect(cases).to.have.length(188);
      for (const { name, bytes } of cases) {
        expect(() => decodeJsonObject(bytes, 32), name).to.throw().with.property('code').that.matches(/^frame_(malformed|too_deep)$/);
      }
    });

    it('accepts every y_ file that is an object, and refuses the rest as not an object', () => {
      for (const { name, bytes } of load('y_')) {
        if (DUPLICATED_MEMBER.includes(name)) {
          expect(() => decodeJsonObject(bytes, 32), name).to.throw(/twice in one object/).with.property('code', 'frame_malformed');
        } else if (isObjectText(bytes)) {
          expect(decodeJsonObject(bytes, 32), name).to.deep.equal(JSON.parse(bytes.toString('utf8')));
        } else {
          expect(() => decodeJsonObject(bytes, 32), name).to.throw().with.property('code', 'frame_malformed');
        }
      }
    });
  });

  describe('on a live channel', () => {
    it('refuses every n_ file sent as a frame body, poisoning the channel each time', async () => {
      const outcomes = await sendOnChannelPairs(load('n_'));
      expect(outcomes.size).to.equal(188);
      for (const [name, outcome] of outcomes) {
        expect(outcome.answer, name).to.equal('refused');
        expect((outcome as { code: string }).code, name).to.match(/^(frame_malformed|frame_too_deep)$/);
      }
    });

    it('refuses n_ files sent to a child process the same way, the child leaving with exit 70 each time', async () => {
      // Every twelfth file: a child process costs ~0.25 s to start, and the pairs above hold every file.
      const sample = load('n_').filter((_, index) => index % 12 === 0);
      expect(sample).to.have.length(16);
      const outcomes = await sendOnLiveChannels(sample, 4);
      for (const [name, outcome] of outcomes) {
        expect(outcome.answer, name).to.equal('refused');
        expect((outcome as { code: string }).code, name).to.match(/^(frame_malformed|frame_too_deep|schema_violation)$/);
      }
      expect(outcomes.size).to.equal(16);
    });

    it('accepts every y_ object and echoes the same value, but refuses a member given twice', async () => {
      // A frame is one line: an LF between tokens is sent as a space, the same JSON value.
      const objects = load('y_')
        .filter((c) => isObjectText(c.bytes))
        .map((c) => ({ name: c.name, bytes: Buffer.from(c.bytes.toString('latin1').replace(/\n/g, ' '), 'latin1') }));
      expect(objects).to.have.length(12);
      const outcomes = await sendOnLiveChannels(objects, 1);
      for (const { name, bytes } of objects) {
        if (DUPLICATED_MEMBER.includes(name)) {
          expect(outcomes.get(name), name).to.deep.equal({ answer: 'refused', code: 'frame_malformed' });
          continue;
        }
        expect(outcomes.get(name), name).to.deep.equal({ answer: 'accepted', value: JSON.parse(bytes.toString('utf8')) as unknown });
      }
    });

    it('answers every i_ file as documented in docs/vectors/jsontestsuite-i.json', async () => {
      const documented = JSON.parse(readFileSync(path.join(REPO_ROOT, 'docs', 'vectors', 'jsontestsuite-i.json'), 'utf8')) as Record<string, string>;
      const outcomes = await sendOnLiveChannels(load('i_'), 4);
      const answers = Object.fromEntries([...outcomes].map(([name, o]) => [name, o.answer === 'accepted' ? 'accepted' : o.code]));
      expect(answers).to.deep.equal(documented);
    });
  });
});
