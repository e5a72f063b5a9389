// What a client is told about an operation, derived from the request log.
import { type OperationState } from '../../shared/protocol/kernel-messages.js';
import { type RequestRow } from '../store/supervisor-store.js';
import { causeOf } from './causes.js';
import { FINAL_PHASES, type RequestPhase } from './phases.js';

/** Kernel states that refused an operation before anything could run. */
export const REFUSED_STATES: ReadonlySet<OperationState> = new Set(['denied', 'start_denied', 'expired']);

/** Kernel states that settled an operation with its executor's report. */
export const SETTLED_STATES: ReadonlySet<OperationState> = new Set(['completed', 'released', 'finalization_denied']);

export interface OperationOutcome {
  readonly request_id: string;
  readonly operation_id: string;
  readonly tool: string;
  readonly phase: RequestPhase;
  /** Whether the supervisor has carried the request as far as it goes. */
  readonly final: boolean;
  /** completed | released | finalization_denied | denied | start_denied | expired | unknown | … or null while open. */
  readonly outcome: string | null;
  readonly reason: string | null;
  /** The reason in words a caller can act on (causes.ts), or null. */
  readonly cause: string | null;
  readonly output: unknown;
  readonly receipt: string | null;
  readonly report: string | null;
  readonly authorization: string | null;
  readonly executor: string | null;
}

export function outcomeOf(row: RequestRow): OperationOutcome {
  return {
    request_id: row.request_id,
    operation_id: row.operation_id,
    tool: row.tool,
    phase: row.phase,
    final: FINAL_PHASES.has(row.phase),
    outcome: row.outcome,
    reason: row.reason,
    cause: causeOf({ tool: row.tool, request_id: row.request_id, reason: row.reason, report: row.report, executor: row.executor }),
    output: row.output === null ? null : (JSON.parse(row.output) as unknown),
    receipt: row.receipt,
    report: row.report,
    authorization: row.authorization,
    executor: row.executor,
  };
}
