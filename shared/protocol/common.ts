// Primitive schemas shared by every message and artifact. Each is closed and
// exact: hex is lowercase and of fixed width, timestamps are integer
// milliseconds in (0, 2^53 − 1], identifiers are short and printable.
import { z } from 'zod';
import { WIRE_ERROR_MESSAGE_MAX } from '../text/cut.js';

export const hex = (bytes: number) =>
  z.string().regex(new RegExp(`^[0-9a-f]{${bytes * 2}}$`), `expected ${bytes * 2} lowercase hex characters`);

/** 32 bytes: public keys, SHA-256 digests, challenges, session keys. */
export const hex32 = hex(32);
/** 16 bytes: session ids. */
export const hex16 = hex(16);
/** 64 bytes: Ed25519 signatures. */
export const hex64 = hex(64);

export const MAX_TIMESTAMP_MS = Number.MAX_SAFE_INTEGER;

/** Every timestamp: integer milliseconds since the epoch, non-zero, at most 2^53 − 1. */
export const timestampMs = z.number().int().min(1).max(MAX_TIMESTAMP_MS);

export const nonNegativeInt = z.number().int().min(0).max(MAX_TIMESTAMP_MS);
export const positiveInt = z.number().int().min(1).max(MAX_TIMESTAMP_MS);

/** What an identifier may be: 1-128 characters of A-Z a-z 0-9 _ . : @ / + -, not starting with punctuation. */
export const IDENTIFIER_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127}$/;

/** Request ids, grant ids, executor ids, subjects: 1–128 printable characters (operation names follow the stricter rule of names.ts). */
export const identifier = z
  .string()
  .regex(IDENTIFIER_PATTERN, 'expected 1-128 characters of A-Z a-z 0-9 _ . : @ / + - (not starting with punctuation)');

/** A tool name: lowercase path segments, e.g. `review-notes/append`. */
export const toolName = z
  .string()
  .max(128)
  .regex(/^[a-z0-9][a-z0-9_.-]*(\/[a-z0-9][a-z0-9_.-]*)*$/, 'expected a tool name such as review-notes/append');

/** What a grant covers: a tool name, or a prefix ending in `/*` (`review-notes/*`), or `*`. */
export const toolPattern = z
  .string()
  .max(128)
  .regex(/^(\*|[a-z0-9][a-z0-9_.-]*(\/[a-z0-9][a-z0-9_.-]*)*(\/\*)?)$/, 'expected a tool name or a prefix ending in /*');

/** Whether a grant's tool pattern covers a tool. */
export function toolPatternCovers(pattern: string, tool: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('/*')) return tool.startsWith(pattern.slice(0, -1));
  return pattern === tool;
}

/**
 * Every pattern that covers a tool (toolPatternCovers): '*', the tool
 * itself, and each of its prefixes ending in '/' followed by '*'. For
 * `a/b/c`: '*', 'a/*', 'a/b/*', 'a/b/c'. So the grants that cover a tool are
 * found by their pattern, through an index, not by reading every grant.
 */
export function coveringPatterns(tool: string): string[] {
  const patterns = ['*', tool];
  for (let at = tool.indexOf('/'); at !== -1; at = tool.indexOf('/', at + 1)) patterns.push(`${tool.slice(0, at + 1)}*`);
  return patterns;
}

/** Any JSON value (the arguments of a tool, an adapter's output). */
export const jsonValue = z.json();
export const jsonObject = z.record(z.string(), z.json());

export type JsonValue = z.infer<typeof jsonValue>;
export type JsonObject = z.infer<typeof jsonObject>;

export const ROLES = ['supervisor', 'kernel', 'executor'] as const;
export const role = z.enum(ROLES);
export type Role = z.infer<typeof role>;

export const childRole = z.enum(['kernel', 'executor']);
export type ChildRole = z.infer<typeof childRole>;

export const wireError = z.strictObject({
  code: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/),
  message: z.string().max(WIRE_ERROR_MESSAGE_MAX),
});
