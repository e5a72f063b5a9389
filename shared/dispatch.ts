// Typed handler maps for a child's message kinds: one handler per kind, each
// checked by the compiler against its kind's request and result schemas
// (shared/protocol/), so no handler casts the body it is given.
import type { MessageKind, RequestOf, ResultOf } from './protocol/messages.js';

/** One handler per kind in K; `Rest` is whatever else every handler is given. */
export type HandlerMap<K extends MessageKind, Rest extends unknown[] = []> = {
  readonly [Kind in K]: (body: RequestOf<Kind>, ...rest: Rest) => ResultOf<Kind> | Promise<ResultOf<Kind>>;
};

/**
 * Hand `body` to the handler of `kind`. The server channel has already
 * checked the body against `kind`'s closed schema (shared/wire/server.ts):
 * that check is what makes it a RequestOf<kind>, and this is the one place
 * the link between a kind and its body is taken from it rather than proved
 * again by the compiler.
 */
export function dispatch<K extends MessageKind, Rest extends unknown[]>(handlers: HandlerMap<K, Rest>, kind: K, body: unknown, ...rest: Rest): ResultOf<K> | Promise<ResultOf<K>> {
  return handlers[kind](body as RequestOf<K>, ...rest);
}
