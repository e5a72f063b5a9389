// The JSON log line (docs/PROTOCOL.md §11.7): its members in their order, and
// fields that can never rename the event or change the level, since a host
// acts on some events (store_migrating extends the wait for a hello) and a
// child relays other processes' logs (an adapter's) through its own.
import { expect } from 'chai';
import { createLogger } from '../../shared/log.js';

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
});
