// Strict decoding of one line into a JSON object: UTF-8 with a fatal decoder,
// a nesting bound checked on the bytes before JSON.parse builds anything
// (JSON.parse has no depth limit), an object at top level, and no object
// with the same member twice. JSON.parse keeps the last of duplicated
// members, so a reader in another language that keeps the first would see
// other values in the same bytes; refusing them makes every strict reader
// agree (docs/PROTOCOL.md §2).
import { CustodyError } from '../errors.js';

export const DEFAULT_MAX_DEPTH = 32;

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
/** Ordinary string bytes stepped over one by one before a native search takes over. */
const RUN = 32;

/**
 * The deepest nesting of objects and arrays in JSON text, ignoring brackets
 * inside strings. Stops counting (returns early) once `limit` is exceeded.
 * Malformed text gets some answer here and is refused by JSON.parse later.
 * Inside a string it jumps from one quote or backslash to the next with
 * indexOf, so the long strings that make up most of a large frame cost a
 * native search, not a loop step per byte (every frame is scanned twice:
 * by its sender and by its reader).
 */
export function measureDepth(bytes: Uint8Array, limit: number): number {
  let depth = 0;
  let deepest = 0;
  // Next quote / backslash at or after the cursor; -1 once there is none left.
  let nextQuote = -2;
  let nextBackslash = -2;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (b === QUOTE) {
      // A string: find its closing quote, stepping over escapes, byte by
      // byte while quotes and backslashes come close together; after RUN
      // ordinary bytes in a row, a native search jumps to the next one.
      let plain = 0;
      for (i++; i < bytes.length; i++) {
        const c = bytes[i];
        if (c === QUOTE) break;
        if (c === BACKSLASH) {
          i++;
          plain = 0;
        } else if (++plain === RUN) {
          plain = 0;
          if (nextQuote !== -1 && nextQuote <= i) nextQuote = bytes.indexOf(QUOTE, i + 1);
          if (nextBackslash !== -1 && nextBackslash <= i) nextBackslash = bytes.indexOf(BACKSLASH, i + 1);
          if (nextQuote === -1) return deepest;
          i = (nextBackslash !== -1 && nextBackslash < nextQuote ? nextBackslash : nextQuote) - 1;
        }
      }
      if (i >= bytes.length) return deepest;
    } else if (b === OPEN_BRACE || b === OPEN_BRACKET) {
      depth++;
      if (depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) {
      depth--;
    }
  }
  return deepest;
}

/**
 * The first member name that appears twice in one object of `text`, or
 * undefined. `text` must already be valid JSON (it is scanned after
 * JSON.parse accepted it), so the scanner only tracks where keys stand.
 */
export function findDuplicateMember(text: string): string | undefined {
  // One entry per open container: the names seen so far for an object, null for an array.
  const open: Array<Set<string> | null> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const start = i;
      let escaped = false;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === BACKSLASH) {
          escaped = true;
          i++;
        } else if (d === QUOTE) break;
      }
      const names = open[open.length - 1];
      if (expectKey && names) {
        const raw = text.slice(start, i + 1);
        const name = escaped ? (JSON.parse(raw) as string) : raw.slice(1, -1);
        if (names.has(name)) return name;
        names.add(name);
        expectKey = false;
      }
    } else if (c === OPEN_BRACE) {
      open.push(new Set());
      expectKey = true;
    } else if (c === OPEN_BRACKET) {
      open.push(null);
      expectKey = false;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      open.pop();
      expectKey = false;
    } else if (c === COMMA) {
      expectKey = open[open.length - 1] != null;
    }
  }
  return undefined;
}

export function decodeUtf8Strict(bytes: Uint8Array, what: string): string {
  try {
    return utf8.decode(bytes);
  } catch (cause) {
    throw new CustodyError('frame_malformed', `${what} is not valid UTF-8`, { cause });
  }
}

/** Decode one line as a JSON object under the nesting bound. */
export function decodeJsonObject(bytes: Uint8Array, maxDepth: number, what = 'frame'): Record<string, unknown> {
  const text = decodeUtf8Strict(bytes, what);
  const depth = measureDepth(bytes, maxDepth);
  if (depth > maxDepth) {
    throw new CustodyError('frame_too_deep', `${what} nests deeper than ${maxDepth} levels`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new CustodyError('frame_malformed', `${what} is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CustodyError('frame_malformed', `${what} is not a JSON object at top level`);
  }
  const duplicate = findDuplicateMember(text);
  if (duplicate !== undefined) {
    throw new CustodyError('frame_malformed', `${what} has the member ${JSON.stringify(duplicate)} twice in one object`);
  }
  return value as Record<string, unknown>;
}
