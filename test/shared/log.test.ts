// The JSON log line (docs/PROTOCOL.md §11.7): its members in their order, and
// fields that can never rename the event or change the level, since a host
// acts on some events (store_migrating extends the wait for a hello) and a
// child relays other processes' logs (an adapter's) through its own.
import { expect } from 'chai';
import { createLogger } from '../../shared/log.js';
import { LOG_ENVELOPE, adapterLogFields, ownFields } from '../../executor-proc/adapters/host/serve.js';

function captured(): { lines: Array<Record<string, unknown>>; log: ReturnType<typeof createLogger> } {
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ role: 'executor', pid: 7 }, { level: 'debug', write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { lines, log };
}

describe('the JSON log line', () => {
  it('keeps ts, level, the base, event, then the fields, in that order', () => {
    const { lines, log } = captured();
    log.warn('adapter_said', { detail: 'x' });
    expect(Object.keys(lines[0]!)).to.deep.equal(['ts', 'level', 'role', 'pid', 'event', 'detail']);
  });

  it('never lets a field rename the event or change the level', () => {
    const { lines, log } = captured();
    log.info('adapter_log', { event: 'store_migrating', level: 'error', store: 'forged' });
    expect(lines[0]).to.include({ event: 'adapter_log', level: 'info', store: 'forged' });
    expect(Object.keys(lines[0]!).slice(0, 5)).to.deep.equal(['ts', 'level', 'role', 'pid', 'event']);
  });

  it('writes a lone surrogate as U+FFFD, never as an escape a strict reader refuses (serde_json: lone leading surrogate)', () => {
    const raw: string[] = [];
    const log = createLogger({ role: 'executor' }, { level: 'debug', write: (line) => raw.push(line) });
    log.warn('outcome_unknown', { reason: 'x\ud800y\udc00z', [`k\ud800`]: 1, pair: '😀' });
    expect(raw[0]).to.not.match(/\\ud[89a-f]/i);
    const line = JSON.parse(raw[0]!) as Record<string, unknown>;
    expect(line.reason).to.equal('x\ufffdy\ufffdz');
    expect(line.pair, 'a pair is kept').to.equal('😀');
  });

  it("keeps an adapter's own log fields from naming the line's process, event or error: they are kept as adapter_<name>", () => {
    const { lines, log } = captured();
    log.info('adapter_log', adapterLogFields('fixture/x', 'said', { ts: 12, role: 'kernel', pid: 'x', name: 'kernel', sid: '00', component: 'supervisor', tool: 'other', adapter_event: 'zz', code: 'frame_malformed', detail: 'kept' }));
    expect(lines[0]).to.include({ role: 'executor', pid: 7, event: 'adapter_log', tool: 'fixture/x', adapter_event: 'said', detail: 'kept' });
    expect(lines[0]).to.include({ adapter_role: 'kernel', adapter_pid: 'x', adapter_ts: 12, adapter_code: 'frame_malformed', adapter_tool: 'other' });
    expect(lines[0]).to.not.have.property('code');
    expect(typeof lines[0]!.ts).to.equal('string');
    for (const key of LOG_ENVELOPE) expect(ownFields({ [key]: 1 }), key).to.deep.equal({ [`adapter_${key}`]: 1 });
  });
});
