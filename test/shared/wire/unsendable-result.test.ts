// A result the child cannot send (larger or deeper than the session's
// bounds) is still answered, with an error frame for its id, and the channel
// stays open (docs/PROTOCOL.md §5). Before frame_too_deep was answered, the
// requester of a too-deep result waited for its own deadline.
import { expect } from 'chai';
import { DEFAULT_FRAME_LIMITS } from '../../../shared/wire/frame-reader.js';
import { channelPair } from '../../helpers/channel-pair.js';
import { codeOfAnswer } from '../../helpers/codes.js';

/** An object nesting `levels` levels deep, counting itself. */
function nested(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = {};
  for (let level = 1; level < levels; level += 1) value = { d: value };
  return value;
}

describe('a result the child cannot send', () => {
  const answers = async (result: Record<string, unknown>) => {
    const { client } = await channelPair({ handler: (kind) => Promise.resolve(kind === 'echo' ? result : { now: Date.now() }) });
    const code = await codeOfAnswer(client.request('echo', {}, { timeoutMs: 5_000 }));
    const pong = await client.request('ping', {}, { timeoutMs: 5_000 });
    return { code, open: typeof pong.now === 'number' && client.state };
  };

  it('deeper than the session bound: answered frame_too_deep, the channel still open', async () => {
    // The body sits two levels inside the frame's envelope (the frame, its body).
    const { code, open } = await answers(nested(DEFAULT_FRAME_LIMITS.maxDepth));
    expect(code).to.equal('frame_too_deep');
    expect(open).to.equal('open');
  });

  it('at the session bound: answered with the result itself', async () => {
    const { client } = await channelPair({ handler: () => Promise.resolve(nested(DEFAULT_FRAME_LIMITS.maxDepth - 1)) });
    expect(await client.request('echo', {}, { timeoutMs: 5_000 })).to.deep.equal(nested(DEFAULT_FRAME_LIMITS.maxDepth - 1));
  });

  it('larger than the session bound: answered frame_too_large, the channel still open', async () => {
    const { code, open } = await answers({ big: 'x'.repeat(DEFAULT_FRAME_LIMITS.maxFrameBytes) });
    expect(code).to.equal('frame_too_large');
    expect(open).to.equal('open');
  });
});
