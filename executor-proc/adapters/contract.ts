// The adapter interface: what a tool module gives custody (ADAPTERS.md shows
// it from the operator's side). An adapter declares a contract before it can
// run (ARCHITECTURE.md §6.2):
//   read_only   the call changes nothing; running it twice is harmless
//   idempotent  the resource dedupes by the operation key
//   durable     an effect plus reconcile(operation_key) that inspects the
//               resource and answers applied(output) | not_applied |
//               indeterminate; not_applied must be made true (fence the key
//               so the effect refuses it), not merely observed
// Custody never calls execute twice for one operation; the contract says
// what reconciliation may conclude when a claim has no report.
import type { JsonObject, JsonValue } from '../../shared/protocol/common.js';

export const CONTRACTS = ['read_only', 'idempotent', 'durable'] as const;
export type Contract = (typeof CONTRACTS)[number];

/** Anything with zod's safeParse: a zod schema, or a hand-written checker. */
export interface ArgumentSchema {
  safeParse(value: unknown): { success: boolean; error?: unknown };
}

export interface AdapterLog {
  (event: string, fields?: Record<string, unknown>): void;
}

export interface ExecuteCall {
  /** The operation id: the key the resource dedupes or fences by. */
  readonly operationKey: string;
  readonly arguments: JsonObject;
  /** Aborted when a `cancel` names this call (sent to cancellable adapters only). */
  readonly signal: AbortSignal;
  readonly log: AdapterLog;
}

export type ExecuteResult =
  /** The effect happened; output goes into the signed report. */
  | { readonly outcome: 'applied'; readonly output?: JsonValue; readonly costUnits?: number }
  /** Nothing happened and nothing will: the report says failed_before_effect and the hold is released. */
  | { readonly outcome: 'not_applied'; readonly reason: string }
  /** A cancellable adapter stopped on its signal and guarantees no effect follows. */
  | { readonly outcome: 'cancelled' };

export interface ReconcileCall {
  readonly operationKey: string;
  readonly log: AdapterLog;
}

export type ReconcileResult =
  | { readonly outcome: 'applied'; readonly output?: JsonValue }
  /** Only after fencing the key: the effect can no longer happen. */
  | { readonly outcome: 'not_applied' }
  | { readonly outcome: 'indeterminate'; readonly reason: string };

/**
 * One tool. Throwing from execute means "the effect may or may not have
 * happened": the claim stays without a report (outcome unknown) and
 * reconciliation decides. Throwing from reconcile means indeterminate.
 */
export interface CustodyAdapter {
  readonly tool: string;
  /** One line for agents and operators: what the tool does (published by `custody mcp` and GET /v1/tools). */
  readonly description?: string;
  readonly contract: Contract;
  readonly argumentSchema: ArgumentSchema;
  /** Bound on the arguments' canonical JSON bytes (default 65 536). */
  readonly maxArgumentBytes?: number;
  /** How long execute and reconcile may take (default: the executor's adapter_deadline_ms). */
  readonly deadlineMs?: number;
  /** Set when execute honours `signal` and returns { outcome: 'cancelled' } after stopping. */
  readonly cancellable?: boolean;
  execute(call: ExecuteCall): Promise<ExecuteResult>;
  /** Required for durable; optional for idempotent; never needed for read_only. */
  reconcile?(call: ReconcileCall): Promise<ReconcileResult>;
}

export const DEFAULT_MAX_ARGUMENT_BYTES = 64 * 1024;

/** What the executor knows of an adapter (sent from the adapter host at start). */
export interface AdapterDescriptor {
  readonly tool: string;
  /** null: the adapter declared no valid contract and cannot run; `problem` says why. */
  readonly contract: Contract | null;
  readonly problem: string | null;
  readonly cancellable: boolean;
  readonly reconcilable: boolean;
  readonly deadlineMs: number | null;
  readonly source: string;
  readonly description: string | null;
  /** The argument schema as JSON Schema, when it is a zod schema; null otherwise. */
  readonly inputSchema: JsonObject | null;
  /** Bound on the arguments' canonical JSON bytes. */
  readonly maxArgumentBytes: number;
}
