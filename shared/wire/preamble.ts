// Reading and writing the session preamble: one JSON line of at most 4 KiB
// before the first frame. Its parser is its own (the frame parser expects a
// MAC trailer the preamble cannot have): bounded before buffering, strict
// UTF-8, shallow, closed schema. Any failure is final for the process.
import { CustodyError, toCustodyError } from '../errors.js';
import { PREAMBLE_MAX_BYTES, PREAMBLE_TAG, type Preamble, preambleSchema } from '../protocol/preamble.js';
import { decodeJsonObject } from './decode.js';
import { describeIssues } from './session.js';

const PREAMBLE_MAX_DEPTH = 4;

/** The preamble's line, its newline aside: checked against its schema, then serialized. */
function preambleLine(preamble: Preamble): Buffer {
  return Buffer.from(JSON.stringify(preambleSchema.parse(preamble)), 'utf8');
}

export function encodePreamble(preamble: Preamble): Buffer {
  const line = preambleLine(preamble);
  if (line.length > PREAMBLE_MAX_BYTES) {
    throw new CustodyError('preamble_too_large', `preamble of ${line.length} bytes exceeds ${PREAMBLE_MAX_BYTES} bytes; shorten the settings`);
  }
  return Buffer.concat([line, Buffer.from('\n')]);
}

/**
 * The length of the preamble line a child with these settings would be
 * sent (its secrets and challenge have fixed lengths, so placeholders of
 * those lengths measure it exactly), for refusing a configuration before
 * any child starts.
 */
export function preambleBytes(child: {
  role: Preamble['role'];
  name: string;
  pinsKernel: boolean;
  limits: Preamble['limits'];
  settings: Preamble['settings'];
}): number {
  const hex = (bytes: number) => '0'.repeat(bytes * 2);
  const preamble: Preamble = {
    custody: PREAMBLE_TAG,
    sid: hex(16),
    key: hex(32),
    role: child.role,
    name: child.name,
    challenge: hex(32),
    mode: 'provision',
    pins: { kernel: child.pinsKernel ? hex(32) : null },
    limits: child.limits,
    settings: child.settings,
  };
  return preambleLine(preamble).length;
}

export function parsePreambleLine(line: Buffer): Preamble {
  let object: Record<string, unknown>;
  try {
    object = decodeJsonObject(line, PREAMBLE_MAX_DEPTH, 'preamble');
  } catch (error) {
    throw new CustodyError('preamble_malformed', toCustodyError(error).message, { cause: error });
  }
  const parsed = preambleSchema.safeParse(object);
  if (!parsed.success) {
    throw new CustodyError('preamble_malformed', `preamble: ${describeIssues(parsed.error)}`);
  }
  return parsed.data;
}

export interface PreambleRead {
  readonly preamble: Preamble;
  /** Bytes after the preamble's newline in the same chunk: the start of the frame stream. */
  readonly rest: Buffer;
}

export class PreambleReader {
  readonly #maxBytes: number;
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  #done = false;

  constructor(maxBytes = PREAMBLE_MAX_BYTES) {
    this.#maxBytes = maxBytes;
  }

  /** Feed a chunk; returns the preamble once its line is complete, else null. Throws on any fault. */
  push(chunk: Buffer): PreambleRead | null {
    if (this.#done) throw new Error('PreambleReader already delivered its preamble');
    const newline = chunk.indexOf(0x0a);
    const end = newline === -1 ? chunk.length : newline;
    const size = this.#pendingBytes + end;
    if (size > this.#maxBytes) {
      throw new CustodyError('preamble_too_large', `preamble exceeds ${this.#maxBytes} bytes before its newline`);
    }
    if (newline === -1) {
      this.#pending.push(Buffer.from(chunk));
      this.#pendingBytes = size;
      return null;
    }
    const line = Buffer.concat([...this.#pending, chunk.subarray(0, end)], size);
    this.#pending = [];
    this.#done = true;
    return { preamble: parsePreambleLine(line), rest: chunk.subarray(newline + 1) };
  }

  /** The stream ended before a complete preamble. */
  end(): CustodyError {
    return new CustodyError('preamble_malformed', this.#pendingBytes > 0
      ? `stream ended inside the preamble (${this.#pendingBytes} bytes without a newline)`
      : 'stream ended before any preamble');
  }
}
