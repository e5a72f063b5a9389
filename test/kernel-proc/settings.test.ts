import { expect } from 'chai';
import { isCustodyError } from '../../shared/errors.js';
import { DEFAULT_GRANT, argumentBytesFor, parseKernelSettings } from '../../shared/protocol/kernel-settings.js';

function refusal(raw: unknown): string {
  try {
    parseKernelSettings(raw);
  } catch (error) {
    expect(isCustodyError(error, 'config_invalid'), String(error)).to.equal(true);
    return (error as Error).message;
  }
  return expect.fail('expected config_invalid');
}

describe('kernel-proc: settings', () => {
  it('gives every bound its default from an empty settings object', () => {
    const settings = parseKernelSettings({});
    expect(settings).to.deep.include({
      nonce_ttl_ms: 120_000,
      nonce_capacity: 1024,
      max_request_bytes: 65_536,
      argument_bytes_default: 32_768,
      history_per_operation: 16,
      sweep_interval_ms: 1000,
      execution_window_ms: 120_000,
      commit_batch_max: 32,
    });
    expect(settings.default_grant).to.deep.equal(DEFAULT_GRANT);
    expect(DEFAULT_GRANT).to.deep.equal({ tool: 'review-notes/append', subject: '*', max_invocations: 4, max_cost_units: null, ttl_ms: 3_600_000 });
  });

  it('defaults the execution window to the nonce TTL', () => {
    expect(parseKernelSettings({ nonce_ttl_ms: 5000 }).execution_window_ms).to.equal(5000);
    expect(parseKernelSettings({ nonce_ttl_ms: 5000, execution_window_ms: 900 }).execution_window_ms).to.equal(900);
  });

  // ARCHITECTURE.md §10: these bounds are configurable lower only.
  const ceilings: Array<[string, number]> = [
    ['nonce_ttl_ms', 120_000],
    ['nonce_capacity', 1024],
    ['history_per_operation', 16],
    ['max_request_bytes', 1024 * 1024],
    ['commit_batch_max', 1024],
  ];
  for (const [key, ceiling] of ceilings) {
    it(`accepts ${key} at ${ceiling} and refuses ${ceiling + 1}`, () => {
      expect((parseKernelSettings({ [key]: ceiling }) as unknown as Record<string, number>)[key]).to.equal(ceiling);
      expect(refusal({ [key]: ceiling + 1 })).to.match(new RegExp(key));
    });
  }

  it('accepts history_per_operation at its minimum of 4 and refuses 3', () => {
    expect(parseKernelSettings({ history_per_operation: 4 }).history_per_operation).to.equal(4);
    expect(refusal({ history_per_operation: 3 })).to.match(/history_per_operation/);
  });

  it('lowers the default argument bound with max_request_bytes when it is not set', () => {
    expect(parseKernelSettings({ max_request_bytes: 1000 }).argument_bytes_default).to.equal(1000);
    expect(parseKernelSettings({ max_request_bytes: 1000, argument_bytes_default: 10 }).argument_bytes_default).to.equal(10);
  });

  it('picks a tool own argument bound over the default', () => {
    const settings = parseKernelSettings({ argument_bytes_default: 100, argument_bytes_per_tool: { 'review-notes/append': 50 } });
    expect(argumentBytesFor(settings, 'review-notes/append')).to.equal(50);
    expect(argumentBytesFor(settings, 'other/tool')).to.equal(100);
  });

  it('refuses an argument bound larger than the request bound that carries it', () => {
    expect(refusal({ max_request_bytes: 1000, argument_bytes_default: 1001 })).to.match(/argument bound for default \(1001 bytes\) exceeds max_request_bytes \(1000\)/);
    expect(refusal({ max_request_bytes: 1000, argument_bytes_default: 10, argument_bytes_per_tool: { 'a/b': 1001 } })).to.match(/a\/b/);
  });

  it('refuses unknown keys, non-integers and malformed tool names', () => {
    expect(refusal({ nonce_ttl: 5 })).to.match(/nonce_ttl/);
    expect(refusal({ nonce_capacity: 1.5 })).to.match(/nonce_capacity/);
    expect(refusal({ argument_bytes_per_tool: { 'Not A Tool': 10 } })).to.match(/argument_bytes_per_tool/);
  });

  it('takes a custom default grant or none', () => {
    expect(parseKernelSettings({ default_grant: null }).default_grant).to.equal(null);
    const grant = { tool: 'x/*', subject: 'alice', max_invocations: 2, max_cost_units: 10, ttl_ms: 60_000 };
    expect(parseKernelSettings({ default_grant: grant }).default_grant).to.deep.equal(grant);
    expect(refusal({ default_grant: { ...grant, extra: 1 } })).to.match(/default_grant/);
  });
});
