// The life of one operation in the ledger, as data (STYLE.md). The state is
// never stored as such: it follows from the insert-once rows (no claim row,
// a claim or a refusal, a report and its status), so it can only move the
// way rows can be added. Every report insert asks this table first; a
// terminal state refuses every move, which is how a contradictory second
// outcome (a late `completed` after `reconciled_not_applied`) is refused.
import type { ReportStatus } from '../shared/protocol/artifacts.js';
import { defineMachine } from '../shared/state-machine.js';

export type ClaimState = 'unclaimed' | 'claimed' | ReportStatus;

export const CLAIM_MACHINE = defineMachine<ClaimState>('claim', {
  // A refusal and its never_claimed report are written in one transaction.
  unclaimed: ['claimed', 'never_claimed'],
  claimed: ['completed', 'failed_before_effect', 'reconciled_applied', 'reconciled_not_applied'],
  completed: [],
  failed_before_effect: [],
  reconciled_applied: [],
  reconciled_not_applied: [],
  never_claimed: [],
});

/** Whether two report statuses disagree on whether the effect happened. */
export function contradicts(first: ReportStatus, second: ReportStatus): boolean {
  const applied = (status: ReportStatus) => status === 'completed' || status === 'reconciled_applied';
  return applied(first) !== applied(second);
}
