// The adapter host's answers (executor-proc/adapters/host-protocol.ts): the
// message schema leaves a result's value to the closed schema of its call,
// so these cases prove that every value outside that schema is still
// refused — as indeterminate, before any report could be signed from it.
import { expect } from 'chai';
import { AdapterHost } from '../../../executor-proc/adapters/host-client.js';
import { hostMessageSchema } from '../../../executor-proc/adapters/host-protocol.js';
import { codeOf } from '../../helpers/codes.js';

const result = (value: unknown) => ({ type: 'result', id: 7, value });

/** The value of a result message, as the executor's message check passes it on. */
function delivered(value: unknown): unknown {
  const message = hostMessageSchema.parse(result(value));
  if (message.type !== 'result') throw new Error(`parsed as ${message.type}`);
  return message.value;
}

describe('executor-proc adapter host answers', () => {
  const refusedExecute: Array<[string, unknown]> = [
    ['a bare string', 'applied'],
    ['null', null],
    ['no value at all', undefined],
    ['an unknown outcome', { outcome: 'done' }],
    ['an extra member', { outcome: 'applied', output: 1, extra: true }],
    ['a negative cost', { outcome: 'applied', costUnits: -1 }],
    ['a fractional cost', { outcome: 'applied', costUnits: 1.5 }],
    ['an output that is no JSON value', { outcome: 'applied', output: new Date(0) }],
    ['not_applied without its reason', { outcome: 'not_applied' }],
    ['a reason past 4096 characters', { outcome: 'not_applied', reason: 'x'.repeat(4097) }],
  ];
  for (const [what, value] of refusedExecute) {
    it(`refuses an execute result that is ${what}: indeterminate, though the message itself is well formed`, () => {
      expect(codeOf(() => AdapterHost.executeResult(delivered(value)))).to.equal('indeterminate');
    });
  }

  it('takes the execute results of the contract, output and cost as sent', () => {
    const applied = { outcome: 'applied', output: { lines: ['a', 'é😀'], n: 1, ok: true, none: null }, costUnits: 3 };
    expect(AdapterHost.executeResult(delivered(applied))).to.deep.equal(applied);
    expect(AdapterHost.executeResult({ outcome: 'not_applied', reason: 'r' })).to.deep.equal({ outcome: 'not_applied', reason: 'r' });
    expect(AdapterHost.executeResult({ outcome: 'cancelled' })).to.deep.equal({ outcome: 'cancelled' });
  });

  it('refuses a reconcile result outside its schema: indeterminate', () => {
    for (const value of ['applied', { outcome: 'applied', costUnits: 1 }, { outcome: 'indeterminate' }, { outcome: 'maybe' }]) {
      expect(codeOf(() => AdapterHost.reconcileResult(value)), JSON.stringify(value)).to.equal('indeterminate');
    }
    expect(AdapterHost.reconcileResult({ outcome: 'not_applied' })).to.deep.equal({ outcome: 'not_applied' });
  });

  it('refuses a result message with another member or a fractional id', () => {
    expect(hostMessageSchema.safeParse({ ...result(1), extra: 1 }).success).to.equal(false);
    expect(hostMessageSchema.safeParse({ type: 'result', id: 1.5, value: 1 }).success).to.equal(false);
  });
});
