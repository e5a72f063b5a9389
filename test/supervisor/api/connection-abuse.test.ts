// What a client that misuses its connection can and cannot do to the control
// API (docs/SECURITY.md "Connections"): a connection refused by the HTTP
// parser is closed whole, so one that never closes its side does not keep
// its place under bounds.max_connections; a refusal is never written over
// the answer of a request still being made on the same connection (a 405
// read as an invoke's answer would say nothing ran); a body past the bound
// is answered 413 whichever way it is framed; a body left unread is not
// drained, the connection is closed after the answer; 100 Continue is sent
// only to a client with a token; and refusals are not a log line each
// without bound.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { type TestService, startService } from '../../helpers/service.js';
import { untilHolds } from '../../helpers/eventually.js';

const MAX_BODY = 4096;
const REQUEST_TIMEOUT_MS = 4_000;

/** The body of a raw answer (after its header block). */
const answerBody = (text: string) => text.slice(text.indexOf('\r\n\r\n') + 4);

/** A raw answer whose header block and the content-length bytes after it have all arrived. */
function isWhole(text: string): boolean {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const length = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, end));
  return length !== null && Buffer.byteLength(text.slice(end + 4), 'latin1') >= Number(length[1]);
}

/** `promise`, or a failure naming `what` after `ms`. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * A raw connection that keeps its side open after the server's FIN (a
 * half-closed client), collecting what it reads; `closed` settles when the
 * server has ended or reset the connection.
 */
function halfOpen(port: number): Promise<{ socket: net.Socket; read: () => string; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let text = '';
    socket.on('data', (chunk) => (text += chunk.toString('latin1')));
    socket.on('error', () => undefined);
    const closed = new Promise<void>((done) => {
      socket.once('end', () => done());
      socket.once('close', () => done());
    });
    socket.once('connect', () => resolve({ socket, read: () => text, closed }));
    socket.once('error', reject);
  });
}

describe('the control API against a client that misuses its connection', function () {
  this.timeout(120_000);
  let service: TestService;
  let agent: string;

  before(async () => {
    service = await startService({ config: { timing: { api_headers_timeout_ms: 1_000, api_request_timeout_ms: REQUEST_TIMEOUT_MS }, bounds: { max_connections: 3, max_body_bytes: MAX_BODY } } });
    agent = readFileSync(service.paths.agentToken, 'utf8').trim();
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  it('closes a connection it refused with 408 whole: clients that never close their side do not keep the places (max_connections 3)', async () => {
    const stuck = await Promise.all([0, 1, 2].map(() => halfOpen(service.port)));
    for (const { socket } of stuck) socket.write('G');
    // Each is answered 408; the clients never end their sides, and still the places are freed.
    await Promise.all(stuck.map(({ closed }) => closed));
    for (const { read } of stuck) expect(read()).to.match(/^HTTP\/1\.1 408 /);
    let status = 0;
    await untilHolds('a place is free again while the three clients hold their sides', async () => {
      status = await service.http('GET', '/v1/status', undefined, 'agent').then((answer) => answer.status, () => 0);
      return status === 200;
    }, 8_000);
    for (const { socket } of stuck) socket.destroy();
  });

  it('never writes a refusal over the answer of a request still being made on the connection', async () => {
    const { socket, read, closed } = await halfOpen(service.port);
    const body = JSON.stringify({ tool: 'review-notes/append', arguments: { note: 'answered or cut, never refused' }, request_id: 'desync-1' });
    // One write: the invoke, then bytes no request line may start with, parsed while the invoke is under way.
    socket.write(`POST /v1/invoke HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${agent}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}GARBAGE\r\n\r\n`);
    await closed;
    expect(read(), 'no refusal is read as the invoke\'s answer').to.not.match(/^HTTP\/1\.1 4/);
    // The call the client sent ran once, and asking again by its name says so.
    await untilHolds('the invoke ended', async () => ((await service.http('GET', '/v1/operations/desync-1', undefined, 'agent')).body as { request?: { final?: boolean } }).request?.final === true, 20_000);
    const again = await service.http('POST', '/v1/invoke', { tool: 'review-notes/append', arguments: { note: 'answered or cut, never refused' }, request_id: 'desync-1' }, 'agent');
    expect(again.body).to.include({ outcome: 'completed' });
  });

  it('answers 408 with its body a request whose own body stops arriving (no earlier answer is under way to protect)', async () => {
    const { socket, read, closed } = await halfOpen(service.port);
    socket.write(`POST /v1/invoke HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${agent}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"tool":`);
    await within(closed, REQUEST_TIMEOUT_MS + 4_000, 'the refusal');
    expect(read()).to.match(/^HTTP\/1\.1 408 /);
    expect(read()).to.contain('"code":"bad_request"');
  });

  it('answers a chunked body one byte past max_body_bytes 413 body_too_large, and one at the bound is read', async () => {
    const send = async (bytes: number) => {
      const { socket, read, closed } = await halfOpen(service.port);
      const prefix = '{"tool":"review-notes/append","arguments":{"note":"';
      const suffix = '"}}';
      const json = prefix + 'n'.repeat(bytes - prefix.length - suffix.length) + suffix;
      expect(Buffer.byteLength(json)).to.equal(bytes);
      // Keep-alive asked for, the whole body in one write: the parser has seen its end when the bound is judged.
      socket.write(`POST /v1/invoke HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${agent}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n${bytes.toString(16)}\r\n${json}\r\n0\r\n\r\n`);
      await untilHolds('a whole answer', () => Promise.resolve(isWhole(read())), 10_000);
      return { text: read(), closed };
    };
    const past = await send(MAX_BODY + 1);
    expect(past.text).to.match(/^HTTP\/1\.1 413 /);
    expect(past.text.toLowerCase(), 'the read stopped at the bound: the connection is not kept').to.contain('connection: close');
    await within(past.closed, 3_000, 'the connection after a 413 closes');
    expect(answerBody(past.text)).to.contain('"code":"body_too_large"');
    // At the bound the body is read and judged on its content (the note is past the tool's own schema: not 413 for the body).
    const at = await send(MAX_BODY);
    expect(at.text).to.match(/^HTTP\/1\.1 \d{3} /);
    expect(at.text).to.not.contain('body_too_large');
  });

  it('closes the connection after answering a request whose announced body it did not read, rather than drain it', async () => {
    const { socket, read, closed } = await halfOpen(service.port);
    socket.write(`GET /v1/health HTTP/1.1\r\nhost: x\r\ncontent-length: 50000000000\r\n\r\n${'x'.repeat(1000)}`);
    // A client streaming on would be read for as long as it sends: here it keeps writing, and the server must still close.
    const feeding = setInterval(() => socket.writable && socket.write('x'.repeat(65_536)), 5);
    try {
      // Well before the request timeout (which would end the drain with a 408 of its own).
      await within(closed, REQUEST_TIMEOUT_MS / 2, 'the connection closes after the answer');
    } finally {
      clearInterval(feeding);
    }
    const head = read().slice(0, read().indexOf('\r\n\r\n')).toLowerCase();
    expect(head).to.match(/^http\/1\.1 200 /);
    expect(head, 'the 200 itself says the connection closes').to.contain('connection: close');
  });

  it('sends 100 Continue only to a client with a token and a body within the bound', async () => {
    const ask = async (token: string | null, length: number) => {
      const { socket, read, closed } = await halfOpen(service.port);
      socket.write(`POST /v1/invoke HTTP/1.1\r\nhost: x\r\n${token ? `authorization: Bearer ${token}\r\n` : ''}content-type: application/json\r\ncontent-length: ${length}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n`);
      await untilHolds('an answer', () => Promise.resolve(read().length > 0), 10_000);
      const first = read();
      socket.destroy();
      await closed;
      return first;
    };
    expect(await ask(null, 10)).to.match(/^HTTP\/1\.1 401 /);
    expect(await ask(agent, MAX_BODY + 1)).to.match(/^HTTP\/1\.1 413 /);
    expect(await ask(agent, 10)).to.match(/^HTTP\/1\.1 100 Continue/);
  });

  it('logs refusals a line each only up to a rate, then tallies them', async () => {
    const before = service.stderr.filter((line) => line.includes('"api_refused"')).length;
    const { socket, closed } = await halfOpen(service.port);
    socket.end(`GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n`.repeat(400));
    await closed;
    const logged = service.stderr.filter((line) => line.includes('"api_refused"')).length - before;
    expect(logged, `${logged} lines for 400 refusals`).to.be.at.least(1).and.at.most(60);
  });
});
