// HTTP/1.1 with exact bytes: a request line, headers and a body written as
// given (fetch and http.request refuse or rewrite odd targets and methods),
// and the response read back as status, headers and body text.
import { connect } from 'node:net';

export interface RawRequest {
  readonly method: string;
  /** The request target, byte for byte (latin-1: one character per byte). */
  readonly target: string;
  readonly headers?: Record<string, string>;
  readonly body?: Buffer;
  /** A bearer token, or none. */
  readonly token?: string | null;
}

export interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
}

export function rawHttp(port: number, request: RawRequest, timeoutMs = 30_000): Promise<RawResponse> {
  const headers: Record<string, string> = { host: `127.0.0.1:${port}`, connection: 'close', ...request.headers };
  if (request.token) headers.authorization = `Bearer ${request.token}`;
  if (request.body) headers['content-length'] = String(request.body.length);
  const head = `${request.method} ${request.target} HTTP/1.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(new Error(`no answer to ${request.method} ${request.target.slice(0, 60)} within ${timeoutMs} ms`)), timeoutMs);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', (error) => {
      clearTimeout(timer);
      // A server that answers and closes before reading the whole body resets the socket: keep what it said.
      if (chunks.length > 0) resolve(parse(Buffer.concat(chunks)));
      else reject(error);
    });
    socket.on('close', () => {
      clearTimeout(timer);
      if (chunks.length > 0) resolve(parse(Buffer.concat(chunks)));
      else reject(new Error(`connection closed without an answer to ${request.method} ${request.target.slice(0, 60)}`));
    });
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), request.body ?? Buffer.alloc(0)]));
  });
}

function parse(bytes: Buffer): RawResponse {
  const end = bytes.indexOf('\r\n\r\n');
  const head = bytes.subarray(0, end < 0 ? bytes.length : end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of head.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = end < 0 ? Buffer.alloc(0) : bytes.subarray(end + 4);
  const length = headers['content-length'];
  if (length !== undefined) body = body.subarray(0, Number(length));
  return { status, headers, text: body.toString('utf8') };
}
