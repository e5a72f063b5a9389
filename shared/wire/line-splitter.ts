// Splits a byte stream into newline-terminated lines under an exact byte
// bound. Hand-written because the line readers at hand do not hold a bound
// exactly: ndjson/split2 compare `maxLength` only with the fragment left over
// after each chunk (a whole over-long line inside one chunk passes) and count
// UTF-16 units, not bytes (ARCHITECTURE.md §4.1). Here the bound is checked before any
// byte is buffered, so the buffer never exceeds the limit.
import { CustodyError } from '../errors.js';

const NEWLINE = 0x0a;

export class LineSplitter {
  readonly #maxBytes: number;
  readonly #label: string;
  #pending: Buffer[] = [];
  #pendingBytes = 0;

  /**
   * @param maxBytes the largest line accepted, not counting its newline
   * @param label what the lines are, for error messages ("frame", "preamble")
   */
  constructor(maxBytes: number, label = 'frame') {
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 1) {
      throw new RangeError(`Expected the line bound to be a positive integer, got ${maxBytes}`);
    }
    this.#maxBytes = maxBytes;
    this.#label = label;
  }

  /** Bytes held while waiting for a newline; never more than the bound. */
  get bufferedBytes(): number {
    return this.#pendingBytes;
  }

  /**
   * Feed a chunk; `onLine` receives each complete line (without its newline)
   * in order. Throws `frame_too_large` (or `preamble_too_large`) as soon as a
   * line passes the bound; lines completed earlier in the chunk have been
   * delivered by then.
   */
  push(chunk: Uint8Array, onLine: (line: Buffer) => void): void {
    const data = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let start = 0;
    while (start < data.length) {
      const newline = data.indexOf(NEWLINE, start);
      const end = newline === -1 ? data.length : newline;
      const size = this.#pendingBytes + (end - start);
      if (size > this.#maxBytes) {
        throw this.#tooLarge(size, newline !== -1);
      }
      if (newline === -1) {
        // A copy, so a small tail never keeps a whole chunk's memory alive.
        this.#pending.push(Buffer.from(data.subarray(start)));
        this.#pendingBytes = size;
        return;
      }
      const line = this.#pendingBytes === 0
        ? data.subarray(start, end)
        : Buffer.concat([...this.#pending, data.subarray(start, end)], size);
      this.#pending = [];
      this.#pendingBytes = 0;
      start = newline + 1;
      onLine(line);
    }
  }

  #tooLarge(size: number, complete: boolean): CustodyError {
    const code = this.#label === 'preamble' ? 'preamble_too_large' : 'frame_too_large';
    const seen = complete ? `${size} bytes` : `more than ${this.#maxBytes} bytes before its newline`;
    return new CustodyError(code, `${this.#label} of ${seen} exceeds the bound of ${this.#maxBytes} bytes`);
  }
}
