// Messages the kernel serves (ARCHITECTURE.md §6.1).
import { z } from 'zod';
import { holdRecord, invocation } from './artifacts.js';
import {
  hex32,
  identifier,
  jsonObject,
  jsonValue,
  nonNegativeInt,
  positiveInt,
  timestampMs,
  toolName,
  toolPattern,
} from './common.js';
import { type MessageSpec, artifactText } from './message-spec.js';

export const OPERATION_STATES = [
  'reserved',
  'dispatch_committed',
  'awaiting_report',
  'completed',
  'expired',
  'denied',
  'start_denied',
  'released',
  'finalization_denied',
  'unknown',
] as const;
export const operationState = z.enum(OPERATION_STATES);
export type OperationState = z.infer<typeof operationState>;

/** An operation's hold: the receipt's shape, always with an id. */
export const holdView = holdRecord.extend({ id: identifier });

/** A kernel operation as the kernel reports it (operation.get, recover, mark_unknown); ops.list lists fewer members (listedOperation). */
export const operationView = z.strictObject({
  operation_id: hex32,
  request_id: identifier,
  subject: identifier,
  tool: toolName,
  state: operationState,
  capability_id: identifier.nullable(),
  executor_id: identifier.nullable(),
  created_at: timestampMs,
  updated_at: timestampMs,
  nonce_expires_at: timestampMs.nullable(),
  window: z.strictObject({ not_before: timestampMs, expires_at: timestampMs }).nullable(),
  hold: holdView.nullable(),
  expected: invocation.nullable(),
  authorization: artifactText.nullable(),
  last_receipt: artifactText.nullable(),
  output: jsonValue.nullable(),
  flag: z.string().max(512).nullable(),
});
export type OperationView = z.infer<typeof operationView>;

/**
 * An operation as ops.list lists it: what names it, where it stands and why
 * an operator should look. The signed artifacts, hold, window and output are
 * operation.get's: a listing of a long history carries ~300 bytes an
 * operation, not ~3 KB (docs/PERFORMANCE.md "A listing reads entries").
 */
export const listedOperation = operationView.pick({
  operation_id: true,
  request_id: true,
  subject: true,
  tool: true,
  state: true,
  capability_id: true,
  executor_id: true,
  created_at: true,
  updated_at: true,
  flag: true,
});
export type ListedOperation = z.infer<typeof listedOperation>;

/** The most entries one page of ops.list, recover or grant.list may ask for. */
export const KERNEL_PAGE_MAX = 10_000;

/** Where a page of ops.list or recover ended: its last operation's creation time and id. */
export const operationKey = z.strictObject({ created_at: timestampMs, operation_id: hex32 });
export type OperationKey = z.infer<typeof operationKey>;

/** The answer to reserve, start and settle: a decision, its receipt, and what follows from it. */
const decision = z.strictObject({
  operation_id: hex32,
  verdict: z.enum(['allow', 'deny']),
  /** `ok`, or the error code naming why (shared/errors.ts). */
  reason: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/),
  state: operationState,
  /** The signed receipt of this decision; null only for an allowed start, which yields an authorization. */
  receipt: artifactText.nullable(),
});

export const grantView = z.strictObject({
  capability: artifactText,
  capability_id: identifier,
  revoked_at: timestampMs.nullable(),
  invocations_used: nonNegativeInt,
  invocations_held: nonNegativeInt,
  cost_units_used: nonNegativeInt,
  cost_units_held: nonNegativeInt,
});
export type GrantView = z.infer<typeof grantView>;

/** Where a page of grant.list ended: its last grant's issue time and id. */
export const grantKey = z.strictObject({ issued_at: timestampMs, capability_id: identifier });
export type GrantKey = z.infer<typeof grantKey>;

const reserveRequest = z.strictObject({
  request_id: identifier,
  subject: identifier,
  tool: toolName,
  arguments: jsonObject,
  capability_id: identifier.nullable(),
  cost_units: nonNegativeInt,
});
const reserveResult = decision.extend({
  nonce: z.strictObject({ id: identifier, expires_at: timestampMs }).nullable(),
  expected: invocation.nullable(),
});
/**
 * Executor pools: the executor to address the authorization to, one whose
 * current pin serves the tool (else start_denied, tool_unknown). Absent:
 * the executor chosen at reserve. Not part of what makes a retry the same
 * start: a retry gets the first authorization, whichever executor it names.
 */
const startExecutor = identifier.optional();
const startResult = decision.extend({ authorization: artifactText.nullable(), expected: invocation.nullable() });

/** Tool names or patterns one executor serves (`executor.pin`; custody.json `executors[].tools`). */
export const EXECUTOR_TOOLS_MAX = 256;

export const KERNEL_MESSAGES = {
  reserve: {
    to: ['kernel'],
    request: reserveRequest,
    result: reserveResult,
  },
  start: {
    to: ['kernel'],
    request: z.strictObject({
      request_id: identifier,
      nonce_id: identifier,
      arguments: jsonObject,
      executor_id: startExecutor,
    }),
    result: startResult,
  },
  /**
   * A reserve and, when it allows, the start that names its nonce, decided in
   * one transaction (docs/PROTOCOL.md §6): the two answers, each what the
   * message alone would answer; `start` is null when the reserve did not allow.
   * `request_binding_hash` is the host's own binding of the request (§8): a
   * reservation bound otherwise is not started (invocation_mismatch).
   */
  reserve_start: {
    to: ['kernel'],
    request: reserveRequest.extend({ executor_id: startExecutor, request_binding_hash: hex32 }),
    result: z.strictObject({ reserve: reserveResult, start: startResult.nullable() }),
  },
  settle: {
    to: ['kernel'],
    request: z.strictObject({ authorization: artifactText, report: artifactText }),
    result: decision.extend({ output: jsonValue.nullable() }),
  },
  mark_unknown: {
    to: ['kernel'],
    request: z.strictObject({ operation_id: hex32, reason: z.string().max(512) }),
    result: z.strictObject({ operation: operationView }),
  },
  'operation.get': {
    to: ['kernel'],
    request: z.strictObject({ operation_id: hex32.nullable(), request_id: identifier.nullable() }),
    result: z.strictObject({ operation: operationView.nullable(), receipts: z.array(artifactText) }),
  },
  /**
   * Operations newest first (created_at descending, then operation_id
   * ascending: a total order), each as a listed operation (operation.get
   * answers the rest of one), one page at a time: at most `limit` of those
   * that come after `after` in that order (from the newest when null), fewer
   * when more would not fit one frame. `next_after` is the key of the page's
   * last operation when more may follow, null when this page reached the
   * end; a caller asks for the next page with it. A page starts where the
   * last one ended whatever happened between: one that left the selected
   * states meanwhile shifts nothing, so each operation there throughout is
   * listed exactly once; one created meanwhile sorts before the keys already
   * read (unless it shares the last one's millisecond) and is listed at most
   * once.
   */
  'ops.list': {
    to: ['kernel'],
    request: z.strictObject({ states: z.array(operationState).nullable(), limit: positiveInt.max(KERNEL_PAGE_MAX), after: operationKey.nullable() }),
    result: z.strictObject({ operations: z.array(listedOperation), next_after: operationKey.nullable() }),
  },
  /**
   * Operations a supervisor must drive to a signed end (committed starts,
   * awaiting reports, unknowns), oldest first (created_at, then
   * operation_id), paged like ops.list: one the supervisor settles while it
   * pages leaves the set without shifting the others past a page's end.
   */
  recover: {
    to: ['kernel'],
    request: z.strictObject({ limit: positiveInt.max(KERNEL_PAGE_MAX), after: operationKey.nullable() }),
    result: z.strictObject({ operations: z.array(operationView), now: timestampMs, next_after: operationKey.nullable() }),
  },
  'grant.add': {
    to: ['kernel'],
    request: z.strictObject({
      tool: toolPattern,
      subject: identifier.or(z.literal('*')),
      max_invocations: positiveInt,
      max_cost_units: nonNegativeInt.nullable(),
      not_before: timestampMs.nullable(),
      ttl_ms: positiveInt,
    }),
    result: grantView,
  },
  /**
   * Grants newest first (issued_at descending, then capability_id
   * ascending), paged like ops.list by the last grant's key; `live`: only
   * those neither expired nor revoked at the kernel's now. A grant that
   * expires while a caller pages shifts nothing, so no live one is skipped.
   */
  'grant.list': {
    to: ['kernel'],
    request: z.strictObject({ live: z.boolean(), limit: positiveInt.max(KERNEL_PAGE_MAX), after: grantKey.nullable() }),
    result: z.strictObject({ grants: z.array(grantView), next_after: grantKey.nullable() }),
  },
  'grant.revoke': {
    to: ['kernel'],
    request: z.strictObject({ capability_id: identifier }),
    result: grantView,
  },
  'executor.pin': {
    to: ['kernel'],
    request: z.strictObject({
      executor_id: identifier,
      public_key: hex32,
      key_epoch: positiveInt,
      tools: z.array(toolPattern).max(EXECUTOR_TOOLS_MAX),
    }),
    result: z.strictObject({ executor_id: identifier, public_key: hex32, key_epoch: positiveInt, pinned_at: timestampMs }),
  },
} as const satisfies Record<string, MessageSpec>;
