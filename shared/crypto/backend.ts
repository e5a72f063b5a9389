// The shape every Ed25519 implementation takes in custody. Each backend's
// verify() applies the whole strict policy (strict-policy.ts) itself, so a
// caller holding any backend gets the same answer on every input.
import { CustodyError } from '../errors.js';

export type BackendName = 'node' | 'noble';

export interface Ed25519Backend {
  readonly name: BackendName;
  /** 32-byte RFC 8032 seed → 32-byte public key. */
  publicKey(seed: Uint8Array): Uint8Array;
  /** RFC 8032 Ed25519: 64 bytes, deterministic. */
  sign(seed: Uint8Array, message: Uint8Array): Uint8Array;
  /** The strict policy; never throws on bad input, answers false instead. */
  verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean;
}

export const SEED_LENGTH = 32;
export const PUBLIC_KEY_LENGTH = 32;
export const SIGNATURE_LENGTH = 64;

export function isBytes(value: unknown, length?: number): value is Uint8Array {
  return value instanceof Uint8Array && (length === undefined || value.length === length);
}

/** Refuses anything that is not a 32-byte seed, naming what was given (never its bytes). */
export function requireSeed(seed: unknown): asserts seed is Uint8Array {
  if (!(seed instanceof Uint8Array)) {
    throw new CustodyError('key_invalid', `an Ed25519 seed must be a Uint8Array, got ${typeof seed}`);
  }
  if (seed.length !== SEED_LENGTH) {
    throw new CustodyError('key_invalid', `an Ed25519 seed must be ${SEED_LENGTH} bytes, got ${seed.length}`);
  }
}
