// Session key material: a random 128-bit session id and 32-byte key per
// child process, and the two directional MAC keys derived from them with
// HKDF-SHA256. A frame MAC'd for one direction fails in the other, so a
// frame reflected back at its sender is caught.
import { randomBytes } from 'node:crypto';
import { hkdf } from '@noble/hashes/hkdf.js';
import { sha256 } from '@noble/hashes/sha2.js';

export type Direction = 'to-child' | 'to-supervisor';

export const HKDF_INFO: Record<Direction, string> = {
  'to-child': 'custody.v1 frame mac supervisor->child',
  'to-supervisor': 'custody.v1 frame mac child->supervisor',
};

export interface SessionSecrets {
  /** 32 lowercase hex characters. */
  readonly sid: string;
  /** 32 bytes. */
  readonly key: Buffer;
}

export function createSessionSecrets(): SessionSecrets {
  return { sid: randomBytes(16).toString('hex'), key: randomBytes(32) };
}

/** HKDF-SHA256(ikm = session key, salt = the 16 session id bytes, info = direction label), 32 bytes. */
export function deriveDirectionKey(secrets: SessionSecrets, direction: Direction): Buffer {
  const okm = hkdf(sha256, secrets.key, Buffer.from(secrets.sid, 'hex'), Buffer.from(HKDF_INFO[direction], 'utf8'), 32);
  return Buffer.from(okm);
}
