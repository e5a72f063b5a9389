// The kernel's settings: the `settings` object of its preamble, checked
// against one closed schema. Every bound has a default and a key; ARCHITECTURE.md §10
// bounds are configurable lower only (their defaults are also their ceilings).
import { z } from 'zod';
import { CustodyError } from '../errors.js';
import { identifier, nonNegativeInt, toolName, toolPattern } from './common.js';
import { describeIssues } from '../wire/session.js';
import { DEFAULT_MAX_FRAME_BYTES } from '../wire/frame-reader.js';
import { ARGUMENT_BYTES_DEFAULT, MAX_REQUEST_BYTES_DEFAULT } from './bounds.js';

export const NONCE_TTL_MS_DEFAULT = 120_000;
export const NONCE_CAPACITY_DEFAULT = 1024;
// Defined in shared: the supervisor's API and the CLI refuse arguments past the kernel's bound before sending.
export { ARGUMENT_BYTES_DEFAULT, MAX_REQUEST_BYTES_DEFAULT };
export const HISTORY_PER_OPERATION_DEFAULT = 16;
/** Room for the reserve receipt, an `unknown` mark, a settlement and one refusal that changes nothing. */
export const HISTORY_PER_OPERATION_MIN = 4;
export const SWEEP_INTERVAL_MS_DEFAULT = 1000;
export const COMMIT_BATCH_MAX_DEFAULT = 32;
const HOUR_MS = 3_600_000;

const bounded = (min: number, max: number, fallback: number) => z.number().int().min(min).max(max).default(fallback);

const defaultGrant = z.strictObject({
  tool: toolPattern,
  subject: identifier.or(z.literal('*')),
  max_invocations: z.number().int().min(1).max(1_000_000_000),
  max_cost_units: nonNegativeInt.nullable(),
  ttl_ms: z.number().int().min(1).max(10 * 365 * 24 * HOUR_MS),
});
export type DefaultGrant = z.infer<typeof defaultGrant>;

/** The grant created at provisioning (ARCHITECTURE.md §6, the walkthrough in the README). */
export const DEFAULT_GRANT: DefaultGrant = {
  tool: 'review-notes/append',
  subject: '*',
  max_invocations: 4,
  max_cost_units: null,
  ttl_ms: HOUR_MS,
};

/** The preamble `settings` of a kernel (docs/PROTOCOL.md renders its table from this schema). */
export const kernelSettingsSchema = z.strictObject({
  /** How long a reservation's execution nonce lives before the sweep expires it. */
  nonce_ttl_ms: bounded(1, NONCE_TTL_MS_DEFAULT, NONCE_TTL_MS_DEFAULT),
  /** Live (unused, unexpired) nonces at once; when full, reserve refuses, never evicts. */
  nonce_capacity: bounded(1, NONCE_CAPACITY_DEFAULT, NONCE_CAPACITY_DEFAULT),
  /** UTF-8 bytes of the RFC 8785 form of a reserve or start request body. */
  max_request_bytes: bounded(256, DEFAULT_MAX_FRAME_BYTES, MAX_REQUEST_BYTES_DEFAULT),
  /** UTF-8 bytes of the RFC 8785 form of a tool's arguments, for tools without their own entry; default 32 KiB or max_request_bytes if lower. */
  argument_bytes_default: z.number().int().min(2).max(DEFAULT_MAX_FRAME_BYTES).optional(),
  /** Per-tool argument bounds, tool name → bytes. */
  argument_bytes_per_tool: z.record(toolName, z.number().int().min(2).max(DEFAULT_MAX_FRAME_BYTES)).default({}),
  /** Receipts retained per operation. */
  history_per_operation: bounded(HISTORY_PER_OPERATION_MIN, HISTORY_PER_OPERATION_DEFAULT, HISTORY_PER_OPERATION_DEFAULT),
  /** How often the expiry sweep runs (it also runs before every batch of requests). */
  sweep_interval_ms: bounded(10, 60_000, SWEEP_INTERVAL_MS_DEFAULT),
  /** Length of an authorization's execution window; default the nonce TTL; never past the grant's expiry. */
  execution_window_ms: z.number().int().min(1).max(HOUR_MS).optional(),
  /** Requests whose writes share one transaction (group commit, ARCHITECTURE.md §13). */
  commit_batch_max: bounded(1, 1024, COMMIT_BATCH_MAX_DEFAULT),
  /** Provision mode only: the grant created with the store, or null for none. */
  default_grant: defaultGrant.nullable().default(DEFAULT_GRANT),
});

type Resolved = 'execution_window_ms' | 'argument_bytes_default';
export type KernelSettings = Readonly<Omit<z.infer<typeof kernelSettingsSchema>, Resolved> & Record<Resolved, number>>;

/** Validate the preamble's settings; refuses unknown keys and values outside their bounds (config_invalid). */
export function parseKernelSettings(raw: unknown): KernelSettings {
  const parsed = kernelSettingsSchema.safeParse(raw);
  if (!parsed.success) throw new CustodyError('config_invalid', `kernel settings (custody.json kernel.settings): ${describeIssues(parsed.error)}`);
  const settings = {
    ...parsed.data,
    argument_bytes_default: parsed.data.argument_bytes_default ?? Math.min(ARGUMENT_BYTES_DEFAULT, parsed.data.max_request_bytes),
    execution_window_ms: parsed.data.execution_window_ms ?? parsed.data.nonce_ttl_ms,
  };
  for (const [tool, bytes] of Object.entries({ default: settings.argument_bytes_default, ...settings.argument_bytes_per_tool })) {
    if (bytes > settings.max_request_bytes) {
      throw new CustodyError(
        'config_invalid',
        `kernel settings: argument bound for ${tool} (${bytes} bytes) exceeds max_request_bytes (${settings.max_request_bytes}); arguments travel inside the request`,
      );
    }
  }
  return Object.freeze(settings);
}

/** The argument bound that applies to a tool. */
export function argumentBytesFor(settings: KernelSettings, tool: string): number {
  return settings.argument_bytes_per_tool[tool] ?? settings.argument_bytes_default;
}
