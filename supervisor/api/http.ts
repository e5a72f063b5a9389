// The HTTP plumbing of the control API: bearer tokens compared in constant
// time and checked before any handler or body read, a request body bound,
// and fixed JSON error bodies {code, message} that carry nothing internal.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { decodeUtf8OrRefuse } from '../../shared/text/utf8.js';
import { RESERVED_MEMBER, scanJson } from '../../shared/wire/decode.js';
import { CustodyError, type ErrorClass, toCustodyError } from '../../shared/errors.js';

export type Access = 'open' | 'agent' | 'control';

/** Which token a request carried, or null for none. */
export type TokenRole = 'agent' | 'control' | null;

const STATUS: Record<ErrorClass, number> = {
  usage: 400,
  auth: 401,
  not_found: 404,
  refused: 409,
  unknown: 409,
  protocol: 502,
  unreachable: 503,
  internal: 500,
};

export function statusOf(error: CustodyError): number {
  if (error.code === 'forbidden') return 403;
  if (error.code === 'body_too_large' || error.code === 'arguments_too_large') return 413;
  if (error.code === 'method_not_allowed') return 405;
  // 507 Insufficient Storage: the caller did nothing wrong; ask again with the same name once space is freed.
  if (error.code === 'storage_full') return 507;
  // 503: a lock another connection holds on a store (the sqlite3 shell), not the caller's doing; ask again with the same name.
  if (error.code === 'store_busy') return 503;
  return STATUS[error.errorClass];
}

export function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  response.end(text);
}

/** A text answer (GET /metrics) in its own content type. */
export function sendText(response: ServerResponse, status: number, contentType: string, text: string): void {
  response.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  response.end(text);
}

/**
 * The error body a client sees: the code and message of a CustodyError.
 * Anything of the internal class (store paths, modes, states) is logged, and
 * the client learns only its code (ARCHITECTURE.md §11); so is a protocol fault
 * between the supervisor and a child, whose message names internal calls.
 */
export function sendError(response: ServerResponse, error: unknown): void {
  const failure = toCustodyError(error);
  const body =
    failure.errorClass === 'internal'
      ? { code: failure.code, message: 'internal error; see the service log' }
      : failure.errorClass === 'protocol'
        ? { code: failure.code, message: 'a child process answered outside the protocol; see the service log' }
        : failure.toWire();
  sendJson(response, statusOf(failure), failure.requestId === undefined ? body : { ...body, request_id: failure.requestId });
}

/** What Node's HTTP parser refuses, by its error code: status line and fixed body. Anything else is a 400 bad_request. */
const PARSER_REFUSALS: Record<string, { status: number; reason: string; error: CustodyError }> = {
  HPE_INVALID_METHOD: { status: 405, reason: 'Method Not Allowed', error: new CustodyError('method_not_allowed', 'the request method is not served; the API serves GET, POST, DELETE') },
  HPE_INVALID_URL: { status: 400, reason: 'Bad Request', error: new CustodyError('target_invalid', 'the request target holds bytes a request line may not hold; send an origin-form target such as /v1/operations/NAME') },
  HPE_HEADER_OVERFLOW: { status: 431, reason: 'Request Header Fields Too Large', error: new CustodyError('bad_request', 'the request headers exceed their bound') },
  ERR_HTTP_REQUEST_TIMEOUT: {
    status: 408,
    reason: 'Request Timeout',
    error: new CustodyError('bad_request', 'the request was not received in time (its headers within timing.api_headers_timeout_ms, the whole of it within timing.api_request_timeout_ms); nothing was done: send it again'),
  },
};
const PARSER_DEFAULT = { status: 400, reason: 'Bad Request', error: new CustodyError('bad_request', 'the request is not valid HTTP/1.1 (request line, headers or framing)') };

/**
 * A refused connection is cut once its refusal is handed to the kernel (as
 * Node's own refusals are), or after this long when a client that does not
 * read keeps it from being handed over. Lingering after the write, for a
 * client still sending to read the refusal first, kept places under
 * bounds.max_connections from new clients for that long (measured: the
 * next connection was dropped); never cutting let a client that does not
 * close its side keep its place for good.
 */
export const REFUSAL_LINGER_MS = 1_000;

/**
 * Node's HTTP parser refused the request itself: answer with a fixed body and
 * close the connection whole (REFUSAL_LINGER_MS), freeing its place
 * under bounds.max_connections (an end alone half-closes it, and a client
 * that never closes its side kept the place for good). `answering`: a
 * response to an earlier, whole request on this connection is still being
 * made (an invoke under way), or this request's own answer has begun; then
 * nothing is written, since a refusal written there would read as that
 * answer (a 405 for an invoke that completed), and the connection is cut:
 * the client learns the answer was lost and asks again by name.
 */
export function sendClientError(socket: Duplex, parserCode: string | undefined, answering = false): void {
  if (!socket.writable || answering) {
    socket.destroy();
    return;
  }
  const { status, reason, error } = (parserCode !== undefined && Object.hasOwn(PARSER_REFUSALS, parserCode) ? PARSER_REFUSALS[parserCode] : undefined) ?? PARSER_DEFAULT;
  const text = JSON.stringify(error.toWire());
  const linger = setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS).unref();
  socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n${text}`, () => {
    clearTimeout(linger);
    socket.destroy();
  });
}

const digest = (token: string) => createHash('sha256').update(token, 'utf8').digest();

export class TokenGate {
  readonly #agent: Buffer;
  readonly #control: Buffer;

  constructor(agentToken: string, controlToken: string) {
    this.#agent = digest(agentToken);
    this.#control = digest(controlToken);
  }

  /**
   * Which role the request's bearer token holds. Comparing SHA-256 digests
   * keeps the comparison constant-time whatever the presented token's length.
   */
  #roleOf(request: IncomingMessage): TokenRole {
    const header = request.headers.authorization;
    if (typeof header !== 'string' || !header.startsWith('Bearer ')) return null;
    const presented = digest(header.slice('Bearer '.length).trim());
    const isControl = timingSafeEqual(presented, this.#control);
    const isAgent = timingSafeEqual(presented, this.#agent);
    return isControl ? 'control' : isAgent ? 'agent' : null;
  }

  /**
   * Refuse before any handler: no token is `unauthorized`, the agent token on
   * a control route is `forbidden`. Returns the token's role (null on an
   * open route, where none is looked at).
   */
  check(request: IncomingMessage, access: Access): TokenRole {
    if (access === 'open') return null;
    const role = this.#roleOf(request);
    if (role === null) throw new CustodyError('unauthorized', 'a valid bearer token is required (Authorization: Bearer <token>)');
    if (access === 'control' && role !== 'control') throw new CustodyError('forbidden', 'this endpoint needs the control token');
    return role;
  }
}

export interface BodyLimits {
  /** Bytes of the body (bounds.max_body_bytes). */
  readonly maxBytes: number;
  /** Nesting of the body, the body object being level 1: one more than the arguments' depth budget. */
  readonly maxDepth: number;
}

/**
 * The body's bytes, at most `limit`. Past it, reading stops (the stream is
 * paused, not destroyed, so the 413 can still be written) and the answer
 * closes the connection (server.ts closes it after every body_too_large),
 * so the rest is never drained.
 */
function readBounded(request: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => {
      request.off('data', onData);
      request.off('end', onEnd);
      request.off('error', onError);
      request.off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        done();
        request.pause();
        reject(new CustodyError('body_too_large', `request body exceeds ${limit} bytes (bounds.max_body_bytes)`));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      done();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (error: Error) => {
      done();
      reject(error);
    };
    const onClose = () => {
      done();
      reject(new CustodyError('bad_request', 'the connection closed before the request body was whole'));
    };
    request.on('data', onData);
    request.once('end', onEnd);
    request.once('error', onError);
    request.once('close', onClose);
  });
}

/** A body was announced and not read to its end: answering must close the connection, not drain what is left (at any rate a client sends). */
export function unreadBody(request: IncomingMessage): boolean {
  if (request.complete) return false;
  const length = request.headers['content-length'];
  return (length !== undefined && length !== '0') || request.headers['transfer-encoding'] !== undefined;
}

/**
 * Read a JSON object body: at most `maxBytes` (refused at the bound before
 * buffering more), strict UTF-8 (refused with the byte offset), nesting
 * measured on the text before JSON.parse builds anything, so neither the
 * parser nor schema validation ever recurses on unbounded input, and no
 * object with the same member name twice (compared after unescaping).
 */
export async function readJsonBody(request: IncomingMessage, limits: BodyLimits): Promise<Record<string, unknown>> {
  // A compressed body would otherwise be read as text and refused as invalid UTF-8, which says nothing of the cause.
  const coding = request.headers['content-encoding']?.trim().toLowerCase();
  if (coding !== undefined && coding !== '' && coding !== 'identity') {
    throw new CustodyError('encoding_invalid', `Content-Encoding ${JSON.stringify(coding.slice(0, 40))} is not accepted: send the body as plain UTF-8 JSON, without Content-Encoding`);
  }
  const limit = limits.maxBytes;
  const declared = Number(request.headers['content-length'] ?? '0');
  if (declared > limit) throw new CustodyError('body_too_large', `request body of ${declared} bytes exceeds ${limit} bytes (bounds.max_body_bytes)`);
  const bytes = await readBounded(request, limit);
  if (bytes.length === 0) return {};
  const text = decodeUtf8OrRefuse(bytes, 'request body');
  // The wire's own scanner (docs/PROTOCOL.md §3, rule 6): the depth before JSON.parse, and a member twice in one object.
  const { depth, duplicate, reserved } = scanJson(text, limits.maxDepth);
  if (depth > limits.maxDepth) {
    throw new CustodyError(
      'body_too_deep',
      `request body nests deeper than ${limits.maxDepth} levels: arguments may nest at most ${limits.maxDepth - 1} levels (the arguments object is level 1), the frame bound bounds.max_depth less the frame envelope`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new CustodyError('bad_request', 'request body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CustodyError('bad_request', 'request body must be a JSON object');
  // JSON.parse keeps the last of two equal members; a proxy or a log reader that keeps the first would see
  // another tool or other arguments in the same bytes, so the API refuses them as every frame reader does.
  if (duplicate !== undefined) {
    throw new CustodyError('bad_request', `request body has the member ${JSON.stringify(duplicate)} twice in one object; send each member once`);
  }
  // Arguments with it would be checked, signed and run without it (shared/wire/decode.ts RESERVED_MEMBER).
  if (reserved) {
    throw new CustodyError('bad_request', `request body has a member named ${RESERVED_MEMBER}, which custody cannot carry unchanged (JavaScript drops it); rename that member`);
  }
  return value as Record<string, unknown>;
}
