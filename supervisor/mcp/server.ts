// `custody mcp`: a Model Context Protocol server on stdio that an agent host
// launches. It speaks to the running service with the agent token only
// (through the typed client, supervisor/client), lists as MCP tools the tools
// live grants cover (GET /v1/tools), and turns each tools/call into one
// governed invoke.
//
// Same call, same request: MCP clients resend a call with a new JSON-RPC id,
// so the request id is derived from what the call asks, not from the
// message: mcp-<first 32 hex of SHA-256 over the canonical JSON of
// {tool, arguments, key}>, where key is the optional `custody_request_id`
// argument (or `_meta["custody/request_id"]`), null when absent. Repeating a
// call with the same tool and arguments is therefore the same operation and
// gets the same answer: it never runs twice. To run the same arguments again
// on purpose, pass a new custody_request_id.
//
// stdout carries MCP messages only; logs are JSON lines on stderr.
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { STDIO_DEFAULT_MAX_BUFFER_SIZE } from '@modelcontextprotocol/sdk/shared/stdio.js';
import { CallToolRequestSchema, type CallToolResult, ErrorCode, ListToolsRequestSchema, McpError, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { describeIssues } from '../../shared/wire/session.js';
import { canonicalDigest } from '../../shared/canonical/digest.js';
import { artifactDigest, readEnvelope } from '../../shared/artifacts/artifact.js';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { IDENTIFIER_PATTERN, identifier } from '../../shared/protocol/common.js';
import { type Logger, errorFields } from '../../shared/log.js';
import type { CustodyClient, DriveAnswer } from '../client/index.js';
import { causeOf } from '../operations/causes.js';
import { askedBefore } from '../operations/outcome.js';
import { mcpNameOf, toolOfMcpName } from './names.js';
import { PassThrough, type Readable } from 'node:stream';
import { NOT_AN_OBJECT, decodeJsonObject } from '../../shared/wire/decode.js';

/** The argument an agent may add to any tool to name a call (stripped before the adapter sees the arguments). */
export const REQUEST_KEY_ARGUMENT = 'custody_request_id';
const REQUEST_KEY_META = 'custody/request_id';

/** tools/call as the SDK routes it, its params checked by the handler (CallToolRequestSchema) so a malformed call is -32602. */
const LOOSE_CALL_TOOL_REQUEST = CallToolRequestSchema.extend({ params: z.looseObject({ name: z.unknown() }) });

/** Outcomes that ended an operation without effect. */
const WITHOUT_EFFECT = new Set(['denied', 'start_denied', 'expired', 'released']);

/** Refusals for want of a live grant (causes.ts says what ends each: a grant added, or a start awaited). */
const GRANT_REFUSALS = new Set(['capability_unknown', 'capability_expired', 'capability_revoked', 'capability_not_yet_valid', 'tool_not_granted', 'subject_not_granted', 'budget_exhausted']);


export interface McpOptions {
  /** A client holding the agent token; asked for anew on each request (the service may have moved). */
  readonly client: () => CustodyClient;
  /** Runs before each request (custody mcp --token-file: refuse the control token); a failure answers the request with it. */
  readonly ready?: () => Promise<void>;
  readonly log: Logger;
  /** How long one call waits for its operation to end before answering "not known yet" (default 50 s, under the usual 60 s MCP request timeout). */
  readonly waitMs?: number;
  readonly version: string;
  /** Told of each tools/call and tools/list under way, to wait for it before closing (serveMcpOnStdio at stdin's end). */
  readonly track?: (call: Promise<unknown>) => void;
}

/** The request id a call gets: the same tool, arguments and key give the same id. */
export function requestIdFor(tool: string, args: Record<string, unknown>, key: string | null): string {
  return `mcp-${canonicalDigest({ tool, arguments: args, key }).slice(0, 32)}`;
}

/**
 * The tool's input schema with the optional request key added; null when the
 * adapter's own schema declares a member of that name, which every call
 * would take away before the adapter sees it (such a tool is not offered).
 */
function withRequestKey(schema: Record<string, unknown> | null): Tool['inputSchema'] | null {
  const base: Record<string, unknown> = schema ?? { type: 'object', additionalProperties: true };
  const properties = (base.properties as Record<string, unknown> | undefined) ?? {};
  if (Object.hasOwn(properties, REQUEST_KEY_ARGUMENT)) return null;
  return {
    ...base,
    type: 'object',
    properties: {
      ...properties,
      [REQUEST_KEY_ARGUMENT]: {
        type: 'string',
        pattern: IDENTIFIER_PATTERN.source,
        description: 'optional: names this call. The same tool and arguments are one operation (a retry never runs twice); give a new value to run the same arguments again.',
      },
    },
  };
}

function errorResult(text: string, structured?: Record<string, unknown>): CallToolResult {
  return { isError: true, content: [{ type: 'text', text }], ...(structured ? { structuredContent: structured } : {}) };
}

function receiptOf(answer: DriveAnswer): { id: string; digest: string; decision: string } | null {
  if (!answer.receipt) return null;
  const body = readEnvelope(answer.receipt).envelope.body as { receipt_id: string; decision: string };
  return { id: body.receipt_id, digest: artifactDigest(answer.receipt), decision: body.decision };
}

/**
 * What an agent is told: the output and receipt of a completed call; an error
 * with the cause otherwise. `calledAt` (ms since the epoch) is when this call
 * began: a request logged before it was made by an earlier call with the same
 * tool, arguments and key, and the agent is told so, since nothing ran again
 * (an agent that meant to run it twice learns to pass a new key).
 */
export function resultOf(tool: string, requestId: string, answer: DriveAnswer, calledAt = Number.POSITIVE_INFINITY): CallToolResult {
  const receipt = receiptOf(answer);
  // A service older than this build answers no created_at: then nothing is said of a repeat.
  const repeated = askedBefore(answer.created_at, calledAt);
  const firstCalledAt = Number.isSafeInteger(answer.created_at) ? new Date(answer.created_at).toISOString() : null;
  const structured = { request_id: requestId, operation_id: answer.operation_id, outcome: answer.outcome, phase: answer.phase, reason: answer.reason, receipt, output: answer.output ?? null, first_called_at: firstCalledAt, repeated };
  if (answer.final && answer.outcome === 'completed') {
    const text = typeof answer.output === 'string' ? answer.output : JSON.stringify(answer.output ?? null);
    const again = repeated
      ? [{ type: 'text' as const, text: `custody: this call repeats one first made at ${structured.first_called_at} with the same tool and arguments; this is that call's answer and nothing ran again. To run the same arguments again on purpose, call with a new ${REQUEST_KEY_ARGUMENT}.` }]
      : [];
    return {
      content: [
        { type: 'text', text },
        { type: 'text', text: `custody: completed as ${requestId}; receipt ${receipt?.id ?? 'none'} (sha256 ${receipt?.digest ?? '-'})` },
        ...again,
      ],
      structuredContent: structured,
    };
  }
  if ((answer.outcome && WITHOUT_EFFECT.has(answer.outcome)) || answer.phase === 'refused') {
    const cause = causeOf({ tool, request_id: requestId, reason: answer.reason, report: answer.report });
    // The same tool and arguments are the same request: its answer stays this refusal, whatever changed since.
    const again = repeated
      ? ` This is the answer given at ${firstCalledAt} to an earlier call with the same tool and arguments; to try again (after a grant was added, say), call with a new ${REQUEST_KEY_ARGUMENT}: nothing ran, so nothing can run twice.`
      : ` To try again later, call with a new ${REQUEST_KEY_ARGUMENT}: the same arguments alone get this answer again.`;
    return errorResult(`custody refused ${tool} (${answer.outcome ?? 'refused'}: ${answer.reason ?? 'no reason given'}${cause ? `: ${cause}` : ''}); nothing was done. Request ${requestId}.${again}`, structured);
  }
  if (answer.final) {
    return errorResult(
      `custody ended ${tool} as ${answer.outcome ?? 'unknown'} (${answer.reason ?? 'no reason given'}): the effect may have happened; an operator must look (custody trace ${requestId}). Do not call again with a new custody_request_id.`,
      structured,
    );
  }
  return errorResult(
    `the outcome of ${tool} is not known yet (request ${requestId} is ${answer.phase}${answer.reason ? `, last: ${answer.reason}` : ''}); custody carries it on. ` +
      'Ask again by calling the tool again with exactly the same arguments (and custody_request_id, if you gave one): it will not run twice.',
    structured,
  );
}

export function createMcpServer(options: McpOptions): McpServer {
  const { log } = options;
  const mcp = new McpServer({ name: 'custody', version: options.version }, { capabilities: { tools: {} } });
  // The tools come from the adapters' JSON Schemas at each listing, so the
  // list and call handlers are set on the protocol server directly
  // (McpServer.registerTool takes zod shapes fixed at start).
  /** A request's work, told to `track` (the drain at stdin's end) as it starts. */
  const tracked = <T>(work: Promise<T>): Promise<T> => {
    options.track?.(work);
    return work;
  };
  mcp.server.setRequestHandler(ListToolsRequestSchema, () => tracked(listTools()));
  const listTools = async (): Promise<{ tools: Tool[] }> => {
    await options.ready?.();
    const { tools, unavailable } = await options.client().tools();
    for (const { executor, reason } of unavailable) log.warn('mcp_executor_unavailable', { executor, reason });
    const listed: Tool[] = [];
    for (const tool of tools) {
      const mapped = mcpNameOf(tool.tool);
      if ('refused' in mapped) {
        log.warn('mcp_tool_not_offered', { tool: tool.tool, reason: mapped.refused });
        continue;
      }
      const inputSchema = withRequestKey(tool.input_schema);
      if (inputSchema === null) {
        log.warn('mcp_tool_not_offered', { tool: tool.tool, reason: `its argument schema declares ${REQUEST_KEY_ARGUMENT}, which custody mcp takes away from every call to name the request` });
        continue;
      }
      const remaining = tool.grants.reduce((sum, g) => sum + g.remaining_invocations, 0);
      listed.push({
        name: mapped.name,
        title: tool.tool,
        description: `${tool.description ?? `custody tool ${tool.tool}`}. Governed by custody: runs at most once per request under a grant (${remaining} invocation(s) left), with a signed receipt.`,
        inputSchema,
        // A tool that is not read-only acts on the world (a payment, a comment); hosts read these hints to decide what to run unasked.
        annotations: { readOnlyHint: tool.contract === 'read_only', idempotentHint: true, destructiveHint: tool.contract !== 'read_only', openWorldHint: tool.contract !== 'read_only' },
      });
    }
    return { tools: listed };
  };

  // Registered with a loose schema: the SDK's protocol layer answers a failure of the schema it is given as -32603
  // Internal error, while its tools/call check (and the one below) answers -32602 Invalid params, which is what
  // params that are not a call (arguments not an object) are.
  mcp.server.setRequestHandler(LOOSE_CALL_TOOL_REQUEST, (loose) => tracked(callTool(loose)));
  const callTool = async (loose: z.infer<typeof LOOSE_CALL_TOOL_REQUEST>): Promise<CallToolResult> => {
    const checked = CallToolRequestSchema.safeParse(loose);
    if (!checked.success) throw new McpError(ErrorCode.InvalidParams, `tools/call params: ${describeIssues(checked.error)}; arguments must be a JSON object of the tool's arguments`);
    const request = checked.data;
    const name = request.params.name;
    const tool = toolOfMcpName(name);
    if (tool === null) return errorResult(`no custody tool is named ${JSON.stringify(name)} (MCP names map / to __, e.g. review-notes__append); list the tools again`);
    const given = { ...(request.params.arguments ?? {}) };
    const metaKey = request.params._meta?.[REQUEST_KEY_META];
    const argKey = given[REQUEST_KEY_ARGUMENT];
    delete given[REQUEST_KEY_ARGUMENT];
    // The pattern the listed schema declares for the key is the one held here: a host that does not validate input schemas gets the same answer.
    // The argument wins over _meta, which is checked only when it names the key.
    for (const [where, value] of [[REQUEST_KEY_ARGUMENT, argKey], [`_meta.${REQUEST_KEY_META}`, argKey === undefined ? metaKey : undefined]] as const) {
      if (value !== undefined && (typeof value !== 'string' || !identifier.safeParse(value).success)) {
        const got = typeof value === 'string' ? JSON.stringify(value.slice(0, 80)) : typeof value;
        return errorResult(`${where} must be 1-128 letters, digits and _ . : @ / + -, starting with a letter or digit; got ${got}. Nothing was done: call again with a valid ${REQUEST_KEY_ARGUMENT}, or none.`);
      }
    }
    const key = typeof argKey === 'string' ? argKey : typeof metaKey === 'string' ? metaKey : null;
    let requestId: string;
    try {
      requestId = requestIdFor(tool, given, key);
    } catch (error) {
      // Arguments no canonical JSON can carry (a number past the doubles, a lone surrogate, nesting past the bound).
      const failure = toCustodyError(error);
      return errorResult(`custody cannot take these arguments for ${tool} (${failure.code}: ${failure.message}); nothing was done. Send plain JSON: finite numbers, well-formed text.`, { code: failure.code });
    }
    log.info('mcp_call', { tool, request_id: requestId });
    const calledAt = Date.now();
    try {
      await options.ready?.();
      const answer = await options.client().invoke({ tool, arguments: given, request_id: requestId, wait_ms: options.waitMs ?? 50_000 });
      return resultOf(tool, requestId, answer, calledAt);
    } catch (error) {
      const failure = toCustodyError(error);
      log.info('mcp_call_failed', { tool, request_id: requestId, ...errorFields(failure) });
      const structured = { request_id: requestId, code: failure.code };
      if (failure.code === 'service_busy') {
        return errorResult(
          `custody is busy and did not take ${tool} (${failure.message}). Request ${requestId}: call the tool again in a moment with exactly the same arguments; nothing was recorded for this call.`,
          structured,
        );
      }
      if (failure.errorClass === 'unreachable') {
        return errorResult(
          `custody could not be reached for ${tool} (${failure.code}: ${failure.message}). Request ${requestId}: call the tool again with exactly the same arguments once custody runs; it will not run twice.`,
          structured,
        );
      }
      if (failure.errorClass === 'unknown') {
        return errorResult(
          `the outcome of ${tool} is not known (${failure.code}: ${failure.message}). Request ${requestId}: ask again by calling the tool again with exactly the same arguments; it will not run twice.`,
          structured,
        );
      }
      if (GRANT_REFUSALS.has(failure.code)) {
        // What to do comes from causes.ts, as for a refusal answered above: the grant to add, or (not yet valid) when to ask again.
        const cause = causeOf({ tool, request_id: requestId, reason: failure.code });
        return errorResult(`no live grant covers ${tool} (${failure.code}: ${failure.message}); nothing was done.${cause ? ` ${cause}.` : ''}`, structured);
      }
      if (failure.errorClass === 'internal' || failure.errorClass === 'protocol') {
        // After the request was logged the service may still carry it: the same arguments find it, a new key could run it twice.
        return errorResult(
          `custody failed while handling ${tool} (${failure.code}; see the service log), and the call may have been recorded and may still run. ` +
            `Request ${requestId}: call the tool again with exactly the same arguments (and ${REQUEST_KEY_ARGUMENT}, if you gave one) to learn its outcome; it will not run twice. Do not change ${REQUEST_KEY_ARGUMENT}.`,
          structured,
        );
      }
      return errorResult(`custody refused ${tool} (${failure.code}: ${failure.message}); nothing was done`, structured);
    }
  };
  return mcp;
}

/** A line past this is refused (-32700) and skipped to its newline, never held: the SDK's own buffer bound, its newline included. */
export const MCP_LINE_MAX_BYTES = STDIO_DEFAULT_MAX_BUFFER_SIZE - 1;

/** How deep a message may nest: the service bounds a tool's arguments itself (bounds.max_depth), this only bounds the scan. */
const MCP_MAX_DEPTH = 128;

/**
 * The lines of `input` the SDK may read: each a JSON object in strict UTF-8
 * with no member named twice (docs/PROTOCOL.md §3: parsers disagree on which
 * of two they keep, so the arguments signed would not be the ones sent).
 * Anything else is answered here, -32700 (or -32600 for JSON that is not an
 * object) with id null, and never reaches a handler: the SDK would decode
 * bad bytes to U+FFFD and keep the last of two members, and say nothing of
 * a line it cannot parse.
 */
export function strictLines(input: Readable, answer: (error: Record<string, unknown>) => void, log: Logger): Readable {
  const out = new PassThrough();
  let held: Buffer[] = [];
  let heldBytes = 0;
  let skipping = false;
  const refuse = (code: number, message: string) => {
    log.warn('mcp_line_refused', { code, message });
    answer({ jsonrpc: '2.0', id: null, error: { code, message } });
  };
  const line = (bytes: Buffer) => {
    const text = bytes.at(-1) === 0x0d ? bytes.subarray(0, -1) : bytes;
    if (text.length === 0) return;
    try {
      decodeJsonObject(text, MCP_MAX_DEPTH, 'the message');
    } catch (error) {
      const failure = toCustodyError(error);
      refuse(failure.message.endsWith(NOT_AN_OBJECT) ? -32600 : -32700, failure.message);
      return;
    }
    out.write(Buffer.concat([text, Buffer.from('\n')]));
  };
  input.on('data', (chunk: Buffer) => {
    let start = 0;
    while (start < chunk.length) {
      const newline = chunk.indexOf(0x0a, start);
      const end = newline === -1 ? chunk.length : newline;
      if (!skipping) {
        held.push(chunk.subarray(start, end));
        heldBytes += end - start;
        if (heldBytes > MCP_LINE_MAX_BYTES) {
          refuse(-32700, `a message of more than ${MCP_LINE_MAX_BYTES} bytes; it is skipped`);
          held = [];
          heldBytes = 0;
          skipping = true;
        }
      }
      if (newline === -1) return;
      if (!skipping) line(Buffer.concat(held, heldBytes));
      held = [];
      heldBytes = 0;
      skipping = false;
      start = newline + 1;
    }
  });
  input.on('end', () => {
    // A last message without its newline is not one the SDK would read (it waits for the newline): said, never run,
    // since its answer could not be waited for once the input has ended.
    if (!skipping && heldBytes > 0) refuse(-32700, 'the input ended inside a message (no newline after it); it was not run');
    out.end();
  });
  input.on('error', (error) => out.destroy(error));
  return out;
}

/** Serve MCP on this process's stdin/stdout until stdin ends. */
export async function serveMcpOnStdio(options: McpOptions): Promise<void> {
  // A host that closes stdin after its last call (`printf '...' | custody mcp`, or a host shutting down) still
  // hears every call it made: one dropped at the close may have run, and its answer (and its request id) would be lost.
  const calls = new Set<Promise<unknown>>();
  const track = (call: Promise<unknown>) => {
    calls.add(call);
    void call.finally(() => calls.delete(call)).catch(() => undefined);
  };
  const mcp = createMcpServer({ ...options, track });
  const transport = new StdioServerTransport(strictLines(process.stdin, (answer) => process.stdout.write(`${JSON.stringify(answer)}\n`), options.log));
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    process.stdin.once('end', () => {
      if (calls.size > 0) options.log.info('mcp_input_closed', { calls_under_way: calls.size });
      void Promise.allSettled([...calls])
        // The SDK writes each answer once its handler's promise settles: one more turn, then close.
        .then(() => new Promise((next) => setImmediate(next)))
        .then(() => mcp.close())
        .then(resolve, resolve);
    });
  });
  await mcp.connect(transport);
  options.log.info('mcp_ready', {});
  await closed;
}

/** Refuse the control token: an agent host gets the agent token only (GET /v1/grants answers only the control token). */
export async function refuseControlToken(client: CustodyClient): Promise<void> {
  try {
    await client.grantsPage({ limit: 1 });
  } catch (error) {
    if (error instanceof CustodyError && error.code === 'forbidden') return;
    throw error;
  }
  throw new CustodyError('forbidden', 'custody mcp was given the control token; give it the agent token (<state>/supervisor/agent.token) — an agent must not hold the control token');
}
