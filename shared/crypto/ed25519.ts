// Ed25519 for custody: one strict verification policy (strict-policy.ts), two
// backends that answer identically, and a Signer that keeps its secret inside
// the process. Everything outside shared/crypto/ imports from here.
import { randomBytes } from 'node:crypto';
import { CustodyError } from '../errors.js';
import { type BackendName, type Ed25519Backend, PUBLIC_KEY_LENGTH, requireSeed, SEED_LENGTH } from './backend.js';
import { createNodePrivateKey, exportRawPublicKey, nodeBackend, signWithKeyObject } from './node-backend.js';
import { nobleBackend } from './noble-backend.js';
import {
  describeNonCanonicalEncoding,
  encodesCurvePoint,
  encodesSmallOrderPoint,
} from './strict-policy.js';

export { type BackendName, type Ed25519Backend, nobleBackend, nodeBackend };

export const BACKENDS: readonly Ed25519Backend[] = Object.freeze([nodeBackend, nobleBackend]);

/** The backend for the hot path: node:crypto, about ten times faster than noble here. */
export function defaultBackend(): Ed25519Backend {
  return nodeBackend;
}

/** 32 bytes from the OS CSPRNG, to be used as an RFC 8032 seed. */
export function generateSeed(): Uint8Array {
  return new Uint8Array(randomBytes(SEED_LENGTH));
}

/**
 * The checks a peer runs when it pins a key: 32 bytes, canonically encoded,
 * a point on the curve, not of small order. Throws `key_invalid` naming the fault.
 */
export function validatePublicKey(key: Uint8Array): void {
  if (!(key instanceof Uint8Array)) {
    throw new CustodyError('key_invalid', `an Ed25519 public key must be a Uint8Array, got ${typeof key}`);
  }
  if (key.length !== PUBLIC_KEY_LENGTH) {
    throw new CustodyError('key_invalid', `an Ed25519 public key must be ${PUBLIC_KEY_LENGTH} bytes, got ${key.length}`);
  }
  const hex = Buffer.from(key).toString('hex');
  const nonCanonical = describeNonCanonicalEncoding(key);
  if (nonCanonical !== undefined) throw new CustodyError('key_invalid', `public key ${hex} is ${nonCanonical}`);
  if (!encodesCurvePoint(key)) throw new CustodyError('key_invalid', `public key ${hex} is not a point on the curve`);
  if (encodesSmallOrderPoint(key)) throw new CustodyError('key_invalid', `public key ${hex} is a point of small order`);
}

const PUBLIC_KEY_HEX = /^[0-9a-f]{64}$/;
const SIGNATURE_HEX = /^[0-9a-f]{128}$/;

function describeText(value: unknown): string {
  if (typeof value !== 'string') return `a ${typeof value}`;
  const shown = value.length > 140 ? `${value.slice(0, 140)}…` : value;
  return `${JSON.stringify(shown)} (${value.length} characters)`;
}

/**
 * Keys already found valid. Every artifact names its signer's key, so a
 * kernel or executor decodes the same few keys on every operation; the curve
 * checks behind validatePublicKey (a square root in the field) cost the
 * kernel ~0.09 ms per operation in `node dist/scripts/bench/profile.js`
 * (docs/PERFORMANCE.md). The answer depends on the bytes alone, so it is
 * remembered; bounded, since a peer could name many keys.
 */
const VALID_KEYS = new Set<string>();
const VALID_KEYS_MAX = 256;

/** How many valid keys are remembered: never more than VALID_KEYS_MAX (its test reads it). */
export function rememberedKeys(): number {
  return VALID_KEYS.size;
}

/** Exactly 64 lowercase hex characters naming a valid key (validatePublicKey). */
export function publicKeyFromHex(hex: string): Uint8Array {
  if (typeof hex !== 'string' || !PUBLIC_KEY_HEX.test(hex)) {
    throw new CustodyError('key_invalid', `a public key must be 64 lowercase hex characters, got ${describeText(hex)}`);
  }
  const key = new Uint8Array(Buffer.from(hex, 'hex'));
  if (VALID_KEYS.has(hex)) return key;
  validatePublicKey(key);
  if (VALID_KEYS.size >= VALID_KEYS_MAX) VALID_KEYS.clear();
  VALID_KEYS.add(hex);
  return key;
}

/** Exactly 128 lowercase hex characters; says nothing about whether the signature verifies. */
export function signatureFromHex(hex: string): Uint8Array {
  if (typeof hex !== 'string' || !SIGNATURE_HEX.test(hex)) {
    throw new CustodyError(
      'signature_invalid',
      `a signature must be 128 lowercase hex characters, got ${describeText(hex)}`,
    );
  }
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

/** Verification under the strict policy; false on any bad input, never a throw. */
export function verifyStrict(
  publicKey: Uint8Array,
  message: Uint8Array,
  signature: Uint8Array,
  backend: Ed25519Backend = defaultBackend(),
): boolean {
  return backend.verify(publicKey, message, signature);
}

/** Holds a signing key inside the process; only the public key leaves it. */
export class Signer {
  readonly publicKeyHex: string;
  readonly #publicKey: Uint8Array;
  readonly #signMessage: (message: Uint8Array) => Uint8Array;

  private constructor(publicKey: Uint8Array, signMessage: (message: Uint8Array) => Uint8Array) {
    this.#publicKey = publicKey;
    this.publicKeyHex = Buffer.from(publicKey).toString('hex');
    this.#signMessage = signMessage;
  }

  /** The seed is copied (noble) or wrapped in a KeyObject (node); the caller may wipe its own copy. */
  static fromSeed(seed: Uint8Array, backend: Ed25519Backend = defaultBackend()): Signer {
    requireSeed(seed);
    if (backend === nodeBackend) {
      // node's sign() would rebuild the KeyObject from DER on every call; keep one instead.
      const privateKey = createNodePrivateKey(seed);
      return new Signer(exportRawPublicKey(privateKey), (message) => signWithKeyObject(privateKey, message));
    }
    const ownSeed = seed.slice();
    return new Signer(backend.publicKey(ownSeed), (message) => backend.sign(ownSeed, message));
  }

  /** A copy, so no caller can change the key this signer reports. */
  get publicKey(): Uint8Array {
    return this.#publicKey.slice();
  }

  sign(message: Uint8Array): Uint8Array {
    return this.#signMessage(message);
  }

  signHex(message: Uint8Array): string {
    return Buffer.from(this.sign(message)).toString('hex');
  }
}
