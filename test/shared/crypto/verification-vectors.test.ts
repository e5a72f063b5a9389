// Every verification vector gives the strict policy's answer, identically on
// every backend: Wycheproof's verdicts, the speccheck strict row (only case 3),
// and none of the ZIP-215-only signatures.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as ed from '@noble/ed25519';
import { expect } from 'chai';
import { BACKENDS } from '../../../shared/crypto/ed25519.js';
import { requireVectors } from '../../helpers/vectors.js';

function fromHex(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

function readJson<T>(file: string): T {
  return JSON.parse(readFileSync(file, 'utf8')) as T;
}

interface WycheproofFile {
  numberOfTests: number;
  testGroups: Array<{
    publicKey: { pk: string };
    tests: Array<{ tcId: number; comment: string; flags: string[]; msg: string; sig: string; result: string }>;
  }>;
}

describe('Ed25519 verification vectors', function () {
  describe('Wycheproof ed25519_test.json', function () {
    const dir = requireVectors(this, 'wycheproof');

    it('answers every test with its expected result on every backend', function () {
      const file = readJson<WycheproofFile>(path.join(dir, 'ed25519_test.json'));
      let count = 0;
      for (const group of file.testGroups) {
        const publicKey = fromHex(group.publicKey.pk);
        for (const test of group.tests) {
          count += 1;
          expect(['valid', 'invalid'], `tcId ${test.tcId} result`).to.include(test.result);
          for (const backend of BACKENDS) {
            const answer = backend.verify(publicKey, fromHex(test.msg), fromHex(test.sig));
            expect(answer, `${backend.name}, tcId ${test.tcId} (${test.flags.join(', ')}) ${test.comment}`).to.equal(
              test.result === 'valid',
            );
          }
        }
      }
      expect(count).to.equal(file.numberOfTests).and.to.equal(151);
    });
  });

  describe('ed25519-speccheck cases 0–11', function () {
    const dir = requireVectors(this, 'ed25519-speccheck');
    const cases = readJsonIfPresent<Array<{ message: string; pub_key: string; signature: string }>>(
      path.join(dir, 'cases.json'),
    );

    it('has the twelve cases the strict row describes', function () {
      expect(cases).to.have.length(12);
    });

    (cases ?? []).forEach((vector, index) => {
      const expected = index === 3;
      it(`case ${index} ${expected ? 'verifies' : 'is refused'} on every backend`, function () {
        for (const backend of BACKENDS) {
          const answer = backend.verify(fromHex(vector.pub_key), fromHex(vector.message), fromHex(vector.signature));
          expect(answer, backend.name).to.equal(expected);
        }
      });
    });
  });

  describe('ZIP-215 vectors', function () {
    const dir = requireVectors(this, 'ed25519-noble');

    it('none of the signatures only ZIP-215 accepts verifies, on any backend', function () {
      const vectors = readJson<Array<{ vk_bytes: string; sig_bytes: string }>>(path.join(dir, 'zip215.json'));
      // The message every ZIP-215 vector signs.
      const message = new TextEncoder().encode('Zcash');
      expect(vectors).to.have.length(196);
      vectors.forEach((vector, index) => {
        // Proves the vector and message are right: permissive ZIP-215 accepts them.
        expect(ed.verify(fromHex(vector.sig_bytes), message, fromHex(vector.vk_bytes)), `zip215 ${index}`).to.equal(true);
        for (const backend of BACKENDS) {
          const answer = backend.verify(fromHex(vector.vk_bytes), message, fromHex(vector.sig_bytes));
          expect(answer, `${backend.name}, vector ${index}`).to.equal(false);
        }
      });
    });
  });
});

/** Per-case tests are generated at load time, before requireVectors can skip the suite. */
function readJsonIfPresent<T>(file: string): T | undefined {
  try {
    return readJson<T>(file);
  } catch {
    return undefined;
  }
}
