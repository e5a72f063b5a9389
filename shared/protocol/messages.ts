// The table of every message kind on the wire. Requests flow supervisor →
// child; each gets exactly one `result` or `error` frame with the same id.
// `hello`, `fatal` and `head` are the only frames a child sends unasked. The kinds
// each child serves live in their own files; this one joins them.
import { z } from 'zod';
import { hex32, hex64, identifier, nonNegativeInt, positiveInt, timestampMs, wireError } from './common.js';
import { EXECUTOR_MESSAGES } from './executor-messages.js';
import { KERNEL_MESSAGES } from './kernel-messages.js';
import { type MessageSpec, emptyBody } from './message-spec.js';
import { ROTATION_MESSAGES } from './rotation-messages.js';
import { statsResult } from './stats.js';

export const COMMON_MESSAGES = {
  ping: { to: ['kernel', 'executor'], request: emptyBody, result: z.strictObject({ now: timestampMs }) },
  /** Stop accepting work, finish what runs (bounded), answer, exit 0. */
  shutdown: { to: ['kernel', 'executor'], request: emptyBody, result: emptyBody },
  /** Diagnostic: returns its body unchanged. Lets a peer test framing with arbitrary objects. */
  echo: {
    to: ['kernel', 'executor'],
    request: z.record(z.string(), z.unknown()),
    result: z.record(z.string(), z.unknown()),
  },
  /** Figures for the supervisor's GET /metrics (shared/protocol/stats.ts); reads only. */
  stats: { to: ['kernel', 'executor'], request: emptyBody, result: statsResult },
} as const satisfies Record<string, MessageSpec>;

export const MESSAGES = { ...COMMON_MESSAGES, ...KERNEL_MESSAGES, ...EXECUTOR_MESSAGES, ...ROTATION_MESSAGES } as const;

export type MessageKind = keyof typeof MESSAGES;
export type RequestOf<K extends MessageKind> = z.infer<(typeof MESSAGES)[K]['request']>;
export type ResultOf<K extends MessageKind> = z.infer<(typeof MESSAGES)[K]['result']>;

/**
 * Control messages are taken whatever the bound on requests in flight, on
 * both ends of a channel (docs/PROTOCOL.md §3): a ping must reach a child
 * that a flood of reads keeps at its bound, or the heartbeat goes blind; and
 * effects in flight wait for `head.witnessed`, so bounding it by them could
 * starve them (docs/ROLLBACK.md).
 */
export const CONTROL_KINDS: ReadonlySet<MessageKind> = new Set<MessageKind>(['ping', 'cancel', 'shutdown', 'head.witnessed']);

export function isMessageKind(kind: string): kind is MessageKind {
  return Object.hasOwn(MESSAGES, kind);
}

export function messageSpec(kind: MessageKind): MessageSpec {
  return MESSAGES[kind];
}

/** The child's identity proof, its first frame (ARCHITECTURE.md §4.2). */
export const helloBody = z.strictObject({
  role: z.enum(['kernel', 'executor']),
  id: identifier,
  public_key: hex32,
  key_epoch: positiveInt,
  /** The head of the child's store (docs/ROLLBACK.md): covered by the signature. */
  head: nonNegativeInt,
  signature: hex64,
});
export type HelloBody = z.infer<typeof helloBody>;

/** A child that cannot serve says why, then exits. */
export const fatalBody = wireError;
export const errorBody = wireError;

/**
 * A child's store head advanced (docs/ROLLBACK.md): sent unasked, before the
 * answer that depends on it. The supervisor records it durably; an executor
 * waits for `head.witnessed` before it runs an effect.
 */
export const headBody = z.strictObject({ head: nonNegativeInt });

/** Frame kinds that are not requests. */
export const RESULT_KIND = 'result';
export const ERROR_KIND = 'error';
export const HELLO_KIND = 'hello';
export const FATAL_KIND = 'fatal';
export const HEAD_KIND = 'head';
