import { expect } from 'chai';
import fc from 'fast-check';
import { FrameReader } from '../../../shared/wire/frame-reader.js';
import { LineSplitter } from '../../../shared/wire/line-splitter.js';
import { measureDepth } from '../../../shared/wire/decode.js';

const limits = (maxFrameBytes: number, maxDepth = 32) => ({ maxFrameBytes, maxDepth });

/** A JSON object line of exactly `size` bytes (newline not counted). */
function objectOfSize(size: number): Buffer {
  const skeleton = '{"p":""}';
  return Buffer.from(`{"p":"${'x'.repeat(size - skeleton.length)}"}`);
}

function nested(depth: number): string {
  return '{"a":'.repeat(depth - 1) + '{}' + '}'.repeat(depth - 1);
}

function feed(reader: FrameReader, chunks: Buffer[]) {
  const frames: unknown[] = [];
  let error: string | null = null;
  for (const chunk of chunks) {
    const result = reader.push(chunk);
    frames.push(...result.frames);
    if (result.error) error = result.error.code;
  }
  return { frames, error };
}

describe('frame reader', () => {
  it('accepts a frame of exactly the byte bound and refuses one byte more', () => {
    const atBound = objectOfSize(100);
    expect(atBound.length).to.equal(100);
    expect(feed(new FrameReader(limits(100)), [Buffer.concat([atBound, Buffer.from('\n')])])).to.deep.equal({
      frames: [{ p: 'x'.repeat(92) }],
      error: null,
    });
    const pastBound = objectOfSize(101);
    expect(feed(new FrameReader(limits(100)), [Buffer.concat([pastBound, Buffer.from('\n')])]).error).to.equal('frame_too_large');
  });

  it('refuses an over-long line that arrives whole inside one chunk, with frames before it delivered', () => {
    const good = Buffer.from('{"n":1}\n');
    const long = Buffer.concat([objectOfSize(65), Buffer.from('\n')]);
    const result = new FrameReader(limits(64)).push(Buffer.concat([good, long, good]));
    expect(result.frames).to.deep.equal([{ n: 1 }]);
    expect(result.error?.code).to.equal('frame_too_large');
  });

  it('refuses an over-long line as soon as the bound is passed, before any newline', () => {
    const reader = new FrameReader(limits(64));
    expect(reader.push(Buffer.alloc(64, 0x20)).error).to.equal(null);
    expect(reader.bufferedBytes).to.equal(64);
    expect(reader.push(Buffer.from(' ')).error?.code).to.equal('frame_too_large');
  });

  it('never buffers more than the bound while waiting for a newline', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 30 }), (sizes) => {
        const reader = new FrameReader(limits(100));
        for (const size of sizes) {
          const result = reader.push(Buffer.alloc(size, 0x20));
          expect(reader.bufferedBytes).to.be.at.most(100);
          if (result.error) break;
        }
      }),
    );
  });

  it('counts the bound in bytes, not characters', () => {
    // 3 two-byte characters: 6 bytes of payload, 14 bytes in all
    const line = Buffer.from('{"p":"ééé"}');
    expect(line.length).to.equal(14);
    expect(feed(new FrameReader(limits(14)), [Buffer.concat([line, Buffer.from('\n')])]).error).to.equal(null);
    expect(feed(new FrameReader(limits(13)), [Buffer.concat([line, Buffer.from('\n')])]).error).to.equal('frame_too_large');
  });

  it('accepts nesting of exactly 32 levels and refuses 33', () => {
    expect(feed(new FrameReader(limits(4096)), [Buffer.from(nested(32) + '\n')]).error).to.equal(null);
    expect(feed(new FrameReader(limits(4096)), [Buffer.from(nested(33) + '\n')]).error).to.equal('frame_too_deep');
  });

  it('does not count brackets inside strings as nesting', () => {
    expect(measureDepth(Buffer.from('{"a":"[[[{{{\\"[[["}'), 32)).to.equal(1);
  });

  it('refuses invalid UTF-8, non-JSON and non-object frames', () => {
    const cases: Array<[Buffer, string]> = [
      [Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d, 0x0a]), 'frame_malformed'],
      [Buffer.from('{"a":1,}\n'), 'frame_malformed'],
      [Buffer.from('[1,2]\n'), 'frame_malformed'],
      [Buffer.from('"text"\n'), 'frame_malformed'],
      [Buffer.from('\n'), 'frame_malformed'],
    ];
    for (const [bytes, code] of cases) {
      expect(feed(new FrameReader(limits(64)), [bytes]).error, bytes.toString('hex')).to.equal(code);
    }
  });

  it('is poisoned after its first error and yields nothing more', () => {
    const reader = new FrameReader(limits(64));
    expect(reader.push(Buffer.from('nope\n{"a":1}\n')).error?.code).to.equal('frame_malformed');
    expect(reader.push(Buffer.from('{"a":2}\n'))).to.deep.equal({ frames: [], error: null });
    expect(reader.poisoned?.code).to.equal('frame_malformed');
  });

  it('treats a stream that ends inside a frame as an error', () => {
    const reader = new FrameReader(limits(64));
    reader.push(Buffer.from('{"a":'));
    expect(reader.end()?.code).to.equal('frame_malformed');
  });

  it('yields the same frames fed byte by byte and in random chunkings', () => {
    const frameArb = fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(fc.string(), fc.integer(), fc.boolean()), { maxKeys: 4 });
    fc.assert(
      fc.property(fc.array(frameArb, { minLength: 1, maxLength: 8 }), fc.array(fc.integer({ min: 1, max: 17 }), { minLength: 1 }), (objects, cuts) => {
        const stream = Buffer.from(objects.map((o) => JSON.stringify(o) + '\n').join(''));
        const whole = feed(new FrameReader(limits(4096)), [stream]);
        const bytes = feed(new FrameReader(limits(4096)), [...stream].map((b) => Buffer.from([b])));
        const chunks: Buffer[] = [];
        for (let at = 0, i = 0; at < stream.length; i++) {
          const size = cuts[i % cuts.length]!;
          chunks.push(stream.subarray(at, at + size));
          at += size;
        }
        const random = feed(new FrameReader(limits(4096)), chunks);
        expect(whole.error).to.equal(null);
        expect(bytes).to.deep.equal(whole);
        expect(random).to.deep.equal(whole);
        expect(whole.frames).to.deep.equal(objects.map((o) => JSON.parse(JSON.stringify(o)) as unknown));
      }),
    );
  });

  it('refuses the over-long line at the same byte under any chunking', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 0, max: 30 }), (chunk, extra) => {
        const splitter = new LineSplitter(40);
        const line = Buffer.alloc(41 + extra, 0x61);
        let consumed = 0;
        let refusedAt = -1;
        for (let at = 0; at < line.length && refusedAt < 0; at += chunk) {
          const piece = line.subarray(at, at + chunk);
          try {
            splitter.push(piece, () => undefined);
            consumed += piece.length;
          } catch {
            refusedAt = consumed + piece.length;
          }
        }
        // refused in the chunk that carried byte 41
        expect(refusedAt).to.be.at.least(41);
        expect(refusedAt - chunk).to.be.below(41);
      }),
    );
  });
});
