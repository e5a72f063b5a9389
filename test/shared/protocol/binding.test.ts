// The request binding (shared/protocol/binding.ts): what makes two reserve
// requests "the same bytes" for the kernel and the supervisor alike.
import { expect } from 'chai';
import { type BoundRequest, bindRequest, parametersDigest, requestBindingHash } from '../../../shared/protocol/binding.js';

const REQUEST: BoundRequest = { request_id: 'req-1', subject: 'agent', tool: 'review-notes/append', arguments: { note: 'a' }, capability_id: null, cost_units: 1 };

describe('the request binding', () => {
  it('is the binding hash of the request with its arguments by their digest', () => {
    const bound = bindRequest(REQUEST);
    expect(bound.parameters_digest).to.equal(parametersDigest({ note: 'a' }));
    const { arguments: _args, ...rest } = REQUEST;
    expect(bound.request_binding_hash).to.equal(requestBindingHash({ ...rest, parameters_digest: bound.parameters_digest }));
  });

  it('ignores members it does not bind: a client request and the reserve sent for it bind alike', () => {
    const submitted = { ...REQUEST, kind: 'invoke', wait_ms: 10 };
    expect(bindRequest(submitted)).to.deep.equal(bindRequest(REQUEST));
  });

  const CHANGES: Array<[string, Partial<BoundRequest>]> = [
    ['request_id', { request_id: 'req-2' }],
    ['subject', { subject: 'other' }],
    ['tool', { tool: 'review-notes/other' }],
    ['arguments', { arguments: { note: 'b' } }],
    ['capability_id', { capability_id: 'cap-1' }],
    ['cost_units', { cost_units: 2 }],
  ];
  for (const [field, change] of CHANGES) {
    it(`changes when ${field} changes`, () => {
      expect(bindRequest({ ...REQUEST, ...change }).request_binding_hash).to.not.equal(bindRequest(REQUEST).request_binding_hash);
    });
  }
});
