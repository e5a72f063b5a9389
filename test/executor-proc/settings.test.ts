// The executor's settings: every bound has its default, is accepted at its
// limit and refused one past it, naming the setting.
import { expect } from 'chai';
import { isCustodyError } from '../../shared/errors.js';
import { DEFAULTS, parseExecutorSettings } from '../../shared/protocol/executor-settings.js';

function refusal(raw: unknown): string {
  try {
    parseExecutorSettings(raw);
  } catch (error) {
    expect(isCustodyError(error, 'config_invalid'), String(error)).to.equal(true);
    return (error as Error).message;
  }
  return expect.fail('expected config_invalid');
}

const RUNTIME_KEYS: Record<string, string> = {
  max_in_flight: 'maxInFlight',
  reconcile_per_tool: 'reconcilePerTool',
  reconcile_per_session: 'reconcilePerSession',
  reconcile_window_ms: 'reconcileWindowMs',
  adapter_deadline_ms: 'adapterDeadlineMs',
  cancel_wait_ms: 'cancelWaitMs',
  drain_timeout_ms: 'drainTimeoutMs',
  note_max_bytes: 'noteMaxBytes',
  report_head_linger_ms: 'reportHeadLingerMs',
  admitted_arguments_max: 'admittedArgumentsMax',
};

function runtimeValue(key: string, value: number): unknown {
  const runtime = parseExecutorSettings({ [key]: value }).runtime as unknown as Record<string, unknown>;
  return runtime[RUNTIME_KEYS[key]!];
}

describe('executor-proc settings', () => {
  it('gives every runtime bound its default from an empty settings object', () => {
    expect(parseExecutorSettings({}).runtime).to.deep.equal({
      maxInFlight: 64,
      reconcilePerTool: 32,
      reconcilePerSession: 128,
      reconcileWindowMs: 60_000,
      adapterDeadlineMs: 30_000,
      adapterDeadlines: {},
      cancelWaitMs: 5_000,
      drainTimeoutMs: undefined,
      noteMaxBytes: 4_096,
      reportHeadLingerMs: 50,
      admittedArgumentsMax: 1_024,
    });
    expect(DEFAULTS.reconcileWindowMs).to.equal(60_000);
  });

  const DAY_MS = 24 * 60 * 60 * 1000;
  const limits: Array<[string, 'max' | 'min', number]> = [
    ['max_in_flight', 'max', 1_024],
    ['max_in_flight', 'min', 1],
    ['reconcile_per_tool', 'max', 100_000],
    ['reconcile_per_tool', 'min', 1],
    ['reconcile_per_session', 'max', 100_000],
    ['reconcile_per_session', 'min', 1],
    ['reconcile_window_ms', 'max', DAY_MS],
    ['reconcile_window_ms', 'min', 1_000],
    ['adapter_deadline_ms', 'max', DAY_MS],
    ['cancel_wait_ms', 'max', DAY_MS],
    ['drain_timeout_ms', 'max', DAY_MS],
    ['note_max_bytes', 'max', 4_096],
    ['report_head_linger_ms', 'max', 1_000],
    ['report_head_linger_ms', 'min', 0],
    ['admitted_arguments_max', 'max', 65_536],
    ['admitted_arguments_max', 'min', 0],
  ];
  for (const [key, side, limit] of limits) {
    const past = side === 'max' ? limit + 1 : limit - 1;
    it(`accepts ${key} at its ${side === 'max' ? 'ceiling' : 'floor'} ${limit} and refuses ${past}`, () => {
      expect(runtimeValue(key, limit)).to.equal(limit);
      expect(refusal({ [key]: past })).to.match(new RegExp(key));
    });
  }

  it('accepts claim_capacity at 10 000 000 and refuses 10 000 001', () => {
    expect(parseExecutorSettings({ claim_capacity: 10_000_000 }).provision.claimCapacity).to.equal(10_000_000);
    expect(refusal({ claim_capacity: 10_000_001 })).to.match(/claim_capacity/);
  });

  it('refuses unknown keys and non-integers, naming them', () => {
    expect(refusal({ reconcile_window: 60_000 })).to.match(/reconcile_window/);
    expect(refusal({ reconcile_window_ms: 1_500.5 })).to.match(/reconcile_window_ms/);
  });
});
