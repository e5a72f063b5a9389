// Bounds that more than one process must agree on: what the API and the CLI
// accept has to be what a child takes, or a caller could make the supervisor
// send a frame its child refuses (and poisons the channel over).
import { canonicalBytes } from '../canonical/jcs.js';
import { CustodyError } from '../errors.js';
import { ARTIFACT_MAX_BYTES } from './artifacts.js';

/** The kernel's defaults for `max_request_bytes` and `argument_bytes_default` (kernel-proc/README.md "Bounds"). */
export const MAX_REQUEST_BYTES_DEFAULT = 64 * 1024;
export const ARGUMENT_BYTES_DEFAULT = 32 * 1024;

/**
 * Levels of frame nesting above the `arguments` object in each message that
 * carries a caller's arguments: the frame object (1) holds `body` (2), which
 * holds `arguments` (3). test/shared/protocol/bounds.test.ts seals each kind
 * and measures, so this table cannot drift from the messages.
 */
export const ARGUMENTS_ENVELOPE_DEPTH = { reserve: 2, start: 2, reserve_start: 2, execute: 2 } as const;

/**
 * How deep a caller's `arguments` may nest (the object itself is level 1) so
 * that every frame carrying them stays within the frame bound `maxDepth`:
 * the bound less the deepest envelope. With the default 32: 30.
 */
export function argumentsDepthBudget(maxDepth: number): number {
  return maxDepth - Math.max(...Object.values(ARGUMENTS_ENVELOPE_DEPTH));
}

/**
 * Bytes a frame that carries a caller's arguments may hold besides them. The
 * largest such frame is `execute`: its authorization travels as a JSON
 * string, which escaping can double up to twice its 32 KiB cap, beside the
 * expectation, the frame's own fields and its MAC (well under 4 KiB). An
 * argument bound must leave this much of `bounds.max_frame_bytes`
 * (supervisor/config/load.ts refuses a configuration that does not).
 */
export const ARGUMENT_FRAME_ENVELOPE_BYTES = 2 * ARTIFACT_MAX_BYTES.authorization + 4096;

/** The kernel settings the argument bound depends on (a subset of kernel.settings in custody.json). */
interface ArgumentSettings {
  readonly max_request_bytes?: unknown;
  readonly argument_bytes_default?: unknown;
  readonly argument_bytes_per_tool?: unknown;
}

const positive = (value: unknown): number | undefined => (typeof value === 'number' && Number.isSafeInteger(value) && value > 0 ? value : undefined);

/**
 * RFC 8785 bytes a `reserve_start` body holds besides its arguments, at the
 * longest every field may be (names of 128 characters, the largest cost):
 * the kernel bounds the whole body by `max_request_bytes`, so arguments may
 * have at most that much less. (`reserve` is this less `executor_id`, and
 * `start` carries less still.)
 */
export const RESERVE_ENVELOPE_BYTES =
  canonicalBytes({
    request_id: 'x'.repeat(128),
    subject: 'x'.repeat(128),
    tool: 'x'.repeat(128),
    arguments: {},
    capability_id: 'x'.repeat(128),
    cost_units: Number.MAX_SAFE_INTEGER,
    executor_id: 'x'.repeat(128),
    request_binding_hash: 'x'.repeat(64),
  }).length - 2;

/**
 * The argument bound for a tool, resolved from the kernel settings the way
 * the kernel resolves it: the tool's own entry, else
 * `argument_bytes_default`, else 32 KiB or `max_request_bytes` if lower —
 * and never more than fits a `reserve_start` body of `max_request_bytes`, so
 * arguments the API takes are never refused by the kernel as a whole
 * request. Bytes of the RFC 8785 form of the arguments.
 */
export function argumentBytesBound(settings: ArgumentSettings, tool: string | null): number {
  const maxRequest = positive(settings.max_request_bytes) ?? MAX_REQUEST_BYTES_DEFAULT;
  const perTool = settings.argument_bytes_per_tool;
  let bound: number | undefined;
  if (tool !== null && perTool && typeof perTool === 'object' && Object.hasOwn(perTool, tool)) {
    bound = positive((perTool as Record<string, unknown>)[tool]);
  }
  bound ??= positive(settings.argument_bytes_default) ?? Math.min(ARGUMENT_BYTES_DEFAULT, maxRequest);
  return Math.max(2, Math.min(bound, maxRequest - RESERVE_ENVELOPE_BYTES));
}

/** Refuse arguments whose RFC 8785 bytes exceed `bound` with `arguments_too_large`, naming the tool, the size and the bound. */
export function checkArgumentBytes(args: Record<string, unknown>, tool: string, bound: number): void {
  const bytes = canonicalBytes(args).length;
  if (bytes > bound) {
    throw new CustodyError('arguments_too_large', `the arguments of ${tool} are ${bytes} bytes of canonical JSON; the bound is ${bound} (kernel.settings argument_bytes_default / argument_bytes_per_tool)`);
  }
}
