// The executor's settings, read from the preamble's `settings` member. One
// closed schema for both modes: provisioning parameters fix the ledger's
// identity and capacity once; in serve mode they may be repeated, and must
// then agree with what the ledger recorded. Runtime bounds apply to the
// session. Every bound has a default here and may only be set lower than
// its ceiling (ARCHITECTURE.md §10).
import { z } from 'zod';
import { CustodyError } from '../errors.js';
import { identifier, positiveInt, toolName } from './common.js';
import { describeIssues } from '../wire/session.js';

export const DEFAULTS = {
  claimCapacity: 50_000,
  /** Part of the capacity only refusals (never_claimed) may use, so a full ledger can still release holds. */
  refusalReserve: 1_024,
  /**
   * 64, not 16: at 64 clients in flight the bench (docs/PERFORMANCE.md) ran
   * 1.49 × the operations per second and 0.84 × the CPU per operation, every
   * store's commits carrying twice the writes; 16 queued most operations in
   * the supervisor while the executor's claims went one or two per fsync.
   */
  maxInFlight: 64,
  reconcilePerTool: 32,
  reconcilePerSession: 128,
  /** The sliding window the two reconcile bounds count in. */
  reconcileWindowMs: 60_000,
  adapterDeadlineMs: 30_000,
  cancelWaitMs: 5_000,
  noteMaxBytes: 4_096,
  /** How long a report's head may wait for the next claim's to carry it (head-witness.ts). */
  reportHeadLingerMs: 50,
  /** Verdicts of arguments.check kept for the execute that follows (admitted-arguments.ts). */
  admittedArgumentsMax: 1_024,
} as const;

/** Shorter windows would make the reconcile bounds no bound at all. */
const RECONCILE_WINDOW_MIN_MS = 1_000;

const CEILINGS = {
  claimCapacity: 10_000_000,
  maxInFlight: 1_024,
  reconcile: 100_000,
  deadlineMs: 24 * 60 * 60 * 1000,
  headLingerMs: 1_000,
  admittedArguments: 65_536,
} as const;

const ms = (max: number) => z.number().int().min(1).max(max);

export const executorSettingsSchema = z.strictObject({
  /** Provision: the identity to create (default: the preamble's name). Serve: must equal the ledger's. */
  executor_id: identifier.optional(),
  key_epoch: positiveInt.optional(),
  claim_capacity: z.number().int().min(1).max(CEILINGS.claimCapacity).optional(),
  refusal_reserve: z.number().int().min(1).max(CEILINGS.claimCapacity).optional(),
  max_in_flight: z.number().int().min(1).max(CEILINGS.maxInFlight).optional(),
  reconcile_per_tool: z.number().int().min(1).max(CEILINGS.reconcile).optional(),
  reconcile_per_session: z.number().int().min(1).max(CEILINGS.reconcile).optional(),
  /** The sliding window reconcile_per_tool and reconcile_per_session count in. */
  reconcile_window_ms: z.number().int().min(RECONCILE_WINDOW_MIN_MS).max(CEILINGS.deadlineMs).optional(),
  adapter_deadline_ms: ms(CEILINGS.deadlineMs).optional(),
  /** Per-tool deadlines, overriding the adapter's own and the default. */
  adapter_deadlines: z.record(toolName, ms(CEILINGS.deadlineMs)).optional(),
  cancel_wait_ms: ms(CEILINGS.deadlineMs).optional(),
  /** How long a leaving executor waits for effects in flight; default: the longest adapter deadline + 5 s. */
  drain_timeout_ms: ms(CEILINGS.deadlineMs).optional(),
  note_max_bytes: z.number().int().min(1).max(DEFAULTS.noteMaxBytes).optional(),
  /** How long a report's head may wait for a claim's announcement to carry it; 0: announced at once. */
  report_head_linger_ms: z.number().int().min(0).max(CEILINGS.headLingerMs).optional(),
  /** How many admitted argument sets of arguments.check are kept for the execute that follows; 0: none. */
  admitted_arguments_max: z.number().int().min(0).max(CEILINGS.admittedArguments).optional(),
});
export type ExecutorSettingsInput = z.infer<typeof executorSettingsSchema>;

/** What provisioning fixes in the ledger; in serve mode, what the settings claim the ledger holds. */
export interface ProvisionSettings {
  readonly executorId: string | undefined;
  readonly keyEpoch: number | undefined;
  readonly claimCapacity: number | undefined;
  readonly refusalReserve: number | undefined;
}

export interface RuntimeSettings {
  readonly maxInFlight: number;
  readonly reconcilePerTool: number;
  readonly reconcilePerSession: number;
  readonly reconcileWindowMs: number;
  readonly adapterDeadlineMs: number;
  readonly adapterDeadlines: Readonly<Record<string, number>>;
  readonly cancelWaitMs: number;
  readonly drainTimeoutMs: number | undefined;
  readonly noteMaxBytes: number;
  readonly reportHeadLingerMs: number;
  readonly admittedArgumentsMax: number;
}

export interface ExecutorSettings {
  readonly provision: ProvisionSettings;
  readonly runtime: RuntimeSettings;
}

export function parseExecutorSettings(raw: unknown): ExecutorSettings {
  const parsed = executorSettingsSchema.safeParse(raw);
  if (!parsed.success) {
    throw new CustodyError('config_invalid', `executor settings (custody.json executors[].settings): ${describeIssues(parsed.error)}`);
  }
  const s = parsed.data;
  return {
    provision: {
      executorId: s.executor_id,
      keyEpoch: s.key_epoch,
      claimCapacity: s.claim_capacity,
      refusalReserve: s.refusal_reserve,
    },
    runtime: {
      maxInFlight: s.max_in_flight ?? DEFAULTS.maxInFlight,
      reconcilePerTool: s.reconcile_per_tool ?? DEFAULTS.reconcilePerTool,
      reconcilePerSession: s.reconcile_per_session ?? DEFAULTS.reconcilePerSession,
      reconcileWindowMs: s.reconcile_window_ms ?? DEFAULTS.reconcileWindowMs,
      adapterDeadlineMs: s.adapter_deadline_ms ?? DEFAULTS.adapterDeadlineMs,
      adapterDeadlines: s.adapter_deadlines ?? {},
      cancelWaitMs: s.cancel_wait_ms ?? DEFAULTS.cancelWaitMs,
      drainTimeoutMs: s.drain_timeout_ms,
      noteMaxBytes: s.note_max_bytes ?? DEFAULTS.noteMaxBytes,
      reportHeadLingerMs: s.report_head_linger_ms ?? DEFAULTS.reportHeadLingerMs,
      admittedArgumentsMax: s.admitted_arguments_max ?? DEFAULTS.admittedArgumentsMax,
    },
  };
}

/** The capacity a new ledger gets, checked for sense: the reserve must leave room for claims. */
export function capacityFor(settings: ProvisionSettings): { capacity: number; reserve: number } {
  const capacity = settings.claimCapacity ?? DEFAULTS.claimCapacity;
  const reserve = settings.refusalReserve ?? Math.min(DEFAULTS.refusalReserve, Math.max(1, Math.floor(capacity / 8)));
  if (reserve >= capacity) {
    throw new CustodyError(
      'config_invalid',
      `refusal_reserve ${reserve} must be smaller than claim_capacity ${capacity}: claims need room too`,
    );
  }
  return { capacity, reserve };
}
