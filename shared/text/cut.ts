// Cutting human text to a bound that a schema checks and another language
// can reproduce: counted in Unicode code points (zod's string bounds count
// them, as Python's len() does), never splitting a surrogate pair, and with
// any lone surrogate replaced by U+FFFD first, since canonical JSON
// (docs/PROTOCOL.md §2) cannot carry one and a signature over it would fail.

/** Bound on the `message` of an `error` or `fatal` frame, in code points (docs/PROTOCOL.md §5). */
export const WIRE_ERROR_MESSAGE_MAX = 4096;

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

const ANY_SURROGATE = /[\ud800-\udfff]/;

/** `text` with every lone surrogate replaced by U+FFFD (a string without surrogates is returned as it is, unscanned by the replace). */
export function wellFormed(text: string): string {
  return ANY_SURROGATE.test(text) ? text.replace(LONE_SURROGATE, '\ufffd') : text;
}

/** A JSON value with every string (member names too) made well-formed: an adapter's output, whose canonical form must be signed. */
export function wellFormedValue<T>(value: T): T {
  if (typeof value === 'string') return wellFormed(value) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => wellFormedValue(item)) as T;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [wellFormed(key), wellFormedValue(item as unknown)])) as T;
  }
  return value;
}

/** `text` well-formed (lone surrogates → U+FFFD), then its first `max` code points. */
export function cutText(text: string, max: number): string {
  const whole = wellFormed(text);
  // Fast path: a string no longer in UTF-16 units than the bound has at most that many code points.
  if (whole.length <= max) return whole;
  let units = 0;
  let points = 0;
  while (units < whole.length && points < max) {
    units += whole.codePointAt(units)! > 0xffff ? 2 : 1;
    points++;
  }
  return whole.slice(0, units);
}
