// One end of an authenticated session: seals outgoing frames with this
// side's directional key and sequence, and opens incoming lines in the order
// docs/PROTOCOL.md §3 fixes: MAC on the raw bytes first, then the envelope's
// layout (its header, from and seq, the body's braces), then the body's
// strict decoding (UTF-8, depth, JSON), then session id, sender role and
// sequence. Any failure throws a CustodyError with its own code; the caller
// poisons the channel.
import { z } from 'zod';
import { CustodyError } from '../errors.js';
import { MAX_TIMESTAMP_MS, type Role, role } from '../protocol/common.js';
import { decodeJsonObject, measureDepth } from './decode.js';
import { type Frame, FRAME_VERSION, macMatches, sealCovered, sealFrame, splitTrailer } from './frame-codec.js';
import type { FrameLimits } from './frame-reader.js';
import { type SessionSecrets, deriveDirectionKey } from './session-keys.js';
import { cutText } from '../text/cut.js';

export const frameKind = z.string().regex(/^[a-z][a-z0-9_.]{0,63}$/);

/*
 * The envelope is checked on the raw bytes, not after JSON.parse: the members
 * must stand in the one order docs/PROTOCOL.md §4.4 fixes, each once, with
 * nothing between them. Parsing first would hide a reordered or repeated
 * member (JSON.parse keeps the last), and a strict reader of the same bytes
 * would disagree with this one about what was sent. Every header value has a
 * charset that needs no JSON escape, so the pattern below is exact; the body
 * is then decoded alone and must end where the MAC trailer begins.
 */
const ENVELOPE_HEAD = new RegExp(
  `^\\{"v":${FRAME_VERSION},"sid":"([0-9a-f]{32})","seq":(0|[1-9][0-9]{0,15}),"from":"([a-z]+)",` +
    `"kind":"([a-z][a-z0-9_.]{0,63})","id":"([A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,127})","body":`,
);
/** The header is short: it is matched on at most this many leading bytes. */
const ENVELOPE_HEAD_MAX_BYTES = 320;

function decodeEnvelope(covered: Buffer, maxDepth: number): Frame {
  const head = ENVELOPE_HEAD.exec(covered.subarray(0, ENVELOPE_HEAD_MAX_BYTES).toString('latin1'));
  if (head === null) {
    throw new CustodyError(
      'frame_malformed',
      'frame envelope is not {"v":1,"sid","seq","from","kind","id","body"} in that order, each once (docs/PROTOCOL.md §4.4)',
    );
  }
  const [matched, sid, seqText, from, kind, id] = head as unknown as [string, string, string, string, string, string];
  const seq = Number(seqText);
  const fromRole = role.safeParse(from);
  if (!fromRole.success || seq > MAX_TIMESTAMP_MS) {
    throw new CustodyError('frame_malformed', `frame envelope: from ${JSON.stringify(from)} or seq ${seqText} is out of range`);
  }
  // The body is the object's own bytes, from its `{` to the `}` where the MAC
  // trailer begins: no whitespace on either side, which JSON.parse would skip
  // and a strict reader of the envelope would not (docs/PROTOCOL.md §4.4).
  if (covered[matched.length] !== 0x7b || covered[covered.length - 1] !== 0x7d) {
    throw new CustodyError('frame_malformed', 'frame body must be a JSON object starting right after "body": and ending where the MAC trailer begins, with no whitespace around it (docs/PROTOCOL.md §4.4)');
  }
  // The body nests one level below the envelope's own object.
  const body = decodeJsonObject(covered.subarray(matched.length), maxDepth - 1, 'frame body');
  return { sid, seq, from: fromRole.data, kind, id, body };
}

export type Side = 'supervisor' | 'child';

export interface EndpointOptions {
  readonly secrets: SessionSecrets;
  readonly side: Side;
  /** This process's role, written into every frame it sends. */
  readonly self: Role;
  /** The only role this end accepts frames from. */
  readonly peer: Role;
  readonly limits: FrameLimits;
}

export class SessionEndpoint {
  readonly sid: string;
  readonly self: Role;
  readonly peer: Role;
  readonly limits: FrameLimits;
  readonly #sendKey: Buffer;
  readonly #receiveKey: Buffer;
  #sendSeq = 0;
  #receiveSeq = 0;

  constructor(options: EndpointOptions) {
    this.sid = options.secrets.sid;
    this.self = options.self;
    this.peer = options.peer;
    this.limits = options.limits;
    const outbound = options.side === 'supervisor' ? 'to-child' : 'to-supervisor';
    const inbound = options.side === 'supervisor' ? 'to-supervisor' : 'to-child';
    this.#sendKey = deriveDirectionKey(options.secrets, outbound);
    this.#receiveKey = deriveDirectionKey(options.secrets, inbound);
  }

  /** Sequence number the next sealed frame will carry. */
  get nextSendSeq(): number {
    return this.#sendSeq;
  }

  /** Sequence number the next accepted frame must carry. */
  get nextReceiveSeq(): number {
    return this.#receiveSeq;
  }

  /**
   * Seal a frame. A frame over the size or depth bound is refused here,
   * before it is written, so a sender never poisons its peer with its own
   * oversized or too deep frame;
   * the sequence number is consumed only by a frame that is sent.
   */
  seal(kind: string, id: string, body: Record<string, unknown>): Buffer {
    const line = sealFrame({ sid: this.sid, seq: this.#sendSeq, from: this.self, kind, id, body }, this.#sendKey);
    const size = line.length - 1;
    if (size > this.limits.maxFrameBytes) {
      throw new CustodyError('frame_too_large', `outgoing ${kind} frame of ${size} bytes exceeds the bound of ${this.limits.maxFrameBytes} bytes`);
    }
    // The bound the peer checks on every line, measured as it measures it
    // (scanJson answers the same depth): a frame it would refuse as too deep
    // is refused here instead, unsent, and the channel stays open.
    const depth = measureDepth(line, this.limits.maxDepth);
    if (depth > this.limits.maxDepth) {
      throw new CustodyError('frame_too_deep', `outgoing ${kind} frame nests ${depth} levels deep; the session bound is ${this.limits.maxDepth}; nothing was sent`);
    }
    this.#sendSeq++;
    return line;
  }

  /**
   * Seal a frame around body bytes given verbatim, for conformance tests and
   * vectors that must put exact (even invalid) JSON on the wire.
   */
  sealRawBody(kind: string, id: string, rawBody: Buffer): Buffer {
    const head = Buffer.from(
      `{"v":${FRAME_VERSION},"sid":${JSON.stringify(this.sid)},"seq":${this.#sendSeq},` +
        `"from":${JSON.stringify(this.self)},"kind":${JSON.stringify(kind)},"id":${JSON.stringify(id)},"body":`,
      'utf8',
    );
    this.#sendSeq++;
    return sealCovered(Buffer.concat([head, rawBody]), this.#sendKey);
  }

  /** Authenticate and decode one line (without its newline). Usable as a FrameReader's LineDecoder. */
  open(line: Buffer): Frame {
    const split = splitTrailer(line);
    if (!macMatches(this.#receiveKey, split)) {
      if (macMatches(this.#sendKey, split)) {
        throw new CustodyError('frame_reflected', 'received a frame sealed with this side\'s own sending key');
      }
      throw new CustodyError('bad_mac', `frame MAC does not verify (expected seq ${this.#receiveSeq})`);
    }
    const frame = decodeEnvelope(split.covered, this.limits.maxDepth);
    if (frame.sid !== this.sid) {
      throw new CustodyError('wrong_session', `frame names session ${frame.sid}, this channel is ${this.sid}`);
    }
    if (frame.from !== this.peer) {
      const code = frame.from === this.self ? 'frame_reflected' : 'wrong_sender';
      throw new CustodyError(code, `frame from ${frame.from}, expected ${this.peer}`);
    }
    if (frame.seq !== this.#receiveSeq) {
      const what = frame.seq < this.#receiveSeq ? 'replayed or reordered' : 'skipped ahead';
      throw new CustodyError('bad_sequence', `frame seq ${frame.seq} ${what}; expected ${this.#receiveSeq}`);
    }
    this.#receiveSeq++;
    return { sid: frame.sid, seq: frame.seq, from: frame.from, kind: frame.kind, id: frame.id, body: frame.body };
  }
}

/** Characters of one schema issue in a message. */
const ISSUE_TEXT_MAX = 300;

/** A short, stable description of schema issues for error messages. */
export function describeIssues(error: z.ZodError, limit = 3): string {
  const parts = error.issues.slice(0, limit).map((issue) => {
    const where = issue.path.length > 0 ? issue.path.join('.') : '(top)';
    // An issue may echo what was sent (zod's unrecognized keys, every one of them): each is cut, so the whole stays small.
    return cutText(`${where}: ${issue.message}`, ISSUE_TEXT_MAX);
  });
  const more = error.issues.length > limit ? ` (+${error.issues.length - limit} more)` : '';
  return parts.join('; ') + more;
}
