// Strict UTF-8 with the offset of the first bad byte, agreeing with the fatal decoder.
import { expect } from 'chai';
import fc from 'fast-check';
import { decodeUtf8OrRefuse, invalidUtf8Offset } from '../../../shared/text/utf8.js';

describe('invalidUtf8Offset', () => {
  const cases: Array<[string, number[], number]> = [
    ['ASCII', [0x61, 0x62], -1],
    ['a two-byte letter', [0x61, 0xc3, 0xa9], -1],
    ['a lone continuation byte', [0x61, 0x80, 0x62], 1],
    ['an overlong slash', [0x61, 0x62, 0xc0, 0xaf], 2],
    ['a UTF-16 surrogate', [0xed, 0xa0, 0x80], 0],
    ['a code point past U+10FFFF', [0x20, 0xf4, 0x90, 0x80, 0x80], 1],
    ['a truncated sequence at the end', [0x61, 0xe2, 0x82], 1],
    ['0xff', [0x41, 0x42, 0x43, 0xff], 3],
    ['a four-byte emoji', [0xf0, 0x9f, 0x98, 0x80], -1],
  ];
  for (const [what, bytes, offset] of cases) {
    it(`${what}: ${offset < 0 ? 'valid' : `invalid at byte ${offset}`}`, () => {
      expect(invalidUtf8Offset(Uint8Array.from(bytes))).to.equal(offset);
    });
  }

  it('agrees with the fatal decoder on random bytes, and the prefix before the offset is valid', () => {
    const fatal = new TextDecoder('utf-8', { fatal: true });
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        const offset = invalidUtf8Offset(bytes);
        let valid = true;
        try {
          fatal.decode(bytes);
        } catch {
          valid = false;
        }
        expect(offset === -1).to.equal(valid);
        if (offset >= 0) expect(() => fatal.decode(bytes.subarray(0, offset))).to.not.throw();
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses with encoding_invalid naming the byte offset', () => {
    let message = '';
    try {
      decodeUtf8OrRefuse(Uint8Array.from([0x61, 0x62, 0xff]), 'request body');
    } catch (error) {
      expect((error as { code?: string }).code).to.equal('encoding_invalid');
      message = (error as Error).message;
    }
    expect(message).to.contain('byte offset 2');
  });
});
