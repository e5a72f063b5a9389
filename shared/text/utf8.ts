// Strict UTF-8: where a byte sequence stops being UTF-8, so a refusal can
// name the offset. Anything the fatal decoder refuses is refused here too
// (overlong forms, surrogates, code points past U+10FFFF, truncation).
import { isUtf8 } from 'node:buffer';
import { CustodyError } from '../errors.js';

/** Offset of the first byte that is not part of a valid UTF-8 sequence, or -1 when all of it is valid. */
export function invalidUtf8Offset(bytes: Uint8Array): number {
  if (isUtf8(bytes)) return -1;
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      need = 2;
      if (b === 0xe0) lo = 0xa0;
      if (b === 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      need = 3;
      if (b === 0xf0) lo = 0x90;
      if (b === 0xf4) hi = 0x8f;
    } else return i;
    for (let k = 1; k <= need; k++) {
      const c = bytes[i + k];
      if (c === undefined) return i;
      const [min, max] = k === 1 ? [lo, hi] : [0x80, 0xbf];
      if (c < min || c > max) return i;
    }
    i += need + 1;
  }
  return -1;
}

const fatal = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Decode strict UTF-8 or refuse with `encoding_invalid`, naming what and the byte offset. */
export function decodeUtf8OrRefuse(bytes: Uint8Array, what: string): string {
  const offset = invalidUtf8Offset(bytes);
  if (offset >= 0) {
    const shown = Buffer.from(bytes.subarray(offset, offset + 4)).toString('hex');
    throw new CustodyError('encoding_invalid', `${what} is not valid UTF-8 at byte offset ${offset} (bytes ${shown}…); send UTF-8 text`);
  }
  return fatal.decode(bytes);
}
