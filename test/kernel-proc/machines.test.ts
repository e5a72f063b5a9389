import { expect } from 'chai';
import { isCustodyError } from '../../shared/errors.js';
import { OPERATION_STATES } from '../../shared/protocol/kernel-messages.js';
import {
  HOLD_MACHINE,
  INITIAL_OPERATION_STATES,
  NONCE_MACHINE,
  OPERATION_MACHINE,
  SETTLEABLE_STATES,
  receiptsStillNeeded,
  transitionRows,
} from '../../kernel-proc/machines.js';

describe('kernel-proc: state machines as data', () => {
  it('knows every operation state of the wire schema and no other', () => {
    expect([...OPERATION_MACHINE.states].sort()).to.deep.equal([...OPERATION_STATES].sort());
  });

  it('makes exactly completed, expired, denied, start_denied, released and finalization_denied terminal', () => {
    expect(OPERATION_MACHINE.terminal.sort()).to.deep.equal(
      ['completed', 'denied', 'expired', 'finalization_denied', 'released', 'start_denied'].sort(),
    );
  });

  it('never moves an operation out of a terminal state (model H1)', () => {
    for (const from of OPERATION_MACHINE.terminal) {
      for (const to of OPERATION_STATES) expect(OPERATION_MACHINE.canMove(from, to), `${from} -> ${to}`).to.equal(false);
    }
  });

  it('refuses an illegal move with a typed illegal_transition naming both states', () => {
    try {
      OPERATION_MACHINE.assertMove('expired', 'start_denied', 'operation x');
      expect.fail('expected a refusal');
    } catch (error) {
      expect(isCustodyError(error, 'illegal_transition')).to.equal(true);
      expect((error as Error).message).to.match(/expired to start_denied for operation x/);
    }
  });

  it('lets a reservation end only by a committed start, its expiry or a start refusal', () => {
    expect([...OPERATION_MACHINE.table.reserved].sort()).to.deep.equal(['dispatch_committed', 'expired', 'start_denied']);
  });

  it('lets an unknown operation still be settled by a report, but never go back to waiting', () => {
    expect([...OPERATION_MACHINE.table.unknown].sort()).to.deep.equal(['completed', 'finalization_denied', 'released']);
    expect(SETTLEABLE_STATES).to.include.members(['dispatch_committed', 'awaiting_report', 'unknown']);
  });

  it('creates operations only as reserved or denied', () => {
    expect([...INITIAL_OPERATION_STATES].sort()).to.deep.equal(['denied', 'reserved']);
  });

  it('disposes of a hold at most once and never revives a nonce', () => {
    expect(HOLD_MACHINE.terminal.sort()).to.deep.equal(['consumed', 'released']);
    expect(HOLD_MACHINE.canMove('released', 'consumed')).to.equal(false);
    expect(NONCE_MACHINE.terminal.sort()).to.deep.equal(['expired', 'used', 'voided']);
  });

  it('keeps history room for an unknown mark and a settlement after a committed start, none after the end', () => {
    expect(receiptsStillNeeded('dispatch_committed')).to.equal(2);
    expect(receiptsStillNeeded('unknown')).to.equal(1);
    for (const state of OPERATION_MACHINE.terminal) expect(receiptsStillNeeded(state)).to.equal(0);
  });

  it('lists each legal move once as a row for the store', () => {
    const rows = transitionRows();
    const keys = rows.map((row) => `${row.machine}:${row.from}:${row.to}`);
    expect(new Set(keys).size).to.equal(keys.length);
    expect(keys).to.include('operation:reserved:expired');
    expect(keys).to.not.include('operation:expired:start_denied');
  });
});
