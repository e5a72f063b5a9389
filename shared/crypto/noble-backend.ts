// Ed25519 through @noble/ed25519 (pure JavaScript): the second, independent
// backend. Signing and key derivation are noble's own; verification is not,
// because noble's equation is cofactored even with `zip215: false`.
import * as ed from '@noble/ed25519';
import { sha512 } from '@noble/hashes/sha2.js';
import { type Ed25519Backend, requireSeed } from './backend.js';
import { GROUP_ORDER, passesStrictChecks, readLittleEndian } from './strict-policy.js';

// noble v3's synchronous API needs a SHA-512 wired in before first use.
ed.hashes.sha512 = sha512;

/**
 * The cofactorless equation [S]B − [k]A = R, compared by R's bytes, with
 * k = SHA-512(R ‖ A ‖ M) mod L. Assumes passesStrictChecks() held.
 */
function satisfiesCofactorlessEquation(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  // Hand-written because noble only offers the cofactored check ([8]… = [8]…), which accepts speccheck case 4.
  let A: ed.Point;
  try {
    A = ed.Point.fromBytes(publicKey, false);
  } catch {
    return false; // not a curve point
  }
  const R = signature.subarray(0, 32);
  const S = readLittleEndian(signature.subarray(32));
  const k = ed.etc.mod(readLittleEndian(sha512(ed.etc.concatBytes(R, publicKey, message))), GROUP_ORDER);
  const expectedR = ed.Point.BASE.multiply(S, false).subtract(A.multiply(k, false)).toBytes();
  return Buffer.from(expectedR).equals(R);
}

export const nobleBackend: Ed25519Backend = {
  name: 'noble',
  publicKey(seed) {
    requireSeed(seed);
    return ed.getPublicKey(seed);
  },
  sign(seed, message) {
    requireSeed(seed);
    return ed.sign(message, seed);
  },
  verify(publicKey, message, signature) {
    return (
      passesStrictChecks(publicKey, message, signature) &&
      satisfiesCofactorlessEquation(publicKey, message, signature)
    );
  },
};
