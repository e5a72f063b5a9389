// The signed artifacts (ARCHITECTURE.md §5): one envelope for every kind, one closed
// body schema per kind, one size cap per kind. The `schema` member names the
// kind and version and is covered by the signature, so one kind can never
// pass for another.
import { z } from 'zod';
import {
  hex32,
  hex64,
  identifier,
  jsonValue,
  type JsonValue,
  nonNegativeInt,
  positiveInt,
  timestampMs,
  toolName,
  toolPattern,
} from './common.js';

export const ARTIFACT_SCHEMAS = {
  capability: 'custody.capability.v1',
  receipt: 'custody.receipt.v1',
  authorization: 'custody.authorization.v1',
  report: 'custody.report.v1',
  rotation: 'custody.rotation.v1',
} as const;

export type ArtifactKind = keyof typeof ARTIFACT_SCHEMAS;

/**
 * Size caps on the JCS bytes of each artifact. A report carries output, but it
 * travels inside a frame as a JSON string, where escaping can double its size:
 * half the 1 MiB frame bound, less room for the envelope, is the largest cap
 * that always fits (ARCHITECTURE.md §5 said 1 MiB, which no frame could carry).
 */
export const ARTIFACT_MAX_BYTES: Record<ArtifactKind, number> = {
  capability: 16 * 1024,
  receipt: 32 * 1024,
  authorization: 32 * 1024,
  report: 512 * 1024 - 4096,
  rotation: 4 * 1024,
};

/** Depth bound inside an artifact (output included). */
export const ARTIFACT_MAX_DEPTH = 24;

export const envelope = z.strictObject({
  schema: z.string(),
  signer: hex32,
  body: z.record(z.string(), z.unknown()),
  signature: hex64,
});
export type Envelope = z.infer<typeof envelope>;

// ---------------------------------------------------------------- capability

export const capabilityBody = z.strictObject({
  id: identifier,
  tool: toolPattern,
  subject: identifier.or(z.literal('*')),
  max_invocations: positiveInt,
  max_cost_units: nonNegativeInt.nullable(),
  not_before: timestampMs,
  expires_at: timestampMs,
  issued_at: timestampMs,
});
export type CapabilityBody = z.infer<typeof capabilityBody>;

// ---------------------------------------------------------------- invocation

/** What an authorization binds; the executor compares it with the expectation the supervisor recorded. */
export const invocation = z.strictObject({
  operation_id: hex32,
  request_id: identifier,
  request_binding_hash: hex32,
  capability_id: identifier,
  capability_digest: hex32,
  tool: toolName,
  parameters_digest: hex32,
});
export type Invocation = z.infer<typeof invocation>;

export const executorIdentity = z.strictObject({
  id: identifier,
  public_key: hex32,
  key_epoch: positiveInt,
});
export type ExecutorIdentity = z.infer<typeof executorIdentity>;

// ------------------------------------------------------------- authorization

export const authorizationBody = z.strictObject({
  executor: executorIdentity,
  invocation,
  committed: z.strictObject({
    nonce_id: identifier,
    budget_hold_id: identifier,
  }),
  not_before: timestampMs,
  expires_at: timestampMs,
  issued_at: timestampMs,
});
export type AuthorizationBody = z.infer<typeof authorizationBody>;

// -------------------------------------------------------------------- report

export const REPORT_STATUSES = [
  'completed',
  'failed_before_effect',
  'reconciled_applied',
  'reconciled_not_applied',
  'never_claimed',
] as const;
export const reportStatus = z.enum(REPORT_STATUSES);

/** Bound on a report's refusal message: an adapter's words, cut to this many characters. */
export const REPORT_REFUSAL_MESSAGE_MAX_CHARS = 1024;
export type ReportStatus = z.infer<typeof reportStatus>;

/** Statuses that prove the effect happened (the hold is consumed). */
export const EFFECT_APPLIED: ReadonlySet<ReportStatus> = new Set(['completed', 'reconciled_applied']);

export const reportBody = z.strictObject({
  authorization_digest: hex32,
  operation_id: hex32,
  executor_id: identifier,
  key_epoch: positiveInt,
  /** The claim, or for `never_claimed` the refusal that took the claim's place. */
  claim_id: identifier,
  /** When the claim was committed; null only for `never_claimed`. */
  claimed_at: timestampMs.nullable(),
  finished_at: timestampMs,
  status: reportStatus,
  output: jsonValue.nullable(),
  output_digest: hex32.nullable(),
  realized_cost_units: nonNegativeInt.nullable(),
  /**
   * Only on a `never_claimed` report that execute signed because the adapter
   * refused the arguments before any claim (its byte bound, its schema): the
   * error code and the adapter's message (`note is 5000 UTF-8 bytes; at most
   * 4096 are allowed`). The kernel settles such a report as `released` with
   * `code` as its receipt's reason. Absent on every other report.
   */
  refusal: z
    .strictObject({
      code: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/),
      message: z.string().min(1).max(REPORT_REFUSAL_MESSAGE_MAX_CHARS),
    })
    .optional(),
});
export type ReportBody = z.infer<typeof reportBody>;

/**
 * The output an operation answers with (`settle`'s `output`, docs/PROTOCOL.md
 * §6): a completed operation's is its report's `body.output`; any other
 * state's, and a report that carries none, is null. Read from the report's
 * retained text, which was checked when it was kept; the kernel and the
 * supervisor both answer by this rule, so neither stores the output beside
 * the report.
 */
export function answeredOutput(state: string | null, report: string | null): JsonValue | null {
  if (state !== 'completed' || report === null) return null;
  return (JSON.parse(report) as { body: { output?: JsonValue | null } }).body.output ?? null;
}

// ------------------------------------------------------------------- receipt

export const RECEIPT_DECISIONS = [
  'reserve', //       reserve allowed or denied
  'start', //         start refused (an allowed start yields an authorization, not a receipt)
  'completion', //    a report settled the operation
  'finalization', //  a report was refused at settlement (cost above the hold, bad report)
  'expiry', //        the nonce expired before a start; the hold was released
  'unknown', //       the operation was marked unknown; the hold stays
] as const;

export const HOLD_DISPOSITIONS = ['reserved', 'released', 'consumed', 'release_unconfirmed', 'none'] as const;
export const holdDisposition = z.enum(HOLD_DISPOSITIONS);
export type HoldDisposition = z.infer<typeof holdDisposition>;

/** A budget hold as a receipt records it; `id` is null for a decision that placed none. */
export const holdRecord = z.strictObject({
  id: identifier.nullable(),
  disposition: holdDisposition,
  invocations: nonNegativeInt,
  cost_units_held: nonNegativeInt,
  cost_units_charged: nonNegativeInt,
});

export const receiptBody = z.strictObject({
  receipt_id: identifier,
  decision: z.enum(RECEIPT_DECISIONS),
  verdict: z.enum(['allow', 'deny']),
  /** `ok`, or the error code that names why (see shared/errors.ts). */
  reason: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/),
  operation_id: hex32,
  request_id: identifier,
  request_binding_hash: hex32,
  tool: toolName,
  parameters_digest: hex32,
  capability_id: identifier.nullable(),
  /** The operation state after this decision. */
  state: z.string().regex(/^[a-z_]{1,32}$/),
  hold: holdRecord,
  authorization_digest: hex32.nullable(),
  report_digest: hex32.nullable(),
  output_digest: hex32.nullable(),
  issued_at: timestampMs,
});
export type ReceiptBody = z.infer<typeof receiptBody>;

// ------------------------------------------------------------------ rotation

/**
 * A key rotation statement (docs/PROTOCOL.md §12): the kernel or an executor
 * names its next key, signed by the key it replaces (the envelope's signer
 * must be `old_public_key`). A verifier that pins `old_public_key` at
 * `old_epoch` pins `new_public_key` at `new_epoch` = `old_epoch` + 1, and
 * nothing else moves a pin.
 */
export const rotationBody = z.strictObject({
  role: z.enum(['kernel', 'executor']),
  id: identifier,
  old_epoch: positiveInt,
  new_epoch: positiveInt,
  old_public_key: hex32,
  new_public_key: hex32,
  issued_at: timestampMs,
});
export type RotationBody = z.infer<typeof rotationBody>;

export const ARTIFACT_BODIES = {
  capability: capabilityBody,
  receipt: receiptBody,
  authorization: authorizationBody,
  report: reportBody,
  rotation: rotationBody,
} as const;

export type ArtifactBody<K extends ArtifactKind> = z.infer<(typeof ARTIFACT_BODIES)[K]>;

/** Timestamp members each kind must order: earlier ≤ later. */
export const ARTIFACT_TIME_ORDER: Record<ArtifactKind, ReadonlyArray<readonly [string, string]>> = {
  capability: [['not_before', 'expires_at']],
  receipt: [],
  authorization: [['not_before', 'expires_at']],
  report: [['claimed_at', 'finished_at']],
  rotation: [],
};
