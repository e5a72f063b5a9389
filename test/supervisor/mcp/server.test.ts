// `custody mcp` driven by the MCP SDK's own Client over a real stdio pipe,
// in front of a real service: the tools a grant covers are listed, a call
// is one governed invoke with its receipt, a call retried after its answer
// was lost is the same operation (one journal line), refusals are tool
// errors with their cause, and a grant that runs out ends the listing.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { type CallToolResult, CallToolResultSchema, ErrorCode } from '@modelcontextprotocol/sdk/types.js';
import { artifactDigest, readEnvelope } from '../../../shared/artifacts/artifact.js';
import { requestIdFor } from '../../../supervisor/mcp/server.js';
import { mcpNameOf, toolOfMcpName } from '../../../supervisor/mcp/names.js';
import { CLI, FIXTURE_EXECUTOR, startService, type TestService } from '../../helpers/service.js';

const TOOL = 'review-notes__append';

function journalLines(service: TestService): Array<Record<string, unknown>> {
  const file = path.join(service.paths.resourcesDir, 'review-notes.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function connectMcp(args: string[]): Promise<{ client: Client; stderr: string[] }> {
  const transport = new StdioClientTransport({ command: process.execPath, args: [CLI, 'mcp', ...args], stderr: 'pipe' });
  const stderr: string[] = [];
  transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString('utf8')));
  const client = new Client({ name: 'custody-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, stderr };
}

const textOf = (result: CallToolResult) => result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

describe('custody mcp', function () {
  this.timeout(90_000);
  let service: TestService;
  let client: Client;

  before(async () => {
    service = await startService();
    ({ client } = await connectMcp(['--state', service.dir]));
  });

  after(async () => {
    await client?.close();
    await service?.stop();
    service?.cleanup();
  });

  it('maps tool names reversibly and refuses names the mapping cannot carry', () => {
    const cases: Array<[string, string | null]> = [
      ['review-notes/append', 'review-notes__append'],
      ['a/b/c', 'a__b__c'],
      ['x.y-z/w_v', 'x.y-z__w_v'],
      ['a__b/c', null],
      [`a/${'b'.repeat(126)}`, null],
      // pay_/refund would be pay___refund, read back as pay/_refund: not offered rather than offered and uncallable.
      ['pay_/refund', null],
      ['pay/_refund', null],
      ['_a/b', null],
      ['a_b/c_d', 'a_b__c_d'],
    ];
    for (const [tool, name] of cases) {
      const mapped = mcpNameOf(tool);
      if (name === null) expect(mapped, tool).to.have.property('refused');
      else {
        expect(mapped, tool).to.deep.equal({ name });
        expect(toolOfMcpName(name), name).to.equal(tool);
      }
    }
    expect(toolOfMcpName('nosuch')).to.equal('nosuch');
    expect(toolOfMcpName('a___b')).to.equal(null);
    expect(toolOfMcpName('pay___refund')).to.equal(null);
    expect(toolOfMcpName('Bad/Name')).to.equal(null);
  });

  it('lists the tools a live grant covers, with the adapter\'s argument schema', async () => {
    const { tools } = await client.listTools();
    const notes = tools.find((t) => t.name === TOOL);
    expect(notes, JSON.stringify(tools)).to.not.equal(undefined);
    expect(notes!.inputSchema.properties).to.have.property('note');
    expect(notes!.inputSchema.required).to.deep.equal(['note']);
    expect(notes!.description).to.match(/4 invocation\(s\) left/);
  });

  it('runs a call as one governed invoke whose result carries the output and the receipt id and digest', async () => {
    const result = (await client.callTool({ name: TOOL, arguments: { note: 'from mcp' } })) as CallToolResult;
    expect(result.isError, textOf(result)).to.not.equal(true);
    const structured = result.structuredContent as { request_id: string; outcome: string; receipt: { id: string; digest: string }; output: { note: string } };
    expect(structured.outcome).to.equal('completed');
    expect(structured.request_id).to.equal(requestIdFor('review-notes/append', { note: 'from mcp' }, null));
    expect(structured.output.note).to.equal('from mcp');
    const shown = await service.http('GET', `/v1/operations/${structured.request_id}`, undefined, 'agent');
    const receipts = (shown.body as { receipts: string[] }).receipts;
    const last = receipts[receipts.length - 1]!;
    expect(structured.receipt.id).to.equal((readEnvelope(last).envelope.body as { receipt_id: string }).receipt_id);
    expect(structured.receipt.digest).to.equal(artifactDigest(last));
    expect(journalLines(service).filter((l) => l.note === 'from mcp')).to.have.length(1);
  });

  it('answers a call retried after its answer was lost with the same operation, and the journal holds one line', async () => {
    const args = { note: 'retried note', custody_request_id: 'agent-call-7' };
    const requestId = requestIdFor('review-notes/append', { note: 'retried note' }, 'agent-call-7');
    // The client gives up before the answer arrives: the answer is lost, the call went on.
    const lost = await client.callTool({ name: TOOL, arguments: args }, undefined, { timeout: 1 }).then(
      () => 'answered',
      (error: Error) => error.message,
    );
    expect(lost).to.match(/timed out/i);
    // The lost call reached the service (so the retry below is a retry of it).
    const deadline = Date.now() + 30_000;
    while ((await service.http('GET', `/v1/operations/${requestId}`, undefined, 'agent')).status !== 200) {
      if (Date.now() > deadline) throw new Error(`the lost call never reached the service as ${requestId}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const retried = (await client.callTool({ name: TOOL, arguments: args })) as CallToolResult;
    expect(retried.isError, textOf(retried)).to.not.equal(true);
    expect((retried.structuredContent as { request_id: string }).request_id).to.equal(requestId);
    const again = (await client.callTool({ name: TOOL, arguments: args })) as CallToolResult;
    // The same answer; whether the call is told it repeated an earlier one depends on how long after the first it came (below).
    const { repeated: _retried, ...retriedAnswer } = retried.structuredContent as Record<string, unknown>;
    const { repeated: _again, ...againAnswer } = again.structuredContent as Record<string, unknown>;
    expect(againAnswer).to.deep.equal(retriedAnswer);
    expect(journalLines(service).filter((l) => l.note === 'retried note')).to.have.length(1);
  });

  it('answers a refusal as a tool error with its cause', async () => {
    const unknown = (await client.callTool({ name: 'nosuch__tool', arguments: {} })) as CallToolResult;
    expect(unknown.isError).to.equal(true);
    expect(textOf(unknown)).to.match(/tool_unknown: no executor serves nosuch\/tool: .*GET \/v1\/tools lists them.*nothing was done/);
    expect(textOf(unknown)).to.not.contain("custody grant add");
    const huge = (await client.callTool({ name: TOOL, arguments: { note: 'a'.repeat(5000) } })) as CallToolResult;
    expect(huge.isError, textOf(huge)).to.equal(true);
    expect(textOf(huge)).to.match(/refused review-notes\/append \(arguments_too_large: .*note is 5000 UTF-8 bytes; at most 4096/);
    expect(journalLines(service).filter((l) => String(l.note).length === 5000)).to.have.length(0);
    // Arguments canonical JSON cannot carry (a lone surrogate) are a tool error saying what to send, not a JSON-RPC error.
    const lone = (await client.callTool({ name: TOOL, arguments: { note: 'half \ud800 a pair' } })) as CallToolResult;
    expect(lone.isError, textOf(lone)).to.equal(true);
    expect(textOf(lone)).to.match(/cannot take these arguments for review-notes\/append \(canonical_unsupported: .*nothing was done/);
    const badKey = (await client.callTool({ name: TOOL, arguments: { note: 'keyed', custody_request_id: 7 } })) as CallToolResult;
    expect(badKey.isError, textOf(badKey)).to.equal(true);
    expect(textOf(badKey)).to.match(/custody_request_id must be 1-128 letters, digits and _ \. : @ \/ \+ -.*; got number\. Nothing was done/);
    // The pattern the listing declares is held, for hosts that do not check input schemas: a space, 129 characters.
    for (const key of ['a b', 'k'.repeat(129)]) {
      const refusedKey = (await client.callTool({ name: TOOL, arguments: { note: 'keyed', custody_request_id: key } })) as CallToolResult;
      expect(refusedKey.isError, textOf(refusedKey)).to.equal(true);
      expect(textOf(refusedKey)).to.contain('Nothing was done');
    }
    expect(journalLines(service).filter((l) => l.note === 'keyed')).to.have.length(0);
    // Params that are not a call at all (arguments not an object) are JSON-RPC's invalid params, not an internal error.
    for (const args of [[1, 2], null, 'text']) {
      const invalid = await client.request({ method: 'tools/call', params: { name: TOOL, arguments: args as unknown as Record<string, unknown> } }, CallToolResultSchema).then(
        () => expect.fail('refused'),
        (error: unknown) => error as { code: number; message: string },
      );
      expect(invalid.code, JSON.stringify(args)).to.equal(ErrorCode.InvalidParams);
      expect(invalid.message).to.contain('Invalid tools/call request');
    }
    const atBound = (await client.callTool({ name: TOOL, arguments: { note: 'keyed at the bound', custody_request_id: 'k'.repeat(128) } })) as CallToolResult;
    expect(atBound.isError, textOf(atBound)).to.not.equal(true);
  });

  it('stops listing the tool once the grant runs out, and refuses the next call naming the tool', async () => {
    const remaining = async () => {
      const listed = await service.http('GET', '/v1/tools', undefined, 'agent');
      const entry = (listed.body as { tools: Array<{ tool: string; grants: Array<{ remaining_invocations: number }> }> }).tools.find((t) => t.tool === 'review-notes/append');
      return entry ? entry.grants.reduce((sum, g) => sum + g.remaining_invocations, 0) : 0;
    };
    let left = await remaining();
    expect(left).to.be.within(1, 3);
    for (let i = 0; left > 0; i++, left--) {
      const used = (await client.callTool({ name: TOOL, arguments: { note: `spend ${i}` } })) as CallToolResult;
      expect(used.isError, textOf(used)).to.not.equal(true);
    }
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).to.not.include(TOOL);
    const refused = (await client.callTool({ name: TOOL, arguments: { note: 'one too many' } })) as CallToolResult;
    expect(refused.isError).to.equal(true);
    expect(textOf(refused)).to.match(/review-notes\/append/).and.to.contain('custody grant add --tool review-notes/append');
    expect(textOf(refused).split('custody grant add').length - 1, 'the grant to add is named once').to.equal(1);
    expect(journalLines(service).filter((l) => l.note === 'one too many')).to.have.length(0);
    // A grant added, the same call is the same request and keeps its answer; the agent is told how to try again.
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/*', max_invocations: 2, ttl_ms: 3_600_000 })).status).to.equal(201);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // past the margin within which two calls count as one (outcome.ts askedBefore)
    const repeated = (await client.callTool({ name: TOOL, arguments: { note: 'one too many' } })) as CallToolResult;
    expect(repeated.isError).to.equal(true);
    expect(textOf(repeated)).to.contain('answer given at').and.to.contain('call with a new custody_request_id');
    expect(journalLines(service).filter((l) => l.note === 'one too many')).to.have.length(0);
    const anew = (await client.callTool({ name: TOOL, arguments: { note: 'one too many', custody_request_id: 'after-the-grant' } })) as CallToolResult;
    expect(anew.isError, textOf(anew)).to.not.equal(true);
    expect(journalLines(service).filter((l) => l.note === 'one too many')).to.have.length(1);
  });

  it('refuses the control token', async () => {
    const { client: wrong } = await connectMcp(['--url', `http://127.0.0.1:${service.port}`, '--token-file', service.paths.controlToken]);
    try {
      const error = await wrong.listTools().then(
        () => null,
        (e: Error) => e.message,
      );
      expect(error).to.match(/control token/);
      const call = (await wrong.callTool({ name: TOOL, arguments: { note: 'with control' } })) as CallToolResult;
      expect(call.isError).to.equal(true);
      expect(textOf(call)).to.match(/control token/);
    } finally {
      await wrong.close();
    }
  });

  it('tells an agent that repeats a completed call that nothing ran again, and how to run it again on purpose', async () => {
    // The default grant is spent by the test before: a grant of this test's own.
    expect((await service.http('POST', '/v1/grants', { tool: 'review-notes/append', max_invocations: 5, ttl_ms: 3_600_000 })).status).to.equal(201);
    const args = { note: 'said twice' };
    const first = (await client.callTool({ name: TOOL, arguments: args })) as CallToolResult;
    expect(first.structuredContent).to.include({ outcome: 'completed', repeated: false });
    expect(textOf(first)).to.not.contain('repeats');
    // At once: the first call has ended, so this one repeats it however soon it comes.
    const second = (await client.callTool({ name: TOOL, arguments: args })) as CallToolResult;
    expect(second.isError, textOf(second)).to.not.equal(true);
    const structured = second.structuredContent as { repeated: boolean; first_called_at: string; request_id: string };
    expect(structured.repeated).to.equal(true);
    expect(structured.request_id).to.equal((first.structuredContent as { request_id: string }).request_id);
    expect(structured.first_called_at).to.equal((first.structuredContent as { first_called_at: string }).first_called_at);
    expect(textOf(second)).to.contain(`this call repeats one first made at ${structured.first_called_at}`).and.to.contain('nothing ran again').and.to.contain('new custody_request_id');
    expect(journalLines(service).filter((l) => l.note === 'said twice')).to.have.length(1);
    // With a new key the same arguments run again, and that call is not a repeat.
    const anew = (await client.callTool({ name: TOOL, arguments: { ...args, custody_request_id: 'on-purpose-2' } })) as CallToolResult;
    expect(anew.structuredContent).to.include({ outcome: 'completed', repeated: false });
    expect(journalLines(service).filter((l) => l.note === 'said twice')).to.have.length(2);
  });
});

describe('custody mcp with a slow tool', function () {
  this.timeout(90_000);
  let service: TestService;
  let client: Client;

  before(async () => {
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR] } });
    await service.http('POST', '/v1/grants', { tool: 'fixture/sleep', max_invocations: 10, ttl_ms: 3_600_000 });
    await service.http('POST', '/v1/grants', { tool: 'fixture/keyed', max_invocations: 10, ttl_ms: 3_600_000 });
    ({ client } = await connectMcp(['--state', service.dir, '--wait', '1s']));
  });

  after(async () => {
    await client?.close();
    await service?.stop();
    service?.cleanup();
  });

  it("publishes the adapter's zod schema as the tool's input schema; a schema that declares custody_request_id is not offered", async () => {
    const { tools } = await client.listTools();
    // Every call takes custody_request_id away to name the request: that adapter would never see its own member.
    expect(tools.map((t) => t.name)).to.not.include('fixture__keyed');
    expect((await service.http('GET', '/v1/tools', undefined, 'agent')).body.tools).to.satisfy((listed: Array<{ tool: string }>) => listed.some((t) => t.tool === 'fixture/keyed'));
    const sleep = tools.find((t) => t.name === 'fixture__sleep');
    expect(sleep?.inputSchema.properties?.ms).to.deep.include({ type: 'integer', minimum: 0, maximum: 60_000 });
    expect(sleep?.annotations?.readOnlyHint).to.equal(true);
    // Only tools a grant covers are listed: fixture/hang is served but not granted.
    expect(tools.map((t) => t.name)).to.not.include('fixture__hang');
  });

  it('answers a call still running as "not known yet", saying how to ask again, and the same call later gets the outcome', async () => {
    const args = { ms: 4000 };
    const first = (await client.callTool({ name: 'fixture__sleep', arguments: args })) as CallToolResult;
    expect(first.isError).to.equal(true);
    expect(textOf(first)).to.match(/not known yet .* custody carries it on\. Ask again by calling the tool again with exactly the same arguments/);
    const requestId = (first.structuredContent as { request_id: string }).request_id;
    let answer = first;
    const deadline = Date.now() + 60_000;
    while (answer.isError === true && Date.now() < deadline) answer = (await client.callTool({ name: 'fixture__sleep', arguments: args })) as CallToolResult;
    expect(answer.isError, textOf(answer)).to.not.equal(true);
    expect(answer.structuredContent).to.deep.include({ request_id: requestId, outcome: 'completed', output: { slept: 4000 } });
    const ops = (await service.http('GET', '/v1/operations', undefined, 'agent')).body as { operations: Array<{ tool: string }> };
    expect(ops.operations.filter((op) => op.tool === 'fixture/sleep')).to.have.length(1);
  });
});

describe('custody mcp whose host closes stdin right after its call', function () {
  this.timeout(90_000);
  let service: TestService;

  before(async () => {
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR] } });
    await service.http('POST', '/v1/grants', { tool: 'fixture/sleep', max_invocations: 10, ttl_ms: 3_600_000 });
  });

  after(async () => {
    await service?.stop();
    service?.cleanup();
  });

  it('answers every call under way before it exits (`printf ... | custody mcp`): a call dropped at the close may have run, and its answer would be lost', async () => {
    const child = spawn(process.execPath, [CLI, 'mcp', '--state', service.dir, '--wait', '20s'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const exited = once(child, 'exit') as Promise<[number | null]>;
    const lines = [
      { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'pipe', version: '1' } } },
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'fixture__sleep', arguments: { ms: 1500 } } },
    ];
    child.stdin.end(lines.map((line) => JSON.stringify(line)).join('\n') + '\n');
    const [code] = await exited;
    expect(code, stderr).to.equal(0);
    const answers = stdout.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as { id?: number; result?: CallToolResult });
    const call = answers.find((answer) => answer.id === 2);
    expect(call?.result?.isError, stdout).to.not.equal(true);
    expect(call?.result?.structuredContent).to.deep.include({ outcome: 'completed', output: { slept: 1500 } });
    expect(stderr, 'the close was seen while the call ran').to.match(/"event":"mcp_input_closed","calls_under_way":1/);
  });
});

describe('custody mcp while custody is at its bound on requests in flight', function () {
  this.timeout(90_000);
  let service: TestService;
  let client: Client;
  let latchDir: string;

  before(async () => {
    latchDir = mkdtempSync(path.join(tmpdir(), 'custody-mcp-busy-'));
    service = await startService({ config: { executors: [FIXTURE_EXECUTOR], bounds: { max_requests_in_flight: 1 } } });
    await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 10, ttl_ms: 3_600_000 });
    ({ client } = await connectMcp(['--state', service.dir]));
  });

  after(async () => {
    await client?.close();
    await service?.stop();
    service?.cleanup();
    rmSync(latchDir, { recursive: true, force: true });
  });

  it('tells the agent custody is busy and to call again with the same arguments, nothing recorded, and the same call later runs', async () => {
    const latch = path.join(latchDir, 'go');
    const held = await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'holds-the-bound', arguments: { path: latch }, wait_ms: 0 }, 'agent');
    expect(held.status).to.equal(202);
    // The client behind custody mcp asks again a few times by itself (1.4 s); the latch stays shut longer than that.
    const busy = (await client.callTool({ name: 'fixture__sleep', arguments: { ms: 0 } })) as CallToolResult;
    expect(busy.isError).to.equal(true);
    expect(textOf(busy)).to.match(/custody is busy and did not take fixture\/sleep .* call the tool again in a moment with exactly the same arguments; nothing was recorded/);
    const { request_id: requestId, code } = busy.structuredContent as { request_id: string; code: string };
    expect(code).to.equal('service_busy');
    expect((await service.http('GET', `/v1/operations/${requestId}`, undefined, 'agent')).status, 'nothing recorded').to.equal(404);
    writeFileSync(latch, '');
    expect((await service.http('POST', '/v1/invoke', { tool: 'fixture/latch', request_id: 'holds-the-bound', arguments: { path: latch }, wait_ms: 20_000 }, 'agent')).body).to.include({ outcome: 'completed' });
    const again = (await client.callTool({ name: 'fixture__sleep', arguments: { ms: 0 } })) as CallToolResult;
    expect(again.isError, textOf(again)).to.not.equal(true);
    expect(again.structuredContent).to.deep.include({ request_id: requestId, outcome: 'completed' });
  });
});
