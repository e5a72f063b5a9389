// Closed schemas of the control API's request bodies.
import { z } from 'zod';
import { identifier, jsonObject, toolName, toolPattern } from '../../shared/protocol/common.js';
import { operationName } from '../../shared/protocol/names.js';
import { MAX_WAIT_MS } from './wait.js';

const wait = z.number().int().min(0).max(MAX_WAIT_MS).optional();

export const invokeBody = z.strictObject({
  tool: toolName,
  arguments: jsonObject.default({}),
  request_id: operationName
    .optional()
    .describe(
      'The name that makes a retry safe: the same request_id with the same body is the same request, answered with its one outcome and never run twice; with another body it is 409 request_conflict. Without one the service picks a name (the answer gives it): a retry must then use that name, since a body sent again without a request_id is a new request and runs again.',
    ),
  subject: identifier.default('agent'),
  cost_units: z.number().int().min(0).default(0),
  /** How long to wait for the end, counted from the call's arrival, before answering 202 with the state so far (default 120 s, supervisor/api/wait.ts). */
  wait_ms: wait,
});

export const authorizeBody = z.strictObject({
  tool: toolName,
  arguments: jsonObject.default({}),
  operation: operationName,
  subject: identifier.default('operator'),
  cost_units: z.number().int().min(0).default(0),
  wait_ms: wait,
});

export const executeBody = z.strictObject({
  drop_reply: z.boolean().default(false),
  wait_ms: wait,
});

export const stepBody = z.strictObject({ wait_ms: wait });

export const grantAddBody = z.strictObject({
  tool: toolPattern,
  max_invocations: z.number().int().min(1),
  cost_units: z.number().int().min(0).nullable().default(null),
  ttl_ms: z.number().int().min(1),
  subject: identifier.or(z.literal('*')).default('*'),
  not_before: z.number().int().min(1).nullable().default(null),
});

/** `POST /v1/archive` takes no parameters: an empty body or `{}`. */
export const archiveBody = z.strictObject({});
