// The depth scanner that jumps through strings with indexOf answers exactly
// what a byte-by-byte scan answers, on JSON and on arbitrary bytes.
import { expect } from 'chai';
import fc from 'fast-check';
import { measureDepth } from '../../../shared/wire/decode.js';
import { plainDepth as reference } from '../../helpers/plain-depth.js';

const tricky = fc.array(fc.constantFrom('[', ']', '{', '}', '"', '\\', 'a', ':', ','), { maxLength: 80 }).map((parts) => Buffer.from(parts.join('')));

/** Long runs of ordinary bytes between specials: the scanner's native jumps inside strings. */
const runs = fc
  .array(fc.tuple(fc.integer({ min: 0, max: 120 }), fc.constantFrom('[', ']', '{', '}', '"', '\\', '"[', '\\"', '\\\\')), { maxLength: 12 })
  .map((parts) => Buffer.from(parts.map(([n, special]) => 'a'.repeat(n) + special).join('')));

describe('measureDepth', () => {
  it('agrees with a byte-by-byte scan on JSON text, on bracket-and-quote soup and on random bytes, at every limit', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.jsonValue({ maxDepth: 12 }).map((v) => Buffer.from(JSON.stringify(v) ?? 'null')),
          tricky,
          runs,
          fc.uint8Array({ maxLength: 80 }).map((b) => Buffer.from(b)),
        ),
        fc.integer({ min: 0, max: 40 }),
        fc.boolean(),
        (bytes, limit, plain) => {
          const input = plain ? new Uint8Array(bytes) : bytes;
          expect(measureDepth(input, limit)).to.equal(reference(bytes, limit));
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('skips brackets inside strings, escaped quotes included', () => {
    expect(measureDepth(Buffer.from('{"a":"[[[\\"]]]{{","b":[1]}'), 32)).to.equal(2);
    expect(measureDepth(Buffer.from('{"a":"\\\\"}'), 32)).to.equal(1);
    expect(measureDepth(Buffer.from('{"unterminated":"[[['), 32)).to.equal(1);
  });
});
