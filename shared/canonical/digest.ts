import { createHash } from 'node:crypto';
import { canonicalBytes } from './jcs.js';

/** SHA-256 of bytes, lowercase hex. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** SHA-256 of the RFC 8785 bytes of a value, lowercase hex: the digest every artifact uses. */
export function canonicalDigest(value: unknown): string {
  return sha256Hex(canonicalBytes(value));
}
