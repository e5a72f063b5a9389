// Ed25519 through node:crypto (OpenSSL): the fast backend, used on the hot
// path. OpenSSL's verify is cofactorless and compares R by bytes, which is the
// strict equation; the rest of the policy runs in front of it.
import { createPrivateKey, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';
import { type Ed25519Backend, requireSeed } from './backend.js';
import { passesStrictChecks } from './strict-policy.js';

// node:crypto takes raw Ed25519 keys only wrapped in DER (RFC 8410); these are
// the fixed headers in front of the 32 raw bytes.
const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

export function createNodePrivateKey(seed: Uint8Array): KeyObject {
  requireSeed(seed);
  const der = Buffer.concat([PKCS8_PREFIX, seed]);
  try {
    return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  } finally {
    der.fill(0);
  }
}

// Building a KeyObject from DER costs as much as the verification itself, and
// a process verifies against a handful of pinned keys, so recent ones are kept.
const PUBLIC_KEY_CACHE_SIZE = 64;
const publicKeyCache = new Map<string, KeyObject>();

function obtainNodePublicKey(publicKey: Uint8Array): KeyObject {
  const hex = Buffer.from(publicKey).toString('hex');
  const cached = publicKeyCache.get(hex);
  if (cached !== undefined) return cached;
  const created = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: 'der', type: 'spki' });
  if (publicKeyCache.size >= PUBLIC_KEY_CACHE_SIZE) {
    const oldest = publicKeyCache.keys().next().value; // Map iterates in insertion order
    if (oldest !== undefined) publicKeyCache.delete(oldest);
  }
  publicKeyCache.set(hex, created);
  return created;
}

export function exportRawPublicKey(privateKey: KeyObject): Uint8Array {
  const spki = createPublicKey(privateKey).export({ format: 'der', type: 'spki' });
  return new Uint8Array(spki.subarray(SPKI_PREFIX.length));
}

export function signWithKeyObject(privateKey: KeyObject, message: Uint8Array): Uint8Array {
  return new Uint8Array(sign(null, message, privateKey));
}

export const nodeBackend: Ed25519Backend = {
  name: 'node',
  publicKey(seed) {
    return exportRawPublicKey(createNodePrivateKey(seed));
  },
  sign(seed, message) {
    return signWithKeyObject(createNodePrivateKey(seed), message);
  },
  verify(publicKey, message, signature) {
    if (!passesStrictChecks(publicKey, message, signature)) return false;
    try {
      return verify(null, message, obtainNodePublicKey(publicKey), signature);
    } catch {
      return false;
    }
  },
};
