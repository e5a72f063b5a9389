// Cutting human text to a bound that a schema checks and another language
// can reproduce: counted in Unicode code points (zod's string bounds count
// them, as Python's len() does), never splitting a surrogate pair, and with
// any lone surrogate replaced by U+FFFD first, since canonical JSON
// (docs/PROTOCOL.md §2) cannot carry one and a signature over it would fail.

/** Bound on the `message` of an `error` or `fatal` frame, in code points (docs/PROTOCOL.md §5). */
export const WIRE_ERROR_MESSAGE_MAX = 4096;

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** `text` well-formed (lone surrogates → U+FFFD), then its first `max` code points. */
export function cutText(text: string, max: number): string {
  const whole = text.replace(LONE_SURROGATE, '\ufffd');
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
