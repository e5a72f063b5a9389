// The pooled random identifiers: the right length in lowercase hex, every
// byte handed out once (across the refills of the pool too), and sizes out
// of range refused rather than cut short.
import { expect } from 'chai';
import { randomHex } from '../../shared/random-hex.js';

describe('randomHex', () => {
  it('answers `bytes` bytes as lowercase hex, never the same twice across many refills of its 4 KiB pool', () => {
    const seen = new Set<string>();
    // 3,000 × 16 bytes is about twelve pools: a pool handed out again, or a refill that did not happen, repeats values.
    for (let i = 0; i < 3_000; i++) {
      const hex = randomHex(16);
      expect(hex).to.match(/^[0-9a-f]{32}$/);
      seen.add(hex);
    }
    expect(seen.size).to.equal(3_000);
  });

  it('cuts sizes that do not divide the pool without reusing its tail', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2_000; i++) seen.add(randomHex(12));
    expect(seen.size).to.equal(2_000);
    expect(randomHex(4096)).to.have.length(8192);
  });

  it('refuses 0, a fraction and more than the pool holds', () => {
    for (const bytes of [0, 1.5, 4097]) expect(() => randomHex(bytes), String(bytes)).to.throw(RangeError);
    expect(randomHex(1)).to.match(/^[0-9a-f]{2}$/);
  });
});
