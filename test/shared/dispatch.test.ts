// Typed handler maps (shared/dispatch.ts): the compiler checks each handler
// against its kind's schemas (the @ts-expect-error lines fail the build if
// that check ever stops), and dispatch hands each body to its own kind.
import { expect } from 'chai';
import { type HandlerMap, dispatch } from '../../shared/dispatch.js';

describe('typed handler maps', () => {
  it('hand each body to the handler of its kind, with what every handler is given', async () => {
    const seen: string[] = [];
    const handlers: HandlerMap<'cancel' | 'ping', [string]> = {
      cancel: (body, frameId) => (seen.push(`cancel ${body.target} ${frameId}`), { cancelled: true }),
      ping: (_body, frameId) => (seen.push(`ping ${frameId}`), Promise.resolve({ now: 1 })),
    };
    expect(await dispatch(handlers, 'cancel', { target: 'exec-1' }, 'f1')).to.deep.equal({ cancelled: true });
    expect(await dispatch(handlers, 'ping', {}, 'f2')).to.deep.equal({ now: 1 });
    expect(seen).to.deep.equal(['cancel exec-1 f1', 'ping f2']);
  });

  it('refuse at compile time a handler that reads another kind\'s body, answers another shape, or is missing', () => {
    const handlers: HandlerMap<'cancel'> = {
      // @ts-expect-error cancel's body has `target`, not `head`
      cancel: (body: { head: number }) => ({ cancelled: body.head > 0 }),
    };
    const wrongAnswer: HandlerMap<'cancel'> = {
      // @ts-expect-error cancel answers { cancelled: boolean }
      cancel: () => ({ canceled: true }),
    };
    // @ts-expect-error every kind of the map needs its handler
    const missing: HandlerMap<'cancel' | 'ping'> = { ping: () => ({ now: 1 }) };
    expect([handlers, wrongAnswer, missing]).to.have.length(3);
  });
});
