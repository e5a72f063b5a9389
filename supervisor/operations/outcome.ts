// What a client is told about an operation, derived from the request log.
import { answeredOutput } from '../../shared/protocol/artifacts.js';
import { type OperationState, operationState } from '../../shared/protocol/kernel-messages.js';
import type { RequestRow } from '../store/supervisor-store.js';
import { causeOf } from './causes.js';
import type { OperationOutcome } from './outcome-view.js';
import { FINAL_PHASES } from './phases.js';

// The kernel's end states, sorted once for every reader: the driver's phases,
// the API's listings and the CLI's exit codes all take their sets from here.

/** Kernel states that refused an operation before anything could run: the request ends `refused`. */
export const REFUSED_STATES: ReadonlySet<OperationState> = new Set(['denied', 'start_denied', 'expired']);

/** Kernel states that settled an operation with its executor's report: the request ends `settled`. */
export const SETTLED_STATES: ReadonlySet<OperationState> = new Set(['completed', 'released', 'finalization_denied']);

/**
 * Kernel states that end an operation with no effect: refused before anything
 * ran, or settled on a report that says nothing was applied (`released`). Not
 * `finalization_denied`: its effect may have happened, and an operator looks
 * at it. The CLI ends these with exit 3 (README "Exit codes").
 */
export const NO_EFFECT_STATES: ReadonlySet<OperationState> = new Set([...REFUSED_STATES, 'released']);

/** Whether `outcome` (a kernel state, or null while open) ended its operation with no effect. */
export function endedWithoutEffect(outcome: string | null): boolean {
  const state = operationState.safeParse(outcome);
  return state.success && NO_EFFECT_STATES.has(state.data);
}

export type { OperationOutcome } from './outcome-view.js';

/**
 * The output a request answers with: its report's, by the rule the kernel
 * answers with (shared/protocol/artifacts.ts answeredOutput). A row keeps
 * `output` only where its report would not give the same (rows written
 * before, and a kernel answer that differed), so an output is stored once
 * in supervisor.db, in the report (docs/PERFORMANCE.md "The supervisor's
 * output").
 */
export function outputOf(row: Pick<RequestRow, 'output' | 'outcome' | 'report'>): unknown {
  return row.output !== null ? (JSON.parse(row.output) as unknown) : answeredOutput(row.outcome, row.report);
}

export function outcomeOf(row: RequestRow): OperationOutcome {
  return {
    request_id: row.request_id,
    operation_id: row.operation_id,
    tool: row.tool,
    created_at: row.created_at,
    phase: row.phase,
    final: FINAL_PHASES.has(row.phase),
    outcome: row.outcome,
    reason: row.reason,
    cause: causeOf({ tool: row.tool, request_id: row.request_id, reason: row.reason, report: row.report, executor: row.executor }),
    output: outputOf(row),
    receipt: row.receipt,
    report: row.report,
    authorization: row.authorization,
    executor: row.executor,
  };
}

/**
 * Whether a request logged at `createdAt` was made before a call that began
 * at `calledAt` (both ms since the epoch, on this machine's one wall clock):
 * then the call was answered with that request's outcome, and nothing ran
 * again for it. A call's own request is logged after the call began, never
 * before. No margin: with the one it had (a second), an agent that repeated a
 * call at once, meaning to append the same note twice, was told it had run
 * twice. False when the service said nothing of when (a service older than
 * this build).
 */
export function askedBefore(createdAt: number | undefined, calledAt: number): boolean {
  return Number.isSafeInteger(createdAt) && createdAt! < calledAt;
}
