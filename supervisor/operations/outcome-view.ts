// What a client is told about an operation: the shape of every drive answer
// (invoke, authorize, execute, report, reconcile), in one place for the
// service (outcome.ts builds it) and the client library (supervisor/client),
// which publishes it. Types only, so the library's declarations need nothing
// beyond this file and phases.ts.
import type { RequestPhase } from './phases.js';

/** Where an operation stands. */
export interface OperationOutcome {
  readonly request_id: string;
  readonly operation_id: string;
  readonly tool: string;
  /**
   * When the service first logged this request (ms since the epoch, its wall
   * clock). A call that names a request logged before the call began was
   * answered with that request's outcome: nothing ran again for it.
   */
  readonly created_at: number;
  readonly phase: RequestPhase;
  /** Whether the service has carried the request as far as it goes. */
  readonly final: boolean;
  /** completed | released | finalization_denied | denied | start_denied | expired | unknown | … or null while open. */
  readonly outcome: string | null;
  readonly reason: string | null;
  /** The reason in words a caller can act on (a refusal's size and bound, the grant to add; causes.ts), or null. */
  readonly cause: string | null;
  readonly output: unknown;
  /** The kernel's last signed receipt (exact JSON text), if any. */
  readonly receipt: string | null;
  readonly report: string | null;
  readonly authorization: string | null;
  readonly executor: string | null;
}
