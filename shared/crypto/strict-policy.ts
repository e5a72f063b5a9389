// The strict verification policy (ARCHITECTURE.md §5): the libsodium / "Dalek strict"
// row of ed25519-speccheck, where of cases 0–11 only case 3 verifies. Neither
// backend is that row on its own (OpenSSL takes small-order and x = 0 / sign-bit
// encodings, noble is cofactored), so these byte-level checks run in front of
// both; each backend then supplies only the cofactorless equation
// [S]B = R + [k]A, compared against R's bytes.
//
// Everything here is public data (keys and signatures), so plain comparisons
// are fine; nothing needs to be constant-time.
import { Point } from '@noble/ed25519';
import { isBytes, PUBLIC_KEY_LENGTH, SIGNATURE_LENGTH } from './backend.js';

/** The field prime 2^255 − 19. */
const P = 2n ** 255n - 19n;
/** The prime order of the base point. */
export const GROUP_ORDER = 2n ** 252n + 27742317777372353535851937790883648493n;
const Y_MASK = 2n ** 255n - 1n;

/**
 * The y coordinates of the eight points of small order (the torsion subgroup):
 * the identity (y = 1), the point of order 2 (y = −1), both points of order 4
 * (y = 0) and the four of order 8 (two y values, each with both x signs).
 * With y already known to be below p, a point has small order exactly when its
 * y is one of these; the sign bit does not matter. Same list as libsodium's
 * `ge25519_has_small_order`, reduced to canonical y.
 */
const SMALL_ORDER_Y: ReadonlySet<bigint> = new Set([
  0n,
  1n,
  P - 1n,
  readLittleEndian(Buffer.from('26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', 'hex')),
  readLittleEndian(Buffer.from('c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', 'hex')),
]);

export function readLittleEndian(bytes: Uint8Array): bigint {
  const bigEndianHex = Buffer.from(bytes).reverse().toString('hex');
  return bigEndianHex === '' ? 0n : BigInt(`0x${bigEndianHex}`);
}

function readEncoding(encoded: Uint8Array): { y: bigint; signBit: boolean } {
  return {
    y: readLittleEndian(encoded) & Y_MASK,
    signBit: ((encoded[encoded.length - 1] ?? 0) & 0x80) !== 0,
  };
}

/** Why a 32-byte point encoding is not canonical, or undefined when it is. */
export function describeNonCanonicalEncoding(encoded: Uint8Array): string | undefined {
  const { y, signBit } = readEncoding(encoded);
  if (y >= P) return 'not canonically encoded (y is not below 2^255 - 19)';
  // Only y = ±1 have x = 0, and x = 0 has one encoding: sign bit clear.
  if (signBit && (y === 1n || y === P - 1n)) return 'not canonically encoded (x is 0 but the sign bit is set)';
  return undefined;
}

/** Whether a canonical encoding names one of the eight points of small order. */
export function encodesSmallOrderPoint(encoded: Uint8Array): boolean {
  return SMALL_ORDER_Y.has(readEncoding(encoded).y);
}

/** Whether the encoding decodes to a curve point (y² − 1 over dy² + 1 has a square root). */
export function encodesCurvePoint(encoded: Uint8Array): boolean {
  try {
    Point.fromBytes(encoded, false);
    return true;
  } catch {
    return false;
  }
}

/** Why a point encoding fails the policy (non-canonical or small order), or undefined. */
export function describeRefusedPoint(encoded: Uint8Array): string | undefined {
  return describeNonCanonicalEncoding(encoded) ?? (encodesSmallOrderPoint(encoded) ? 'of small order' : undefined);
}

/**
 * Every check of the strict policy except the equation itself: lengths,
 * S < L, and A and R canonical and not of small order. Whether A is on the
 * curve is left to the backend, which must decode A for the equation anyway;
 * R is never decoded, because the backends compare its bytes with the
 * canonical encoding of [S]B − [k]A, which an off-curve or non-canonical R
 * can never equal.
 */
export function passesStrictChecks(publicKey: unknown, message: unknown, signature: unknown): boolean {
  if (!isBytes(publicKey, PUBLIC_KEY_LENGTH) || !isBytes(signature, SIGNATURE_LENGTH) || !isBytes(message)) {
    return false;
  }
  return (
    readLittleEndian(signature.subarray(32)) < GROUP_ORDER &&
    describeRefusedPoint(publicKey) === undefined &&
    describeRefusedPoint(signature.subarray(0, 32)) === undefined
  );
}
