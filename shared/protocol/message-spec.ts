import { z } from 'zod';
import type { ChildRole } from './common.js';

/** One message kind: who serves it, the closed schema of its request body and of its result. */
export interface MessageSpec {
  readonly to: readonly ChildRole[];
  readonly request: z.ZodType;
  readonly result: z.ZodType;
}

/** An artifact's exact JCS bytes, carried as a string so every hop keeps them byte-identical. */
export const artifactText = z.string().min(2).max(1024 * 1024);

export const emptyBody = z.strictObject({});
