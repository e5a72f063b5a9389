// The argument bound the API and the CLI apply is the kernel's, resolved the
// same way, and never more than fits a reserve_start body of max_request_bytes.
import { expect } from 'chai';
import { canonicalBytes } from '../../../shared/canonical/jcs.js';
import { RESERVE_ENVELOPE_BYTES, argumentBytesBound } from '../../../shared/protocol/bounds.js';
import { argumentBytesFor, parseKernelSettings } from '../../../shared/protocol/kernel-settings.js';

const TOOL = 'review-notes/append';

describe('the argument bound shared by the kernel, the API and the CLI', () => {
  const CASES: Array<[string, Record<string, unknown>, number]> = [
    ['the defaults', {}, 32 * 1024],
    ['a lower default', { argument_bytes_default: 2048 }, 2048],
    ['a per-tool entry', { argument_bytes_default: 2048, argument_bytes_per_tool: { [TOOL]: 100 } }, 100],
    ['a max_request_bytes lower than 32 KiB', { max_request_bytes: 16 * 1024 }, 16 * 1024 - RESERVE_ENVELOPE_BYTES],
    ['an argument bound equal to max_request_bytes', { max_request_bytes: 1024, argument_bytes_default: 1024 }, 1024 - RESERVE_ENVELOPE_BYTES],
  ];
  for (const [what, settings, expected] of CASES) {
    it(`${what}: ${expected} bytes, never above the kernel's own bound`, () => {
      const bound = argumentBytesBound(settings, TOOL);
      expect(bound).to.equal(expected);
      expect(bound).to.be.at.most(argumentBytesFor(parseKernelSettings(settings), TOOL));
    });
  }

  it('arguments at the bound with every other field at its longest make a reserve_start body of exactly max_request_bytes, a reserve body less', () => {
    const settings = { max_request_bytes: 1024, argument_bytes_default: 1024 };
    const bound = argumentBytesBound(settings, TOOL);
    const args = { note: 'x'.repeat(bound - '{"note":""}'.length) };
    expect(canonicalBytes(args).length).to.equal(bound);
    const reserve = { request_id: 'r'.repeat(128), subject: 's'.repeat(128), tool: 't'.repeat(128), arguments: args, capability_id: 'c'.repeat(128), cost_units: Number.MAX_SAFE_INTEGER };
    expect(canonicalBytes({ ...reserve, executor_id: 'e'.repeat(128), request_binding_hash: 'b'.repeat(64) }).length).to.equal(settings.max_request_bytes);
    expect(canonicalBytes(reserve).length).to.be.below(settings.max_request_bytes);
  });
});
