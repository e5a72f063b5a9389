import { expect } from 'chai';
import fc from 'fast-check';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { canonicalize } from '../../../shared/canonical/jcs.js';
import { canonicalDigest, sha256Hex } from '../../../shared/canonical/digest.js';
import { requireVectors } from '../../helpers/vectors.js';

describe('RFC 8785 canonical JSON', function () {
  const dir = requireVectors(this, 'jcs');

  it('canonicalizes every JCS input to exactly its expected output', () => {
    const names = readdirSync(path.join(dir, 'input')).filter((name) => name.endsWith('.json'));
    expect(names.length).to.be.greaterThan(4);
    for (const name of names) {
      const input: unknown = JSON.parse(readFileSync(path.join(dir, 'input', name), 'utf8'));
      const expected = readFileSync(path.join(dir, 'output', name));
      expect(Buffer.from(canonicalize(input), 'utf8').equals(expected), name).to.equal(true);
    }
  });

  it('sorts keys by UTF-16 code units, not by code points', () => {
    // U+1F600 (surrogates D83D DE00) sorts before U+FB01 in UTF-16 order
    expect(canonicalize({ '\uFB01': 1, '\u{1F600}': 2 })).to.equal('{"\u{1F600}":2,"\uFB01":1}');
  });

  it('writes numbers in the ECMAScript shortest form', () => {
    expect(canonicalize([1e21, 1e-7, -0, 0.1 + 0.2, 333333333.3333333])).to.equal('[1e+21,1e-7,0,0.30000000000000004,333333333.3333333]');
  });

  it('refuses values with no canonical form', () => {
    for (const bad of [NaN, Infinity, '\uD800', { k: '\uDC00x' }, new Date(0), [undefined], () => 1, 10n]) {
      expect(() => canonicalize(bad), typeof bad).to.throw().with.property('code', 'canonical_unsupported');
    }
  });

  it('is stable: canonicalizing the parse of canonical text gives the same text', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const once = canonicalize(value);
        expect(canonicalize(JSON.parse(once))).to.equal(once);
      }),
    );
  });

  it('digests the canonical bytes with SHA-256', () => {
    expect(sha256Hex('abc')).to.equal('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(canonicalDigest({ b: 1, a: 2 })).to.equal(sha256Hex('{"a":2,"b":1}'));
  });
});
