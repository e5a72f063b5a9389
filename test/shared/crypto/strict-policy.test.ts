// The strict policy's parts on their own: which encodings count as small order
// or non-canonical, how pinned keys and hex are refused, and that verify()
// answers false rather than throwing on anything malformed.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as ed from '@noble/ed25519';
import { expect } from 'chai';
import fc from 'fast-check';
import { type ErrorCode, isCustodyError } from '../../../shared/errors.js';
import {
  BACKENDS,
  publicKeyFromHex,
  rememberedKeys,
  Signer,
  signatureFromHex,
  validatePublicKey,
  verifyStrict,
} from '../../../shared/crypto/ed25519.js';
import {
  describeNonCanonicalEncoding,
  encodesSmallOrderPoint,
  GROUP_ORDER,
} from '../../../shared/crypto/strict-policy.js';
import { requireVectors } from '../../helpers/vectors.js';

function fromHex(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

function expectCustodyError(action: () => unknown, code: ErrorCode, messagePart: string): void {
  let thrown: unknown;
  try {
    action();
  } catch (error) {
    thrown = error;
  }
  expect(isCustodyError(thrown, code), `expected CustodyError ${code}, got ${String(thrown)}`).to.equal(true);
  expect((thrown as Error).message).to.include(messagePart);
}

/** The eight points of small order: the multiples of a point of order 8. */
function listTorsionPoints(): ed.Point[] {
  const orderEight = ed.Point.fromBytes(fromHex('c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a'));
  const points = [ed.Point.ZERO];
  for (let i = 1; i < 8; i++) points.push(points[i - 1]!.add(orderEight));
  return points;
}

const VALID_KEY = 'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a'; // RFC 8032 test 1

describe('the strict Ed25519 policy', function () {
  describe('small-order encodings', function () {
    it('counts all eight torsion points, in both sign-bit forms, as small order', function () {
      const torsion = listTorsionPoints();
      expect(new Set(torsion.map((point) => point.toHex()))).to.have.property('size', 8);
      for (const point of torsion) {
        const encoded = point.toBytes();
        expect(encodesSmallOrderPoint(encoded), point.toHex()).to.equal(true);
        encoded[31]! ^= 0x80;
        expect(encodesSmallOrderPoint(encoded), `${point.toHex()} with the sign bit flipped`).to.equal(true);
      }
    });

    it('does not count a full-order or mixed-order point as small order', function () {
      const torsion = listTorsionPoints();
      fc.assert(
        fc.property(fc.bigInt({ min: 1n, max: GROUP_ORDER - 1n }), fc.integer({ min: 0, max: 7 }), (scalar, t) => {
          const point = ed.Point.BASE.multiply(scalar).add(torsion[t]!);
          return !encodesSmallOrderPoint(point.toBytes());
        }),
        { numRuns: 200 },
      );
    });
  });

  describe('key validation when a key is pinned', function () {
    const refused: Array<{ name: string; key: Uint8Array; message: string }> = [
      { name: 'an empty key', key: new Uint8Array(0), message: 'must be 32 bytes, got 0' },
      { name: 'a 31-byte key', key: fromHex(VALID_KEY).subarray(1), message: 'must be 32 bytes, got 31' },
      { name: 'a 33-byte key', key: fromHex(`${VALID_KEY}00`), message: 'must be 32 bytes, got 33' },
      ...listTorsionPoints().map((point) => ({
        name: `the small-order key ${point.toHex()}`,
        key: point.toBytes(),
        message: 'small order',
      })),
      {
        name: 'y = p, a non-canonical encoding of y = 0',
        key: fromHex('edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'),
        message: 'y is not below 2^255 - 19',
      },
      {
        name: 'y = p + 1, a non-canonical encoding of the identity',
        key: fromHex('eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'),
        message: 'y is not below 2^255 - 19',
      },
      {
        name: 'y = 2^255 - 1 with the sign bit set',
        key: fromHex('ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'),
        message: 'y is not below 2^255 - 19',
      },
      {
        name: 'the identity with the sign bit set (x = 0)',
        key: fromHex('0100000000000000000000000000000000000000000000000000000000000080'),
        message: 'x is 0 but the sign bit is set',
      },
      {
        name: 'the order-2 point with the sign bit set (speccheck cases 10 and 11)',
        key: fromHex('ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'),
        message: 'x is 0 but the sign bit is set',
      },
      {
        name: 'y = 2, which is not on the curve',
        key: fromHex('0200000000000000000000000000000000000000000000000000000000000000'),
        message: 'not a point on the curve',
      },
    ];

    refused.forEach(({ name, key, message }) => {
      it(`refuses ${name} with key_invalid`, function () {
        expectCustodyError(() => validatePublicKey(key), 'key_invalid', message);
      });
    });

    it('accepts an ordinary public key', function () {
      expect(() => validatePublicKey(fromHex(VALID_KEY))).to.not.throw();
    });

    it('refuses a key that is not bytes', function () {
      expectCustodyError(() => validatePublicKey(VALID_KEY as unknown as Uint8Array), 'key_invalid', 'Uint8Array');
    });

    it('a non-canonical key is named as such, not as small order', function () {
      expect(describeNonCanonicalEncoding(fromHex('ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'))).to.include(
        'sign bit',
      );
    });
  });

  describe('hex parsing', function () {
    it('reads a public key from 64 lowercase hex characters', function () {
      expect(publicKeyFromHex(VALID_KEY)).to.deep.equal(fromHex(VALID_KEY));
    });

    const badKeyTexts: Array<{ name: string; hex: string }> = [
      { name: 'empty text', hex: '' },
      { name: '63 characters', hex: VALID_KEY.slice(1) },
      { name: '65 characters', hex: `${VALID_KEY}0` },
      { name: 'uppercase hex', hex: VALID_KEY.toUpperCase() },
      { name: 'a leading space', hex: ` ${VALID_KEY.slice(1)}` },
      { name: 'a trailing newline', hex: `${VALID_KEY.slice(1)}\n` },
      { name: 'a non-hex character', hex: `${VALID_KEY.slice(1)}g` },
    ];
    badKeyTexts.forEach(({ name, hex }) => {
      it(`refuses public key text with ${name} with key_invalid`, function () {
        expectCustodyError(() => publicKeyFromHex(hex), 'key_invalid', '64 lowercase hex characters');
      });
    });

    it('refuses well-formed hex naming a small-order key with key_invalid', function () {
      expectCustodyError(() => publicKeyFromHex('01'.padEnd(64, '0')), 'key_invalid', 'small order');
    });

    it('remembers only valid keys, at most 256: the 256th is kept, the next new one starts afresh, and every key still parses', function () {
      // Seeds no other test uses, so each key is new to the module's memory.
      const keys = Array.from({ length: 300 }, (_, i) => Signer.fromSeed(new Uint8Array(32).fill(0xa5).map((v, j) => (j === 0 ? i >> 8 : j === 1 ? i & 0xff : v))).publicKeyHex);
      const sizes: number[] = [];
      for (const hex of keys) {
        expect(publicKeyFromHex(hex)).to.deep.equal(fromHex(hex));
        sizes.push(rememberedKeys());
        const before = rememberedKeys();
        expectCustodyError(() => publicKeyFromHex('01'.padEnd(64, '0')), 'key_invalid', 'small order');
        expect(rememberedKeys(), 'an invalid key is never remembered').to.equal(before);
      }
      expect(Math.max(...sizes)).to.equal(256);
      const atBound = sizes.indexOf(256);
      expect(sizes[atBound + 1], 'one past the bound').to.equal(1);
      // A key remembered before the memory started afresh is validated again, and still parses.
      expect(publicKeyFromHex(keys[0]!)).to.deep.equal(fromHex(keys[0]!));
    });

    it('reads a signature from 128 lowercase hex characters', function () {
      const hex = 'ab'.repeat(64);
      expect(signatureFromHex(hex)).to.deep.equal(fromHex(hex));
    });

    const badSignatureTexts: Array<{ name: string; hex: string }> = [
      { name: 'empty text', hex: '' },
      { name: '126 characters', hex: 'ab'.repeat(63) },
      { name: '129 characters', hex: `${'ab'.repeat(64)}0` },
      { name: 'uppercase hex', hex: 'AB'.repeat(64) },
      { name: 'a trailing space', hex: `${'ab'.repeat(63)}a ` },
    ];
    badSignatureTexts.forEach(({ name, hex }) => {
      it(`refuses signature text with ${name} with signature_invalid`, function () {
        expectCustodyError(() => signatureFromHex(hex), 'signature_invalid', '128 lowercase hex characters');
      });
    });
  });

  describe('verification of malformed input', function () {
    const signer = Signer.fromSeed(new Uint8Array(32).fill(7));
    const message = new TextEncoder().encode('custody');
    const publicKey = signer.publicKey;
    const signature = signer.sign(message);
    const withS = (s: bigint): Uint8Array => {
      const forged = signature.slice();
      forged.set(Buffer.from(s.toString(16).padStart(64, '0'), 'hex').reverse(), 32);
      return forged;
    };

    const cases: Array<{ name: string; publicKey: unknown; message: unknown; signature: unknown }> = [
      { name: 'a 63-byte signature', publicKey, message, signature: signature.subarray(0, 63) },
      { name: 'a 65-byte signature', publicKey, message, signature: Uint8Array.of(...signature, 0) },
      { name: 'a 31-byte key', publicKey: publicKey.subarray(0, 31), message, signature },
      { name: 'a 33-byte key', publicKey: Uint8Array.of(...publicKey, 0), message, signature },
      { name: 'a key given as hex text', publicKey: signer.publicKeyHex, message, signature },
      { name: 'a signature given as hex text', publicKey, message, signature: signer.signHex(message) },
      { name: 'a message given as a string', publicKey, message: 'custody', signature },
      { name: 'undefined everywhere', publicKey: undefined, message: undefined, signature: undefined },
      { name: 'an off-curve key', publicKey: fromHex('02'.padEnd(64, '0')), message, signature },
      { name: 'S + L in place of S (malleated)', publicKey, message, signature: withS(readS(signature) + GROUP_ORDER) },
      { name: 'S = L', publicKey, message, signature: withS(GROUP_ORDER) },
      { name: 'S = 2^256 - 1', publicKey, message, signature: withS(2n ** 256n - 1n) },
    ];

    cases.forEach((c) => {
      it(`answers false, without throwing, for ${c.name} on every backend`, function () {
        for (const backend of BACKENDS) {
          const answer = verifyStrict(
            c.publicKey as Uint8Array,
            c.message as Uint8Array,
            c.signature as Uint8Array,
            backend,
          );
          expect(answer, backend.name).to.equal(false);
        }
      });
    });

    it('accepts the untouched signature on every backend', function () {
      for (const backend of BACKENDS) expect(verifyStrict(publicKey, message, signature, backend), backend.name).to.equal(true);
    });
  });

  describe('why the noble backend computes the equation itself', function () {
    const dir = requireVectors(this, 'ed25519-speccheck');

    it("noble's own zip215: false mode accepts speccheck case 4, which the strict row refuses", function () {
      const cases = JSON.parse(readFileSync(path.join(dir, 'cases.json'), 'utf8')) as Array<{
        message: string;
        pub_key: string;
        signature: string;
      }>;
      const case4 = cases[4]!;
      const args = [fromHex(case4.signature), fromHex(case4.message), fromHex(case4.pub_key)] as const;
      expect(ed.verify(...args, { zip215: false })).to.equal(true);
      for (const backend of BACKENDS) {
        expect(backend.verify(args[2], args[1], args[0]), backend.name).to.equal(false);
      }
    });
  });
});

function readS(signature: Uint8Array): bigint {
  return BigInt(`0x${Buffer.from(signature.subarray(32)).reverse().toString('hex')}`);
}
