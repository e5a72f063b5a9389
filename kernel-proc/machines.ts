// The kernel's state machines as data (STYLE.md): operations, budget holds
// and execution nonces. These tables are the only place a move is allowed;
// the store copies them into `state_transitions` at provisioning and its
// triggers refuse any UPDATE that is not in them, so a bug in the code above
// cannot skip a check (ARCHITECTURE.md §6.1, ARCHITECTURE.md §6.4, the hold machine).
import { defineMachine } from '../shared/state-machine.js';
import type { OperationState } from '../shared/protocol/kernel-messages.js';

/**
 * An operation's life. Terminal states have no way out: race H1 (ARCHITECTURE.md §6.5)
 * is that nothing moves an operation out of a terminal state, so a
 * late start on an expired operation cannot release its hold a second time.
 */
export const OPERATION_MACHINE = defineMachine<OperationState>('operation', {
  reserved: ['dispatch_committed', 'expired', 'start_denied'],
  dispatch_committed: ['awaiting_report', 'unknown', 'completed', 'released', 'finalization_denied'],
  // After a kernel restart: the original report still settles it (ARCHITECTURE.md §6.3).
  awaiting_report: ['unknown', 'completed', 'released', 'finalization_denied'],
  // The hold stays; a report retained later still settles it (race H4a (ARCHITECTURE.md §6.5)).
  unknown: ['completed', 'released', 'finalization_denied'],
  completed: [],
  expired: [],
  denied: [],
  start_denied: [],
  released: [],
  finalization_denied: [],
});

/** The states an operation may be created in: a reserve allows or denies. */
export const INITIAL_OPERATION_STATES: readonly OperationState[] = ['reserved', 'denied'];

/** States in which a committed start waits for its executor's report. */
export const SETTLEABLE_STATES: readonly OperationState[] = ['dispatch_committed', 'awaiting_report', 'unknown'];

/**
 * How many more receipts an operation's life cycle may still need from a
 * state: an `unknown` mark and a settlement from a committed start, a
 * settlement from `unknown`. The history bound keeps this room free, so a
 * bounded history can never block the receipt that ends an operation.
 */
export function receiptsStillNeeded(state: OperationState): number {
  switch (state) {
    case 'reserved': // an allowed start signs an authorization, not a receipt; then as below
    case 'dispatch_committed':
    case 'awaiting_report':
      return 2;
    case 'unknown':
      return 1;
    default:
      return 0;
  }
}

/**
 * Every release here happens inside the deciding SQLite transaction, so this
 * kernel never needs the receipt disposition `release_unconfirmed` (kept in
 * the receipt schema for a budget that lives elsewhere, ARCHITECTURE.md §14).
 */
export const HOLD_STATES = ['reserved', 'released', 'consumed'] as const;
export type HoldState = (typeof HOLD_STATES)[number];

/** A hold is disposed of at most once (ARCHITECTURE.md §6.4: `disp <= 1`). */
export const HOLD_MACHINE = defineMachine<HoldState>('hold', {
  reserved: ['released', 'consumed'],
  released: [],
  consumed: [],
});

export const NONCE_STATES = ['live', 'used', 'expired', 'voided'] as const;
export type NonceState = (typeof NONCE_STATES)[number];

/** A nonce is used once, expires once, or is voided by a refused start; never revived. */
export const NONCE_MACHINE = defineMachine<NonceState>('nonce', {
  live: ['used', 'expired', 'voided'],
  used: [],
  expired: [],
  voided: [],
});

export const MACHINES = [OPERATION_MACHINE, HOLD_MACHINE, NONCE_MACHINE] as const;

/** Every legal move of every machine, as rows for the store's `state_transitions` table. */
export function transitionRows(): Array<{ machine: string; from: string; to: string }> {
  return MACHINES.flatMap((machine) =>
    (machine.states as string[]).flatMap((from) =>
      (machine.table as Record<string, readonly string[]>)[from]!.map((to) => ({ machine: machine.name, from, to })),
    ),
  );
}
