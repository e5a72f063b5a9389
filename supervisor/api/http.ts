// The HTTP plumbing of the control API: bearer tokens compared in constant
// time and checked before any handler or body read, a request body bound,
// and fixed JSON error bodies {code, message} that carry nothing internal.
import { createHash, timingSafeEqual } from 'node:crypto';
import { type IncomingMessage, type ServerResponse } from 'node:http';
import { CustodyError, type ErrorClass, toCustodyError } from '../../shared/errors.js';

export type Access = 'open' | 'agent' | 'control';

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
  if (error.code === 'body_too_large') return 413;
  // 507 Insufficient Storage: the caller did nothing wrong; ask again with the same name once space is freed.
  if (error.code === 'storage_full') return 507;
  return STATUS[error.errorClass];
}

export function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  response.end(text);
}

/**
 * The error body a client sees: the code and message of a CustodyError.
 * Anything of the internal class (store paths, modes, states) is logged, and
 * the client learns only its code (DESIGN §11).
 */
export function sendError(response: ServerResponse, error: unknown): void {
  const failure = toCustodyError(error);
  const body = failure.errorClass === 'internal' ? { code: failure.code, message: 'internal error; see the service log' } : failure.toWire();
  sendJson(response, statusOf(failure), body);
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
  roleOf(request: IncomingMessage): 'agent' | 'control' | null {
    const header = request.headers.authorization;
    if (typeof header !== 'string' || !header.startsWith('Bearer ')) return null;
    const presented = digest(header.slice('Bearer '.length).trim());
    const isControl = timingSafeEqual(presented, this.#control);
    const isAgent = timingSafeEqual(presented, this.#agent);
    return isControl ? 'control' : isAgent ? 'agent' : null;
  }

  /** Refuse before any handler: no token is `unauthorized`, the agent token on a control route is `forbidden`. */
  check(request: IncomingMessage, access: Access): void {
    if (access === 'open') return;
    const role = this.roleOf(request);
    if (role === null) throw new CustodyError('unauthorized', 'a valid bearer token is required (Authorization: Bearer <token>)');
    if (access === 'control' && role !== 'control') throw new CustodyError('forbidden', 'this endpoint needs the control token');
  }
}

/** Read a JSON object body of at most `limit` bytes; refuses at the bound before buffering more. */
export async function readJsonBody(request: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const declared = Number(request.headers['content-length'] ?? '0');
  if (declared > limit) throw new CustodyError('body_too_large', `request body of ${declared} bytes exceeds ${limit} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      request.destroy();
      throw new CustodyError('body_too_large', `request body exceeds ${limit} bytes`);
    }
    chunks.push(chunk);
  }
  if (size === 0) return {};
  let value: unknown;
  try {
    value = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new CustodyError('bad_request', 'request body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CustodyError('bad_request', 'request body must be a JSON object');
  return value as Record<string, unknown>;
}
