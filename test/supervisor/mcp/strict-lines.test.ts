// What custody mcp lets through to the MCP SDK (supervisor/mcp/server.ts
// strictLines): a JSON object per line in strict UTF-8 with no member named
// twice. The SDK alone decoded bad bytes to U+FFFD and kept the last of two
// members (and ran the call with them), and said nothing of a line it could
// not parse. Each refusal is a JSON-RPC error with id null.
import { expect } from 'chai';
import { PassThrough } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { MCP_LINE_MAX_BYTES, strictLines } from '../../../supervisor/mcp/server.js';
import { createLogger } from '../../../shared/log.js';

/** The lines through strictLines and on into the SDK's own stdio transport: what it passed, what the SDK read, what was answered here. */
async function through(chunks: readonly Buffer[]): Promise<{ passed: string[]; read: unknown[]; sdkErrors: string[]; answers: Array<{ id: unknown; error: { code: number; message: string } }> }> {
  const input = new PassThrough();
  const answers: Array<{ id: unknown; error: { code: number; message: string } }> = [];
  const out = strictLines(input, (answer) => answers.push(answer as (typeof answers)[number]), createLogger({}, { write: () => undefined }));
  const passed: Buffer[] = [];
  out.on('data', (chunk: Buffer) => passed.push(chunk));
  const read: unknown[] = [];
  const sdkErrors: string[] = [];
  const transport = new StdioServerTransport(out, new PassThrough());
  transport.onmessage = (message) => read.push(message);
  transport.onerror = (error) => sdkErrors.push(error.message);
  await transport.start();
  const ended = new Promise((resolve) => out.on('end', resolve));
  for (const chunk of chunks) input.write(chunk);
  input.end();
  await ended;
  await transport.close();
  return { passed: Buffer.concat(passed).toString('utf8').split('\n').filter(Boolean), read, sdkErrors, answers };
}

const call = (params: string) => `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":${params}}`;

describe('custody mcp: the lines it reads', () => {
  it('passes a well-formed message (CRLF, split across chunks) and refuses invalid UTF-8, a member named twice, bad JSON and a non-object, each with a JSON-RPC error of id null', async () => {
    const good = call('{"name":"review-notes__append","arguments":{"note":"ok"}}');
    const { passed, read, answers } = await through([
      Buffer.from(good.slice(0, 20)),
      Buffer.from(`${good.slice(20)}\r\n`),
      Buffer.concat([Buffer.from(call('{"name":"review-notes__append","arguments":{"note":"bad')), Buffer.from([0xff]), Buffer.from('byte"}}\n')]),
      Buffer.from(`${call('{"name":"review-notes__append","arguments":{"note":"a","note":"b"}}')}\n`),
      Buffer.from('{"jsonrpc":"2.0","id":2,\n'),
      Buffer.from('[1,2]\n'),
    ]);
    expect(passed).to.deep.equal([good]);
    expect(read, 'the SDK read the one good message').to.have.length(1);
    expect(answers.map((answer) => [answer.id, answer.error.code])).to.deep.equal([
      [null, -32700],
      [null, -32700],
      [null, -32700],
      [null, -32600],
    ]);
    expect(answers[0]!.error.message).to.match(/UTF-8/);
    expect(answers[1]!.error.message).to.contain('"note" twice');
  });

  it(`takes a line of ${MCP_LINE_MAX_BYTES} bytes and refuses one of a byte more without holding it, then reads on`, async () => {
    const padded = (bytes: number) => {
      const head = '{"jsonrpc":"2.0","id":3,"method":"ping","params":{"pad":"';
      return `${head}${'x'.repeat(bytes - head.length - 3)}"}}`;
    };
    const at = padded(MCP_LINE_MAX_BYTES);
    expect(Buffer.byteLength(at)).to.equal(MCP_LINE_MAX_BYTES);
    const past = padded(MCP_LINE_MAX_BYTES + 1);
    const after = '{"jsonrpc":"2.0","id":4,"method":"ping"}';
    const { passed, read, sdkErrors, answers } = await through([Buffer.from(`${at}\n`), Buffer.from(past.slice(0, 1000)), Buffer.from(`${past.slice(1000)}\n${after}\n`)]);
    expect(passed).to.deep.equal([at, after]);
    expect(sdkErrors, 'the SDK took the line at the bound, its newline included').to.deep.equal([]);
    expect(read.map((message) => (message as { id: number }).id)).to.deep.equal([3, 4]);
    expect(answers).to.have.length(1);
    expect(answers[0]!.error).to.include({ code: -32700 });
  });

  it('never runs a last message the input ended inside (no newline): it is answered -32700 instead, since its call could not be waited for', async () => {
    const done = '{"jsonrpc":"2.0","id":5,"method":"ping"}';
    const { passed, read, answers } = await through([Buffer.from(`${done}\n${call('{"name":"review-notes__append","arguments":{"note":"last"}}')}`)]);
    expect(passed).to.deep.equal([done]);
    expect(read).to.have.length(1);
    expect(answers.map((answer) => answer.error.code)).to.deep.equal([-32700]);
    expect(answers[0]!.error.message).to.contain('no newline');
  });
});
