// The session preamble: the first line the supervisor writes on a child's
// stdin, before any frame. It delivers the session secrets (never argv or
// the environment, both visible in /proc), the child's role and name, the
// challenge its hello must sign, the keys it must pin, and its settings.
import { z } from 'zod';
import { childRole, hex16, hex32, identifier, jsonObject, positiveInt } from './common.js';

export const PREAMBLE_MAX_BYTES = 4096;
export const PREAMBLE_TAG = 'custody.preamble.v1';

export const preambleSchema = z.strictObject({
  custody: z.literal(PREAMBLE_TAG),
  sid: hex16,
  key: hex32,
  role: childRole,
  name: identifier,
  challenge: hex32,
  /** `provision` creates the child's key and store (refusing existing ones); `serve` opens them. */
  mode: z.enum(['serve', 'provision']),
  /** Public keys the child must pin: the kernel's, for an executor. */
  pins: z.strictObject({ kernel: hex32.nullable() }),
  /** Frame bounds for this session; a child accepts them only at or below its own defaults. */
  limits: z.strictObject({
    max_frame_bytes: positiveInt,
    max_depth: positiveInt,
  }),
  /** Role-specific settings (bounds, deadlines) and, in provision mode, provisioning parameters. */
  settings: jsonObject,
});
export type Preamble = z.infer<typeof preambleSchema>;
