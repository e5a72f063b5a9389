// The request target, parsed byte by byte before anything else looks at it
// (docs/SECURITY.md "The control API"). Only origin-form (`/path?query`) is
// served; every byte must be one RFC 3986 allows there, percent-encoding must
// be `%` and two hex digits, and what it encodes must be strict UTF-8 with no
// control characters. Anything else is `target_invalid` (400), never a throw
// from a URL parser that would surface as a 500.
import { CustodyError } from '../../shared/errors.js';
import { invalidUtf8Offset } from '../../shared/text/utf8.js';

/** Longest request target served; longer is refused (Node bounds the header block anyway). */
export const MAX_TARGET_CHARS = 4096;

export interface Target {
  /** Decoded path segments after the leading `/` (`//` gives two empty segments). */
  readonly segments: readonly string[];
  /** Decoded query parameters, each name at most once. */
  readonly query: ReadonlyMap<string, string>;
  /** The path as received, for messages. */
  readonly rawPath: string;
}

// unreserved / sub-delims / ":" / "@" (pchar) and "/" in a path; "?" too in a query.
const PATH_CHAR = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/;
const QUERY_CHAR = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*$/;
const hasControl = (text: string) => [...text].some((ch) => ch.charCodeAt(0) < 0x20 || ch.charCodeAt(0) === 0x7f);

function refuse(message: string): never {
  throw new CustodyError('target_invalid', `${message}; send an origin-form target such as /v1/operations/NAME`);
}

const shown = (text: string) => JSON.stringify(text.length > 80 ? `${text.slice(0, 77)}...` : text);

/** Strict percent-decoding of one path segment or query part. */
export function decodeComponent(text: string, where: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x25) {
      const hex = text.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) refuse(`malformed percent-encoding at character ${i} of ${where} ${shown(text)}`);
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else {
      bytes.push(c);
    }
  }
  const buffer = Buffer.from(bytes);
  const offset = invalidUtf8Offset(buffer);
  if (offset >= 0) refuse(`${where} ${shown(text)} decodes to bytes that are not UTF-8 (byte offset ${offset})`);
  const decoded = buffer.toString('utf8');
  if (hasControl(decoded)) refuse(`${where} ${shown(text)} decodes to a control character (NUL, newline, …)`);
  return decoded;
}

/** Parse `request.url` (as Node gives it: each byte of the target as one latin-1 character). */
export function parseTarget(raw: string): Target {
  if (raw.length > MAX_TARGET_CHARS) {
    throw new CustodyError('target_invalid', `request target of ${raw.length} characters exceeds ${MAX_TARGET_CHARS}; no route of this API needs so long a path and query: shorten the name or the query`);
  }
  if (!raw.startsWith('/')) refuse(`request target ${shown(raw)} does not start with /`);
  const mark = raw.indexOf('?');
  const rawPath = mark < 0 ? raw : raw.slice(0, mark);
  const rawQuery = mark < 0 ? '' : raw.slice(mark + 1);
  if (!PATH_CHAR.test(rawPath)) refuse(`request path ${shown(rawPath)} holds a character a path may not hold unencoded`);
  if (!QUERY_CHAR.test(rawQuery)) refuse(`query ${shown(rawQuery)} holds a character a query may not hold unencoded`);
  const segments = rawPath
    .slice(1)
    .split('/')
    .map((segment) => decodeComponent(segment, 'path segment'));
  const query = new Map<string, string>();
  if (rawQuery !== '') {
    for (const pair of rawQuery.split('&')) {
      const eq = pair.indexOf('=');
      const name = decodeComponent(eq < 0 ? pair : pair.slice(0, eq), 'query name');
      const value = decodeComponent(eq < 0 ? '' : pair.slice(eq + 1), 'query value');
      if (query.has(name)) refuse(`query parameter ${shown(name)} is given twice`);
      query.set(name, value);
    }
  }
  return { segments, query, rawPath };
}
