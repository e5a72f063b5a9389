// For random seeds and messages the two backends are interchangeable: same
// public key, same signature, both accept it, and both refuse it once any
// single bit of the message, signature or key is flipped.
import { expect } from 'chai';
import fc from 'fast-check';
import { BACKENDS, nobleBackend, nodeBackend, Signer } from '../../../shared/crypto/ed25519.js';

const seeds = fc.uint8Array({ minLength: 32, maxLength: 32 });
const messages = fc.uint8Array({ minLength: 0, maxLength: 512 });

function flipBit(bytes: Uint8Array, bit: number): Uint8Array {
  const flipped = bytes.slice();
  flipped[Math.floor(bit / 8) % flipped.length]! ^= 1 << bit % 8;
  return flipped;
}

describe('the node and noble Ed25519 backends', function () {
  it('derive the same public key and the same signature, and both verify it', function () {
    fc.assert(
      fc.property(seeds, messages, (seed, message) => {
        const publicKey = nodeBackend.publicKey(seed);
        const signature = nodeBackend.sign(seed, message);
        expect(nobleBackend.publicKey(seed)).to.deep.equal(publicKey);
        expect(nobleBackend.sign(seed, message)).to.deep.equal(signature);
        for (const backend of BACKENDS) expect(backend.verify(publicKey, message, signature), backend.name).to.equal(true);
      }),
      { numRuns: 100 },
    );
  });

  it('both refuse a signature after one flipped bit in the message, signature or key', function () {
    const target = fc.constantFrom('message' as const, 'signature' as const, 'key' as const);
    fc.assert(
      fc.property(seeds, fc.uint8Array({ minLength: 1, maxLength: 256 }), target, fc.nat(), (seed, message, where, bit) => {
        const publicKey = nodeBackend.publicKey(seed);
        const signature = nodeBackend.sign(seed, message);
        const args = {
          key: where === 'key' ? flipBit(publicKey, bit) : publicKey,
          message: where === 'message' ? flipBit(message, bit) : message,
          signature: where === 'signature' ? flipBit(signature, bit) : signature,
        };
        for (const backend of BACKENDS) {
          expect(backend.verify(args.key, args.message, args.signature), `${backend.name}, ${where} bit ${bit}`).to.equal(false);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('give the same answer on random bytes, which neither accepts', function () {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        messages,
        fc.uint8Array({ minLength: 64, maxLength: 64 }),
        (publicKey, message, signature) => {
          for (const backend of BACKENDS) expect(backend.verify(publicKey, message, signature), backend.name).to.equal(false);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('Signer', function () {
  it('signs exactly as its backend does, and every backend verifies the result', function () {
    fc.assert(
      fc.property(seeds, messages, (seed, message) => {
        for (const backend of BACKENDS) {
          const signer = Signer.fromSeed(seed, backend);
          expect(signer.publicKey).to.deep.equal(backend.publicKey(seed));
          expect(signer.publicKeyHex).to.equal(Buffer.from(signer.publicKey).toString('hex'));
          expect(signer.sign(message)).to.deep.equal(backend.sign(seed, message));
          expect(signer.signHex(message)).to.equal(Buffer.from(signer.sign(message)).toString('hex'));
          for (const verifier of BACKENDS) expect(verifier.verify(signer.publicKey, message, signer.sign(message))).to.equal(true);
        }
      }),
      { numRuns: 30 },
    );
  });

  it('keeps signing with its own key after the caller wipes the seed it was given', function () {
    for (const backend of BACKENDS) {
      const seed = new Uint8Array(32).fill(9);
      const message = new TextEncoder().encode('wipe');
      const expected = backend.sign(seed.slice(), message);
      const signer = Signer.fromSeed(seed, backend);
      seed.fill(0);
      expect(signer.sign(message), backend.name).to.deep.equal(expected);
    }
  });

  it('hands out copies of its public key, so no caller can change it', function () {
    const signer = Signer.fromSeed(new Uint8Array(32).fill(3));
    const copy = signer.publicKey;
    copy.fill(0);
    expect(signer.publicKey).to.not.deep.equal(copy);
    expect(Buffer.from(signer.publicKey).toString('hex')).to.equal(signer.publicKeyHex);
  });

  [0, 31, 33, 64].forEach((length) => {
    it(`refuses a ${length}-byte seed with key_invalid on every backend`, function () {
      for (const backend of BACKENDS) {
        expect(() => Signer.fromSeed(new Uint8Array(length), backend))
          .to.throw(`must be 32 bytes, got ${length}`)
          .with.property('code', 'key_invalid');
      }
    });
  });
});
