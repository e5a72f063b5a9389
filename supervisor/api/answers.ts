// Closed schemas of the control API's answers, in one place: the OpenAPI
// description (openapi.ts) is generated from them and from the body schemas
// the server validates with (bodies.ts), and test/supervisor/api/openapi.test.ts
// checks real answers of a live service against that description.
import { z } from 'zod';
import { CustodyError, ERROR_CODES } from '../../shared/errors.js';
import { MAX_TIMESTAMP_MS, hex32, identifier, jsonObject, jsonValue, nonNegativeInt, positiveInt, timestampMs, toolName, toolPattern } from '../../shared/protocol/common.js';
import { claimView, toolView } from '../../shared/protocol/executor-messages.js';
import { type GrantKey, OPERATION_STATES, type OperationKey, grantKey, grantView, operationKey, operationView } from '../../shared/protocol/kernel-messages.js';
import { artifactText } from '../../shared/protocol/message-spec.js';
import { REQUEST_PHASES } from '../operations/phases.js';

/** Every error: a stable code (shared/errors.ts) and a human message; `request_id` once the request it answers was logged (ask again by it). */
export const errorAnswer = z.strictObject({
  code: z.enum(ERROR_CODES as [string, ...string[]]),
  message: z.string(),
  request_id: z.string().optional().describe('The request this error answers, once the service has logged it (503 store_busy, 507 storage_full, 500 after logging): ask again with this request_id to learn where it stands. A request sent again without it is a new request.'),
});

export const healthAnswer = z.strictObject({ status: z.enum(['ok', 'stopping']), pid: positiveInt, uptime_ms: nonNegativeInt });

/** One child as status and restart show it. */
export const childAnswer = z.strictObject({
  name: z.string(),
  role: z.enum(['kernel', 'executor']),
  state: z.enum(['stopped', 'starting', 'running', 'backoff', 'failed', 'stopping']),
  pid: positiveInt.nullable(),
  sid: z.string().nullable(),
  restarts: nonNegativeInt,
  uptime_ms: nonNegativeInt.nullable(),
  failure: z.string().nullable(),
  /** A failed executor's automatic retry (restart.failed_cooldown_s), ms since the epoch. */
  next_retry_at: timestampMs.nullable(),
  /** Executors: operations in flight on it now and completed on it since the service started (executor pools); null for the kernel. */
  operations: z.strictObject({ in_flight: nonNegativeInt, completed: nonNegativeInt }).nullable(),
});

export const statusAnswer = z.strictObject({
  service: z.strictObject({ pid: positiveInt, port: nonNegativeInt, state_dir: z.string(), started_at: timestampMs, uptime_ms: nonNegativeInt, stopping: z.boolean() }),
  children: z.array(childAnswer),
  in_flight: nonNegativeInt,
});

export const restartAnswer = z.strictObject({ child: childAnswer });

/** Where an operation stands (supervisor/operations/outcome.ts): the answer of invoke, authorize, execute, report and reconcile. */
export const outcomeAnswer = z.strictObject({
  request_id: identifier,
  operation_id: hex32,
  tool: toolName,
  /** When the service first logged the request, ms since the epoch: earlier than a call means the call named a request made before it, and nothing ran again. */
  created_at: timestampMs,
  phase: z.enum(REQUEST_PHASES),
  final: z.boolean(),
  outcome: z.string().nullable(),
  reason: z.string().nullable(),
  /** The reason in words a caller can act on (supervisor/operations/causes.ts), or null. */
  cause: z.string().nullable(),
  output: jsonValue.nullable(),
  receipt: artifactText.nullable(),
  report: artifactText.nullable(),
  authorization: artifactText.nullable(),
  executor: z.string().nullable(),
});

/**
 * A page of GET /v1/operations or GET /v1/grants ends at a key,
 * `<created_at>.<operation_id>` or `<issued_at>.<capability_id>` (the
 * kernel's ops.list and grant.list keys, docs/PROTOCOL.md "Paging"), and the
 * next page is asked for after it. PAGE_KEY is what the query's `after` may
 * hold at all; each listing reads its own key from it.
 */
/** The `limit` of each listing: what it lists without one, and the most one answer holds (handlers.ts reads it, openapi.ts says it). */
export const LISTING_LIMITS = {
  operations: { fallback: 200, most: 100_000 },
  grants: { fallback: 1000, most: 10_000 },
  incidents: { fallback: 50, most: 1000 },
} as const;

export const PAGE_KEY = /^[1-9][0-9]{0,15}\.[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127}$/;
export const OPERATION_PAGE_KEY = /^[1-9][0-9]{0,15}\.[0-9a-f]{64}$/;

export function pageKeyText(key: OperationKey | GrantKey): string {
  return 'created_at' in key ? `${key.created_at}.${key.operation_id}` : `${key.issued_at}.${key.capability_id}`;
}

/** The time and id of a query's `after` (the server has checked it against PAGE_KEY), as `schema` reads them; a key it refuses is target_invalid. */
function parsePageKey<T>(text: string, read: (time: number, id: string) => { success: true; data: T } | { success: false }, what: string): T {
  const dot = text.indexOf('.');
  const parsed = read(Number(text.slice(0, dot)), text.slice(dot + 1));
  if (!parsed.success) {
    throw new CustodyError('target_invalid', `query parameter after must be the next_after of a previous answer (${what}, the time at most ${MAX_TIMESTAMP_MS}), got ${JSON.stringify(text.slice(0, 100))}`);
  }
  return parsed.data;
}

export function parseOperationPageKey(text: string): OperationKey {
  return parsePageKey(text, (created_at, operation_id) => operationKey.safeParse({ created_at, operation_id }), '<created_at>.<operation_id>');
}

export function parseGrantPageKey(text: string): GrantKey {
  return parsePageKey(text, (issued_at, capability_id) => grantKey.safeParse({ issued_at, capability_id }), '<issued_at>.<capability_id>');
}

export const operationsAnswer = z.strictObject({
  operations: z.array(
    z.strictObject({
      name: identifier,
      operation_id: hex32,
      tool: toolName,
      /** Null for a request quarantined before the kernel recorded it (listed from supervisor.db, on the first page). */
      state: z.enum(OPERATION_STATES).nullable(),
      phase: z.enum(REQUEST_PHASES).nullable(),
      updated_at: timestampMs,
      flag: z.string().nullable(),
    }),
  ),
  /** The key of this page's last operation (the `after` to ask the next page with), or null when this page reached the oldest operation. */
  next_after: z.string().regex(OPERATION_PAGE_KEY).nullable(),
});

export const operationAnswer = z.strictObject({ request: outcomeAnswer.nullable(), kernel: operationView.nullable(), receipts: z.array(artifactText) });

export const traceAnswer = z.strictObject({
  name: identifier,
  operation_id: hex32,
  request: outcomeAnswer.nullable(),
  kernel: operationView.nullable(),
  claim: claimView.nullable(),
  events: z.array(z.strictObject({ at: nonNegativeInt, store: z.string(), event: z.string(), detail: z.string() })),
});

export const artifactsAnswer = z.strictObject({
  name: identifier,
  operation_id: hex32,
  kernel_public_key: hex32.nullable(),
  artifacts: z.array(z.strictObject({ file: z.string(), kind: z.enum(['receipt', 'authorization', 'report']), text: artifactText })),
});

/** A page of grants, newest first (GET /v1/grants; the kernel's grant.list pages, read up to `limit`). */
export const grantsAnswer = z.strictObject({
  grants: z.array(grantView),
  /** The key of this page's last grant (the `after` to ask the next page with), or null when this page reached the oldest grant. */
  next_after: z.string().regex(PAGE_KEY).nullable(),
});
export const grantAnswer = grantView;

export const archiveAnswer = z.strictObject({
  executors: z.array(z.strictObject({ executor: z.string(), archived: nonNegativeInt, live: nonNegativeInt, kept: z.record(z.string(), nonNegativeInt) })),
});

export const incidentsAnswer = z.strictObject({
  incidents: z.array(
    z.strictObject({
      id: positiveInt,
      at: timestampMs,
      child: z.string().nullable(),
      kind: z.string(),
      code: z.string().nullable(),
      message: z.string(),
      operation_id: hex32.nullable(),
    }),
  ),
});

export const toolsAnswer = z.strictObject({
  subject: identifier,
  tools: z.array(
    toolView.extend({
      executor: z.string(),
      grants: z.array(z.strictObject({ capability_id: identifier, tool_pattern: toolPattern, remaining_invocations: positiveInt, expires_at: timestampMs })),
    }),
  ),
  unavailable: z.array(z.strictObject({ executor: z.string(), reason: z.string() })),
});

/** The OpenAPI document itself (described loosely: it is JSON Schema's own business). */
export const openApiAnswer = jsonObject;

/** The way back for a rolled-back ledger (supervisor/operations/rollback-recovery.ts). */
export const recoverRollbackAnswer = z.strictObject({
  executor: z.string(),
  witnessed: nonNegativeInt,
  head: nonNegativeInt,
  recorded: z.array(z.string()),
  already: nonNegativeInt,
});

/** `custody executor rotate NAME` (supervisor/rotation.ts). */
export const executorRotateAnswer = z.strictObject({
  name: z.string(),
  key_epoch: positiveInt,
  public_key: z.string(),
  retired_epoch: positiveInt,
  statement: z.string(),
});

/** `custody kernel rotate`: each executor's kernel pin after it (null: not running, it re-pins at its next start). */
export const kernelRotateAnswer = z.strictObject({
  key_epoch: positiveInt,
  public_key: z.string(),
  retired_epoch: positiveInt,
  statement: z.string(),
  executors: z.array(z.strictObject({ name: z.string(), kernel_epoch: positiveInt.nullable() })),
});

/** Every key epoch (receipt export names them kernel.eN.pub, NAME.eN.pub). */
export const keysAnswer = z.strictObject({
  kernel: z.array(z.strictObject({ key_epoch: positiveInt, public_key: z.string(), statement: z.string().nullable() })),
  executors: z.array(z.strictObject({ name: z.string(), executor_id: z.string(), key_epoch: positiveInt, public_key: z.string() })),
});
