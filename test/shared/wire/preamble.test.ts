import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { PREAMBLE_MAX_BYTES, PREAMBLE_TAG, type Preamble } from '../../../shared/protocol/preamble.js';
import { PreambleReader, encodePreamble } from '../../../shared/wire/preamble.js';
import { codeOf } from '../../helpers/codes.js';

function preamble(settings: Preamble['settings'] = {}): Preamble {
  return {
    custody: PREAMBLE_TAG,
    sid: randomBytes(16).toString('hex'),
    key: randomBytes(32).toString('hex'),
    role: 'executor',
    name: 'default',
    challenge: randomBytes(32).toString('hex'),
    mode: 'serve',
    pins: { kernel: randomBytes(32).toString('hex') },
    limits: { max_frame_bytes: 1024 * 1024, max_depth: 32 },
    settings,
  };
}

/** A preamble padded through its settings to exactly `size` bytes (newline not counted). */
function preambleOfSize(size: number): Buffer {
  const base = encodePreambleUnchecked(preamble({ pad: '' })).length;
  return encodePreambleUnchecked(preamble({ pad: 'x'.repeat(size - base) }));
}

function encodePreambleUnchecked(value: Preamble): Buffer {
  return Buffer.from(JSON.stringify(value));
}


describe('the session preamble', () => {
  it('is read at exactly its 4 KiB bound, and refused one byte past it, even inside one chunk', () => {
    const atBound = preambleOfSize(PREAMBLE_MAX_BYTES);
    expect(atBound.length).to.equal(4096);
    const read = new PreambleReader().push(Buffer.concat([atBound, Buffer.from('\n{"frame":1}\n')]));
    expect(read?.preamble.settings).to.have.property('pad');
    expect(read?.rest.toString()).to.equal('{"frame":1}\n');
    const past = preambleOfSize(PREAMBLE_MAX_BYTES + 1);
    expect(codeOf(() => new PreambleReader().push(Buffer.concat([past, Buffer.from('\n')])))).to.equal('preamble_too_large');
  });

  it('is refused as soon as the bound is passed without a newline, fed in pieces', () => {
    const reader = new PreambleReader();
    expect(reader.push(Buffer.alloc(4000, 0x20))).to.equal(null);
    expect(codeOf(() => reader.push(Buffer.alloc(97, 0x20)))).to.equal('preamble_too_large');
  });

  it('is refused by its sender when its settings make it too large', () => {
    const base = encodePreambleUnchecked(preamble({ pad: '' })).length;
    expect(encodePreamble(preamble({ pad: 'x'.repeat(4096 - base) })).length).to.equal(4097);
    expect(codeOf(() => encodePreamble(preamble({ pad: 'x'.repeat(4097 - base) })))).to.equal('preamble_too_large');
  });

  it('refuses unknown members and a wrong tag', () => {
    const extra = Buffer.from(JSON.stringify({ ...preamble(), extra: 1 }) + '\n');
    expect(codeOf(() => new PreambleReader().push(extra))).to.equal('preamble_malformed');
    const tag = Buffer.from(JSON.stringify({ ...preamble(), custody: 'custody.preamble.v0' }) + '\n');
    expect(codeOf(() => new PreambleReader().push(tag))).to.equal('preamble_malformed');
  });
});
