// Messages an executor serves (ARCHITECTURE.md §6.2).
import { z } from 'zod';
import { invocation, reportStatus } from './artifacts.js';
import { hex32, identifier, jsonObject, nonNegativeInt, positiveInt, timestampMs, toolName } from './common.js';
import { type MessageSpec, artifactText, emptyBody } from './message-spec.js';

export const claimView = z.strictObject({
  operation_id: hex32,
  claim_id: identifier,
  kind: z.enum(['claim', 'refusal']),
  claimed_at: timestampMs.nullable(),
  report_status: reportStatus.nullable(),
  report: artifactText.nullable(),
  /** Moved to archive.db by archival; still found, still replayed, never claimed again. */
  archived: z.boolean(),
});

/** Why a listed operation stayed in the live ledger. */
export const NOT_ARCHIVED_REASONS = ['unknown_operation', 'already_archived', 'no_report', 'window_open'] as const;

/** Why a live claim may not leave the ledger yet (`ledger.live`): the same words `archive` answers with. */
export const LIVE_WAITING_REASONS = ['no_report', 'window_open'] as const satisfies ReadonlyArray<(typeof NOT_ARCHIVED_REASONS)[number]>;

/** Entries per `ledger.live` page: ~100 bytes each, so a page stays inside the smallest frame bound. */
export const LEDGER_LIVE_PAGE_MAX = 500;

/** Claims per `ledger.recover` message; the supervisor also keeps each message within half the session's frame bound. */
export const RECOVER_CLAIMS_PER_MESSAGE = 256;

const reportResult = z.strictObject({ report: artifactText, status: reportStatus, replayed: z.boolean() });

/** A tool an executor serves, as its adapter declares it (GET /v1/tools, `custody mcp`). */
export const toolView = z.strictObject({
  tool: toolName,
  contract: z.enum(['read_only', 'idempotent', 'durable']).nullable(),
  description: z.string().max(1024).nullable(),
  /** JSON Schema of the arguments (a superset: the executor still checks every bound), or null when the adapter's schema is not zod. */
  input_schema: jsonObject.nullable(),
  max_argument_bytes: positiveInt,
});

export const EXECUTOR_MESSAGES = {
  execute: {
    to: ['executor'],
    request: z.strictObject({
      authorization: artifactText,
      expected: invocation,
      arguments: jsonObject,
      /** Lost-reply drill: exit 75 after the report is retained, before replying. */
      drop_reply: z.boolean(),
    }),
    result: reportResult,
  },
  reconcile_operation: {
    to: ['executor'],
    request: z.strictObject({ authorization: artifactText, expected: invocation }),
    result: reportResult,
  },
  cancel: {
    to: ['executor'],
    /** `target` is the frame id of the execute request to stop. */
    request: z.strictObject({ target: identifier }),
    result: z.strictObject({ cancelled: z.boolean() }),
  },
  'claims.get': {
    to: ['executor'],
    request: z.strictObject({ operation_id: hex32 }),
    result: z.strictObject({ claim: claimView.nullable() }),
  },
  tools: {
    to: ['executor'],
    request: emptyBody,
    result: z.strictObject({ tools: z.array(toolView).max(256) }),
  },
  /** The adapter's own argument check (schema and byte bound), asked before anything is reserved; refuses with its cause. */
  'arguments.check': {
    to: ['executor'],
    request: z.strictObject({ tool: toolName, arguments: jsonObject }),
    result: z.strictObject({ tool: toolName, admitted: z.literal(true) }),
  },
  archive: {
    to: ['executor'],
    /** Operations whose reports the kernel has settled; only those whose window has passed may leave. */
    request: z.strictObject({ settled: z.array(hex32).max(10_000) }),
    result: z.strictObject({
      archived: nonNegativeInt,
      live: nonNegativeInt,
      not_archived: z.array(z.strictObject({ operation_id: hex32, reason: z.enum(NOT_ARCHIVED_REASONS) })).max(10_000),
    }),
  },
  /**
   * The live ledger, a page at a time in the order it was written: each
   * claim or refusal, and why it may not leave yet (no report; its window
   * not passed by max(clock, high-water mark)), or null when `archive` may
   * take it once the kernel has settled it. `after` is 0 for the first page,
   * then the previous page's `next`; `next` is null on the last page; `live`
   * is how many claims and refusals the live ledger holds now. What
   * archival reads instead of the kernel's whole history: a pass costs the
   * live ledger (at most claim_capacity entries). Read-only: no clock mark
   * is stored, and `archive` checks each operation again.
   */
  'ledger.live': {
    to: ['executor'],
    request: z.strictObject({ after: nonNegativeInt, limit: positiveInt.max(LEDGER_LIVE_PAGE_MAX) }),
    result: z.strictObject({
      claims: z.array(z.strictObject({ operation_id: hex32, waiting: z.enum(LIVE_WAITING_REASONS).nullable() })).max(LEDGER_LIVE_PAGE_MAX),
      next: nonNegativeInt.nullable(),
      live: nonNegativeInt,
    }),
  },
  /**
   * The operator's way back after a ledger was restored from an older copy
   * (docs/ROLLBACK.md, `custody recover-rollback`): record each witnessed,
   * kernel-authorized operation the ledger does not hold as a claim without a
   * report (its outcome unknown, never run again), then raise the head to
   * `raise_head_to`, the supervisor's witness.
   */
  'ledger.recover': {
    to: ['executor'],
    request: z.strictObject({
      claims: z.array(z.strictObject({ authorization: artifactText, expected: invocation })).max(RECOVER_CLAIMS_PER_MESSAGE),
      raise_head_to: nonNegativeInt,
    }),
    result: z.strictObject({ recorded: z.array(hex32).max(RECOVER_CLAIMS_PER_MESSAGE), already: nonNegativeInt, head: nonNegativeInt }),
  },
  /** The supervisor durably recorded this head (docs/ROLLBACK.md); an effect waiting on a claim at or below it may run. */
  'head.witnessed': {
    to: ['executor'],
    request: z.strictObject({ head: nonNegativeInt }),
    result: z.strictObject({}),
  },
} as const satisfies Record<string, MessageSpec>;
