// Two fixed bounds of the control API, at the bound and one past (no key:
// neither is a capacity an operator tunes): the request target's 4,096
// characters (docs/SECURITY.md) and a call's wait_ms of at most an hour
// (supervisor/api/wait.ts), the same bound the CLI's --wait holds.
import { expect } from 'chai';
import { authorizeBody, invokeBody } from '../../../supervisor/api/bodies.js';
import { MAX_TARGET_CHARS, parseTarget } from '../../../supervisor/api/target.js';
import { MAX_WAIT_MS } from '../../../supervisor/api/wait.js';

function refusal(run: () => unknown): { code?: string; message: string } {
  try {
    run();
  } catch (error) {
    return error as { code?: string; message: string };
  }
  return expect.fail('it was taken');
}

describe('the control API: the request target and wait_ms, at the bound and one past', () => {
  it(`takes a target of ${MAX_TARGET_CHARS} characters and refuses one of ${MAX_TARGET_CHARS + 1} with target_invalid, saying what to shorten`, () => {
    const target = (length: number) => `/v1/operations/${'a'.repeat(100)}?x=${'b'.repeat(length - 118)}`;
    expect(target(MAX_TARGET_CHARS)).to.have.length(MAX_TARGET_CHARS);
    expect(() => parseTarget(target(MAX_TARGET_CHARS))).to.not.throw();
    const refused = refusal(() => parseTarget(target(MAX_TARGET_CHARS + 1)));
    expect(refused.code).to.equal('target_invalid');
    expect(refused.message).to.contain(`${MAX_TARGET_CHARS + 1} characters exceeds ${MAX_TARGET_CHARS}`).and.to.contain('shorten the name or the query');
    expect(refused.message, 'it was origin-form already').to.not.contain('send an origin-form target');
  });

  it(`takes wait_ms of ${MAX_WAIT_MS} and 0 and refuses ${MAX_WAIT_MS + 1} and -1, in every body that has one`, () => {
    for (const [what, schema, body] of [
      ['invoke', invokeBody, { tool: 'review-notes/append' }],
      ['authorize', authorizeBody, { tool: 'review-notes/append', operation: 'op-1' }],
    ] as const) {
      for (const wait_ms of [0, MAX_WAIT_MS]) expect(schema.safeParse({ ...body, wait_ms }).success, `${what} ${wait_ms}`).to.equal(true);
      for (const wait_ms of [-1, MAX_WAIT_MS + 1]) expect(schema.safeParse({ ...body, wait_ms }).success, `${what} ${wait_ms}`).to.equal(false);
    }
  });
});
