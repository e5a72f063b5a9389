// Strict decoding of one line into a JSON object: UTF-8 with a fatal decoder,
// a nesting bound checked on the decoded text before JSON.parse builds anything
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

/**
 * The deepest nesting of objects and arrays in JSON bytes, ignoring brackets
 * inside strings; early once past `limit`. Malformed bytes get some answer
 * here and are refused by JSON.parse later. It is scanJson's depth, without
 * member names: every byte the depth turns on (brackets, quotes, the
 * backslash) is ASCII, and no byte of a multi-byte UTF-8 sequence is, so the
 * bytes read one character each (latin1) nest exactly as their UTF-8 text
 * does, with no decoding that could fail. A sender scans every frame it
 * seals with it.
 */
export function measureDepth(bytes: Uint8Array, limit: number): number {
  return scanJson(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1'), limit, false).depth;
}

/**
 * Where a closing quote stands: the index of the quote that ends the string
 * opened at `open`, or -1 when the text ends first. A quote preceded by an
 * odd run of backslashes is escaped (each backslash escapes the next
 * character, so the run pairs off). The search between quotes is native
 * (indexOf), so a long string costs a step per quote, not per character.
 */
function closingQuote(text: string, open: number): number {
  for (let quote = text.indexOf('"', open + 1); quote !== -1; quote = text.indexOf('"', quote + 1)) {
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote;
  }
  return -1;
}

/**
 * The member names of one object seen so far. Most objects on the wire have
 * a handful of members: a list searched in place costs less than a Set
 * made for each, and a Set takes over past SMALL_OBJECT names.
 */
const SMALL_OBJECT = 16;
class Names {
  #list: string[] = [];
  #set: Set<string> | null = null;

  /** False when `name` was already there. */
  add(name: string): boolean {
    if (this.#set !== null) {
      if (this.#set.has(name)) return false;
      this.#set.add(name);
      return true;
    }
    if (this.#list.includes(name)) return false;
    this.#list.push(name);
    if (this.#list.length > SMALL_OBJECT) {
      this.#set = new Set(this.#list);
      this.#list = [];
    }
    return true;
  }
}

/**
 * One pass over JSON text for what JSON.parse does not check: the deepest
 * nesting of objects and arrays (measureDepth's answer, early once past
 * `limit`) and the first member name that appears twice in one object.
 * The duplicate is only meaningful for text JSON.parse accepts; malformed
 * text gets some answer, and JSON.parse refuses it. Every frame a process
 * reads goes through here once (decodeJsonObject), and so does every request
 * body the API reads (supervisor/api/http.ts). Without `members`, the
 * depth alone (measureDepth).
 */
export interface JsonScan {
  readonly depth: number;
  /** The first member name seen twice in one object. */
  readonly duplicate: string | undefined;
  /** Whether a member is named `__proto__` (RESERVED_MEMBER). */
  readonly reserved: boolean;
}

/**
 * JSON.parse keeps a member named `__proto__` as an own property, but most
 * of what reads the object next does not: zod's records drop it, a spread
 * or an assignment sets the prototype instead. Arguments carrying one would
 * be digested, signed and executed without it, other arguments than the
 * caller sent, so every reader refuses it like a duplicate (docs/PROTOCOL.md
 * §3, rule 6).
 */
export const RESERVED_MEMBER = '__proto__';

export function scanJson(text: string, limit: number, members = true): JsonScan {
  // One entry per open container: the names seen so far for an object, null for an array.
  const open: Array<Names | null> = [];
  let depth = 0;
  let deepest = 0;
  let expectKey = false;
  let duplicate: string | undefined;
  let reserved = false;
  // Names stop being read once a repeat is found, or once one cannot be
  // unescaped: the text is then malformed, JSON.parse refuses it, and a
  // line of a million bad names must not cost a million thrown errors.
  let reading = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = closingQuote(text, i);
      if (end === -1) break;
      const names = open[open.length - 1];
      if (expectKey && names) {
        if (reading) {
          const raw = text.slice(i, end + 1);
          let name: string | undefined = raw.slice(1, -1);
          if (name.includes('\\')) {
            try {
              name = JSON.parse(raw) as string;
            } catch {
              name = undefined;
              reading = false;
            }
          }
          if (name === RESERVED_MEMBER) reserved = true;
          if (name !== undefined && !names.add(name)) {
            duplicate = name;
            reading = false;
          }
        }
        expectKey = false;
      }
      i = end;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      open.push(members && c === OPEN_BRACE ? new Names() : null);
      expectKey = members && c === OPEN_BRACE;
      depth++;
      if (depth > deepest) {
        deepest = depth;
        if (deepest > limit) return { depth: deepest, duplicate, reserved };
      }
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      open.pop();
      expectKey = false;
      depth--;
    } else if (c === COMMA) {
      expectKey = open[open.length - 1] != null;
    }
  }
  return { depth: deepest, duplicate, reserved };
}

export function decodeUtf8Strict(bytes: Uint8Array, what: string): string {
  try {
    return utf8.decode(bytes);
  } catch (cause) {
    throw new CustodyError('frame_malformed', `${what} is not valid UTF-8`, { cause });
  }
}

/** Decode one line as a JSON object under the nesting bound. */
/** How decodeJsonObject ends the message of a value that is not an object (custody mcp answers it -32600, not -32700). */
export const NOT_AN_OBJECT = 'is not a JSON object at top level';

export function decodeJsonObject(bytes: Uint8Array, maxDepth: number, what = 'frame'): Record<string, unknown> {
  const text = decodeUtf8Strict(bytes, what);
  const { depth, duplicate, reserved } = scanJson(text, maxDepth);
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
    throw new CustodyError('frame_malformed', `${what} ${NOT_AN_OBJECT}`);
  }
  if (duplicate !== undefined) {
    throw new CustodyError('frame_malformed', `${what} has the member ${JSON.stringify(duplicate)} twice in one object`);
  }
  if (reserved) throw new CustodyError('frame_malformed', `${what} has a member named ${RESERVED_MEMBER}, which no object may have`);
  return value as Record<string, unknown>;
}
