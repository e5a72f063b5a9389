// Ed25519 is deterministic: from a seed, every backend derives exactly the
// published public key and signature, and verifies it under the strict policy.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { BACKENDS, Signer } from '../../../shared/crypto/ed25519.js';
import { requireVectors } from '../../helpers/vectors.js';

interface SigningVector {
  seed: string;
  publicKey: string;
  message: string;
  signature: string;
}

function fromHex(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}

function readRfc8032(file: string): SigningVector[] {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as Array<{ priv: string; pub: string; msg: string; sig: string }>;
  return raw.map((v) => ({ seed: v.priv, publicKey: v.pub, message: v.msg, signature: v.sig }));
}

/** The classic sign.input: `sk‖pk:pk:msg:sig‖msg:` per line, hex. */
function readSignInput(file: string): SigningVector[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line, index) => {
      const [secretAndPublic, publicKey, message, signatureAndMessage] = line.split(':');
      if (
        secretAndPublic === undefined ||
        publicKey === undefined ||
        message === undefined ||
        signatureAndMessage === undefined ||
        secretAndPublic !== secretAndPublic.slice(0, 64) + publicKey ||
        signatureAndMessage !== signatureAndMessage.slice(0, 128) + message
      ) {
        throw new Error(`vectors.txt line ${index + 1} is not sk‖pk:pk:msg:sig‖msg:`);
      }
      return { seed: secretAndPublic.slice(0, 64), publicKey, message, signature: signatureAndMessage.slice(0, 128) };
    });
}

function expectSignsExactly(vectors: readonly SigningVector[], label: string): void {
  vectors.forEach((vector, index) => {
    const seed = fromHex(vector.seed);
    const message = fromHex(vector.message);
    for (const backend of BACKENDS) {
      const where = `${backend.name}, ${label} vector ${index}`;
      expect(toHex(backend.publicKey(seed)), where).to.equal(vector.publicKey);
      expect(toHex(backend.sign(seed, message)), where).to.equal(vector.signature);
      expect(Signer.fromSeed(seed, backend).signHex(message), where).to.equal(vector.signature);
      expect(backend.verify(fromHex(vector.publicKey), message, fromHex(vector.signature)), where).to.equal(true);
    }
  });
}

describe('Ed25519 signing vectors', function () {
  const dir = requireVectors(this, 'ed25519-noble');

  it('every backend reproduces the RFC 8032 §7.1 keys and signatures and verifies them', function () {
    const vectors = readRfc8032(path.join(dir, 'rfc8032-ed25519.json'));
    expect(vectors).to.not.be.empty;
    expectSignsExactly(vectors, 'RFC 8032');
  });

  it('every backend reproduces all 1,024 sign.input keys and signatures and verifies them', function () {
    const vectors = readSignInput(path.join(dir, 'vectors.txt'));
    expect(vectors).to.have.length(1024);
    expectSignsExactly(vectors, 'sign.input');
  });
});
