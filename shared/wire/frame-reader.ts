// A pure frame reader: chunks in, decoded frames or exactly one error out.
// It does no I/O; the stdio adapter (channel.ts) feeds it. After the first
// error the reader is poisoned and never yields another frame: nothing that
// follows a bad frame on the stream is acted upon (ARCHITECTURE.md §4.1).
import { CustodyError, toCustodyError } from '../errors.js';
import { DEFAULT_MAX_DEPTH, decodeJsonObject } from './decode.js';
import { LineSplitter } from './line-splitter.js';

export const DEFAULT_MAX_FRAME_BYTES = 1024 * 1024;

export interface FrameLimits {
  /** Largest frame in bytes, not counting its newline. */
  readonly maxFrameBytes: number;
  /** Deepest nesting of objects and arrays, the frame object itself being level 1. */
  readonly maxDepth: number;
}

export const DEFAULT_FRAME_LIMITS: FrameLimits = {
  maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
  maxDepth: DEFAULT_MAX_DEPTH,
};

export interface ReadResult<T> {
  /** Frames completed by this chunk, before any error, in order. */
  readonly frames: T[];
  /** The error that poisoned the reader in this chunk, if any. */
  readonly error: CustodyError | null;
}

/** Turns one raw line into a frame, or throws a CustodyError. */
export type LineDecoder<T> = (line: Buffer) => T;

export class FrameReader<T = Record<string, unknown>> {
  readonly #splitter: LineSplitter;
  readonly #decode: LineDecoder<T>;
  #poison: CustodyError | null = null;

  constructor(limits: FrameLimits = DEFAULT_FRAME_LIMITS, decode?: LineDecoder<T>) {
    this.#splitter = new LineSplitter(limits.maxFrameBytes, 'frame');
    this.#decode = decode ?? ((line: Buffer) => decodeJsonObject(line, limits.maxDepth) as T);
  }

  get poisoned(): CustodyError | null {
    return this.#poison;
  }

  get bufferedBytes(): number {
    return this.#splitter.bufferedBytes;
  }

  push(chunk: Uint8Array): ReadResult<T> {
    const frames: T[] = [];
    if (this.#poison) return { frames, error: null };
    try {
      this.#splitter.push(chunk, (line) => {
        frames.push(this.#decode(line));
      });
    } catch (error) {
      this.#poison = toCustodyError(error, 'frame_malformed');
      return { frames, error: this.#poison };
    }
    return { frames, error: null };
  }

  /**
   * The stream ended. A partial line left in the buffer is an error: a frame
   * cut off mid-line is never acted upon.
   */
  end(): CustodyError | null {
    if (this.#poison) return null;
    if (this.#splitter.bufferedBytes > 0) {
      this.#poison = new CustodyError('frame_malformed', `stream ended inside a frame (${this.#splitter.bufferedBytes} bytes without a newline)`);
      return this.#poison;
    }
    return null;
  }
}
