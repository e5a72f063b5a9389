// Messages of key rotation (docs/PROTOCOL.md §12), to the kernel and to
// executors. A key is made in the process that owns it and never crosses the
// wire; what crosses is the rotation statement its predecessor signed.
import { z } from 'zod';
import { hex32, identifier, positiveInt, timestampMs } from './common.js';
import { type MessageSpec, artifactText, emptyBody } from './message-spec.js';

/** Statements (or key epochs) in one message: a longer chain is paged by epoch (`after_epoch`) or sent in several messages, in order. */
export const ROTATION_STATEMENTS_MAX = 256;

const statements = z.array(artifactText).max(ROTATION_STATEMENTS_MAX);

const epochKey = z.strictObject({ key_epoch: positiveInt, public_key: hex32, statement: artifactText.nullable(), created_at: timestampMs });

export const ROTATION_MESSAGES = {
  /** The kernel pins an executor's next key epoch, only on a statement signed by the key it pins now. */
  'pin.rotate': {
    to: ['kernel'],
    request: z.strictObject({ statement: artifactText }),
    result: z.strictObject({ executor_id: identifier, public_key: hex32, key_epoch: positiveInt, pinned_at: timestampMs }),
  },
  /** The kernel makes its next key and answers the statement its current key signed. */
  'kernel.rotate': {
    to: ['kernel'],
    request: emptyBody,
    result: z.strictObject({ key_epoch: positiveInt, public_key: hex32, statement: artifactText }),
  },
  /**
   * The kernel's key epochs after `after_epoch`, oldest first, at most
   * ROTATION_STATEMENTS_MAX (page on by the last one's epoch), its current
   * epoch, and every executor key epoch it has pinned (receipt export, catch-up).
   */
  'keys.list': {
    to: ['kernel'],
    request: z.strictObject({ after_epoch: z.number().int().min(0) }),
    result: z.strictObject({
      kernel_epoch: positiveInt,
      kernel: z.array(epochKey).max(ROTATION_STATEMENTS_MAX),
      executors: z.array(z.strictObject({ executor_id: identifier, key_epoch: positiveInt, public_key: hex32, pinned_at: timestampMs })).max(65_536),
    }),
  },
  /** The executor makes its next key and answers the statement its current key signed. */
  'key.rotate': {
    to: ['executor'],
    request: emptyBody,
    result: z.strictObject({ key_epoch: positiveInt, public_key: hex32, statement: artifactText }),
  },
  /** The executor's own statements past `after_epoch`, oldest first, at most ROTATION_STATEMENTS_MAX (page on from the last): what a pin behind it lacks. */
  'key.statements': {
    to: ['executor'],
    request: z.strictObject({ after_epoch: positiveInt }),
    result: z.strictObject({ key_epoch: positiveInt, public_key: hex32, statements }),
  },
  /** Kernel rotation statements, oldest first; the executor re-pins the kernel key through each that follows its pin. */
  'kernel.rotated': {
    to: ['executor'],
    request: z.strictObject({ statements }),
    result: z.strictObject({ kernel_epoch: positiveInt, kernel_public_key: hex32 }),
  },
} as const satisfies Record<string, MessageSpec>;
