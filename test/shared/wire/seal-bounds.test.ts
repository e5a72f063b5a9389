// The sender's end of the frame bounds: a frame the peer would refuse as too
// deep is refused before it is written (no send, no poisoning, the sequence
// number not consumed), and the arguments' depth budget the API applies is
// exactly what fits the frame bound in every message that carries arguments.
import { expect } from 'chai';
import { type ARGUMENTS_ENVELOPE_DEPTH, argumentsDepthBudget } from '../../../shared/protocol/bounds.js';
import { MESSAGES } from '../../../shared/protocol/messages.js';
import { measureDepth } from '../../../shared/wire/decode.js';
import { DEFAULT_FRAME_LIMITS } from '../../../shared/wire/frame-reader.js';
import { SessionEndpoint } from '../../../shared/wire/session.js';
import { createSessionSecrets } from '../../../shared/wire/session-keys.js';
import { channelPair } from '../../helpers/channel-pair.js';
import { codeOfAnswer } from '../../helpers/codes.js';

const HEX = 'a'.repeat(64);

/** An object nested `depth` levels (the object itself is level 1): {"x":[[…1…]]}. */
function nested(depth: number): Record<string, unknown> {
  let value: unknown = 1;
  for (let i = 1; i < depth; i++) value = [value];
  return { x: value };
}

/** A valid request of each kind that carries arguments, around `args`. */
const CARRIERS: Record<keyof typeof ARGUMENTS_ENVELOPE_DEPTH, (args: Record<string, unknown>) => Record<string, unknown>> = {
  reserve: (args) => ({ request_id: 'r-1', subject: 'agent', tool: 'review-notes/append', arguments: args, capability_id: null, cost_units: 0 }),
  start: (args) => ({ request_id: 'r-1', nonce_id: 'n-1', arguments: args }),
  reserve_start: (args) => ({ request_id: 'r-1', subject: 'agent', tool: 'review-notes/append', arguments: args, capability_id: null, cost_units: 0, executor_id: 'default', request_binding_hash: HEX }),
  execute: (args) => ({
    authorization: '{}',
    expected: { operation_id: HEX, request_id: 'r-1', request_binding_hash: HEX, capability_id: 'cap-1', capability_digest: HEX, tool: 'review-notes/append', parameters_digest: HEX },
    arguments: args,
    drop_reply: false,
  }),
};

describe('the frame depth bound at the sender', () => {
  const endpoint = () => new SessionEndpoint({ secrets: createSessionSecrets(), side: 'supervisor', self: 'supervisor', peer: 'kernel', limits: DEFAULT_FRAME_LIMITS });

  for (const [kind, carrier] of Object.entries(CARRIERS)) {
    it(`${kind}: arguments at the API's depth budget make a frame exactly at the frame bound; one level more is refused unsent`, () => {
      const budget = argumentsDepthBudget(DEFAULT_FRAME_LIMITS.maxDepth);
      expect(budget).to.equal(30);
      const body = carrier(nested(budget));
      expect(MESSAGES[kind as keyof typeof CARRIERS].request.safeParse(body).success, 'a valid request').to.equal(true);
      const sender = endpoint();
      const line = sender.seal(kind, 'q1', body);
      expect(measureDepth(line, 64)).to.equal(DEFAULT_FRAME_LIMITS.maxDepth);
      let code: string | undefined;
      try {
        sender.seal(kind, 'q2', carrier(nested(budget + 1)));
      } catch (error) {
        code = (error as { code?: string }).code;
      }
      expect(code).to.equal('frame_too_deep');
      expect(sender.nextSendSeq, 'the refused frame consumed no sequence number').to.equal(1);
    });
  }

  it('on a live channel: a too-deep request is refused locally, the child never sees it and the channel goes on', async () => {
    const seen: unknown[] = [];
    let serverEnd: string | null = null;
    const { client } = await channelPair({
      onServerEnd: (reason) => (serverEnd = reason.code),
      handler: (_kind, body) => {
        seen.push(body);
        return Promise.resolve(body);
      },
    });
    // echo's body is the frame's body (level 2): a body nested 31 levels makes a 32-level frame.
    expect(await codeOfAnswer(client.request('echo', nested(DEFAULT_FRAME_LIMITS.maxDepth - 1)))).to.equal('answered');
    expect(await codeOfAnswer(client.request('echo', nested(DEFAULT_FRAME_LIMITS.maxDepth)))).to.equal('frame_too_deep');
    expect(await codeOfAnswer(client.request('echo', { after: true }))).to.equal('answered');
    expect(seen, 'the child saw the two frames within the bound only').to.have.length(2);
    expect(client.state).to.equal('open');
    expect(serverEnd, 'the child did not poison its channel').to.equal(null);
    client.close();
  });
});
