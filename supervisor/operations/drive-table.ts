// What a drive does next, as one table: for each request phase (phases.ts)
// and each goal a caller drives toward, the step to take, the point to stop,
// or the refusal. The driver (driver.ts) only looks a cell up and performs
// it; nothing else decides how far a request is carried.
import type { RequestPhase } from './phases.js';

/** How far a drive carries a request. */
export const GOALS = [
  'invoke', //    a client's invoke: carried to its settlement, executed once
  'authorize', // a client's authorize: carried to its authorization, then left to the operator
  'execute', //   the operator's execute of an authorized request
  'report', //    the operator's report: settle the retained report
  'reconcile', // the operator's reconcile: ask the executor, never execute; releases a quarantined request
  'resume', //    carry on after a supervisor restart (or a sweep), as far as the request's kind goes on its own
] as const;
export type Goal = (typeof GOALS)[number];

/** Work a drive does, then it looks at the new phase again. */
export const WORK_STEPS = [
  'reserve', //          ask the kernel to reserve (kernel-steps.ts reserveStep)
  'start', //            ask the kernel to start, keeping its authorization (startStep)
  'execute', //          send execute once per drive (executor-steps.ts executeStep); executed already: stop
  'await_reconcile', //  move to reconciling: its outcome is only ever asked, never run again
  'reconcile', //        ask the executor what happened until it yields a report (reconcileStep)
  'settle', //           ask the kernel to settle the retained report (settleStep)
  'release', //          an operator's reconcile releases a quarantined request (quarantine.ts), once, on entry
] as const;

/** Answers that end a drive with the request as it stands. */
export const ANSWER_STEPS = [
  'stop', //             the goal is reached (or this goal does not go further from here)
  'replay_execute', //   execute again: the executor must replay the retained report byte for byte
  'reaffirm_receipt', // settle again: the kernel must answer the retained receipt byte for byte
] as const;

/** Refusals: the drive ends with an error to the caller. */
export const REFUSALS = [
  'not_reported', //     outcome_unknown: there is no signed report to settle yet
  'quarantined', //      request_quarantined: parked until an operator's reconcile
] as const;

export type WorkStep = (typeof WORK_STEPS)[number];
export type AnswerStep = (typeof ANSWER_STEPS)[number];
export type Refusal = (typeof REFUSALS)[number];
export type Action = WorkStep | AnswerStep | Refusal;

/** A cell: one action, or one per request kind where the kind decides (only `resume` needs that). */
export type Step = Action | { readonly invoke: Action; readonly authorize: Action };

/** The same action for every goal. */
function every(action: Action): Record<Goal, Action> {
  return { invoke: action, authorize: action, execute: action, report: action, reconcile: action, resume: action };
}

export const DRIVE_TABLE = {
  // Before an authorization every goal asks the kernel: nothing has run.
  received: every('reserve'),
  reserved: every('start'),
  authorized: {
    invoke: 'execute',
    authorize: 'stop',
    execute: 'execute',
    report: 'not_reported',
    reconcile: 'await_reconcile',
    // A restarted supervisor runs a client's invoke; an authorize walk stays the operator's.
    resume: { invoke: 'execute', authorize: 'stop' },
  },
  // Only a supervisor that died mid-execute leaves this phase behind. Asking
  // again is safe: a retained report is replayed, a claim without one is
  // outcome_unknown (→ reconciling), an unclaimed authorization runs once.
  executing: {
    invoke: 'execute',
    authorize: 'stop',
    execute: 'execute',
    report: 'not_reported',
    reconcile: 'await_reconcile',
    // An operator's interrupted execute is never run again by a restart: its outcome is asked.
    resume: { invoke: 'execute', authorize: 'await_reconcile' },
  },
  reconciling: {
    invoke: 'reconcile',
    authorize: 'stop',
    execute: 'reconcile',
    report: 'not_reported',
    reconcile: 'reconcile',
    resume: 'reconcile',
  },
  reported: {
    invoke: 'settle',
    authorize: 'stop',
    execute: 'replay_execute',
    report: 'settle',
    reconcile: 'settle',
    // An authorize walk's report is the operator's to settle (custody report).
    resume: { invoke: 'settle', authorize: 'stop' },
  },
  settled: { ...every('stop'), execute: 'replay_execute', report: 'reaffirm_receipt' },
  refused: { ...every('stop'), execute: 'replay_execute', report: 'reaffirm_receipt' },
  // Only an operator's reconcile releases it; anything else is told it is parked.
  quarantined: { ...every('quarantined'), reconcile: 'release' },
} as const satisfies Record<RequestPhase, Record<Goal, Step>>;

/** The action for a request in `phase` of `kind` driven toward `goal`. */
export function stepFor(phase: RequestPhase, goal: Goal, kind: 'invoke' | 'authorize'): Action {
  const cell: Step = DRIVE_TABLE[phase][goal];
  return typeof cell === 'string' ? cell : cell[kind];
}

/**
 * Where a released quarantined request is carried: before any authorization
 * as its kind resumes on its own; after one only reconciled (never executed again).
 */
export function goalAfterRelease(hasAuthorization: boolean): Goal {
  return hasAuthorization ? 'reconcile' : 'resume';
}
