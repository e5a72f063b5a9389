// RFC 8785 (JSON Canonicalization Scheme). Hand-written because the rules are
// a few lines on top of what ECMAScript already guarantees (Number#toString is
// the JCS number form, JSON.stringify's string escaping is the JCS string
// form, and the default sort orders keys by UTF-16 code units), while the
// `canonicalize` package needs Node 22 and accepts values JCS forbids (lone
// surrogates, non-finite numbers are dropped silently, class instances).
import { CustodyError } from '../errors.js';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Nesting accepted by the canonicalizer; frames and artifacts are bounded lower by their own readers. */
export const CANONICAL_MAX_DEPTH = 64;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function canonicalize(value: unknown): string {
  const out: string[] = [];
  write(value, out, 0);
  return out.join('');
}

export function canonicalBytes(value: unknown): Buffer {
  return Buffer.from(canonicalize(value), 'utf8');
}

function write(value: unknown, out: string[], depth: number): void {
  if (depth > CANONICAL_MAX_DEPTH) {
    throw new CustodyError('canonical_unsupported', `value nests deeper than ${CANONICAL_MAX_DEPTH} levels`);
  }
  switch (typeof value) {
    case 'string':
      out.push(quote(value));
      return;
    case 'number':
      if (!Number.isFinite(value)) {
        throw new CustodyError('canonical_unsupported', `number ${String(value)} has no JSON form`);
      }
      out.push(JSON.stringify(value));
      return;
    case 'boolean':
      out.push(value ? 'true' : 'false');
      return;
    case 'object':
      if (value === null) {
        out.push('null');
      } else if (Array.isArray(value)) {
        writeArray(value, out, depth);
      } else {
        writeObject(value, out, depth);
      }
      return;
    default:
      throw new CustodyError('canonical_unsupported', `a ${typeof value} has no JSON form`);
  }
}

function writeArray(items: unknown[], out: string[], depth: number): void {
  out.push('[');
  for (let i = 0; i < items.length; i++) {
    if (i > 0) out.push(',');
    if (!(i in items)) throw new CustodyError('canonical_unsupported', 'sparse arrays have no JSON form');
    write(items[i], out, depth + 1);
  }
  out.push(']');
}

function writeObject(value: object, out: string[], depth: number): void {
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    throw new CustodyError('canonical_unsupported', 'only plain objects can be canonicalized');
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  out.push('{');
  let first = true;
  for (const key of keys) {
    const member = record[key];
    if (member === undefined) continue; // as JSON.stringify: an absent optional member
    if (!first) out.push(',');
    first = false;
    out.push(quote(key), ':');
    write(member, out, depth + 1);
  }
  out.push('}');
}

function quote(text: string): string {
  if (LONE_SURROGATE.test(text)) {
    throw new CustodyError('canonical_unsupported', 'string contains a lone UTF-16 surrogate');
  }
  return JSON.stringify(text);
}
