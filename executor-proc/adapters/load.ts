// Loading adapters in the adapter host: custody's built-ins, then each module
// named with --adapter on the executor's command line (the host's choice,
// never the supervisor's: nothing on the wire names a module). A module
// exports one adapter or an array of them as `default`, or an array as
// `adapters`. A tool name may be served once; a module cannot replace a
// built-in. An adapter whose contract is missing or incomplete is kept, so
// a call to it is refused by name (adapter_contract_missing), but it never runs.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { CustodyError } from '../../shared/errors.js';
import { toolName } from '../../shared/protocol/common.js';
import { z } from 'zod';
import type { JsonObject } from '../../shared/protocol/common.js';
import { type AdapterDescriptor, type CustodyAdapter, CONTRACTS, DEFAULT_MAX_ARGUMENT_BYTES } from './contract.js';
import type { HostConfig } from './host-protocol.js';
import { reviewNotesAdapter } from './review-notes.js';
import { cutText } from '../../shared/text/cut.js';

export interface LoadedAdapter {
  readonly descriptor: AdapterDescriptor;
  /** null when the adapter may not run (see descriptor.problem). */
  readonly adapter: CustodyAdapter | null;
}

type Warn = (event: string, fields: Record<string, unknown>) => void;

export interface LoadedAdapters {
  readonly adapters: Map<string, LoadedAdapter>;
  close(): void;
}

export async function loadAdapters(config: HostConfig, warn: Warn): Promise<LoadedAdapters> {
  const adapters = new Map<string, LoadedAdapter>();
  const builtIn = reviewNotesAdapter(config.resources, config.note_max_bytes, warn);
  register(adapters, builtIn, 'built-in');
  for (const modulePath of config.modules) {
    const resolved = path.resolve(modulePath);
    let exported: Record<string, unknown>;
    try {
      exported = (await import(pathToFileURL(resolved).href)) as Record<string, unknown>;
    } catch (error) {
      throw new CustodyError('config_invalid', `adapter module ${resolved} cannot be loaded: ${(error as Error).message}`, { cause: error });
    }
    const candidates: unknown[] = [exported.default, exported.adapters].flatMap((value: unknown): unknown[] =>
      Array.isArray(value) ? (value as unknown[]) : value === undefined ? [] : [value],
    );
    if (candidates.length === 0) {
      throw new CustodyError('config_invalid', `adapter module ${resolved} exports no adapter (expected a default export or an \`adapters\` array)`);
    }
    for (const candidate of candidates) register(adapters, candidate, resolved);
  }
  return { adapters, close: () => builtIn.close() };
}

function register(adapters: Map<string, LoadedAdapter>, candidate: unknown, source: string): void {
  if (typeof candidate !== 'object' || candidate === null) {
    throw new CustodyError('config_invalid', `adapter module ${source} exports ${candidate === null ? 'null' : typeof candidate}, not an adapter object`);
  }
  const object = candidate as Record<string, unknown>;
  const tool = toolName.safeParse(object.tool);
  if (!tool.success) {
    throw new CustodyError('config_invalid', `adapter in ${source} has tool ${JSON.stringify(object.tool)}; expected a tool name such as tickets/comment`);
  }
  if (adapters.has(tool.data)) {
    throw new CustodyError('config_invalid', `tool ${tool.data} is served twice (${adapters.get(tool.data)?.descriptor.source} and ${source}); each tool has one adapter`);
  }
  const problem = contractProblem(object);
  const deadline = object.deadlineMs;
  adapters.set(tool.data, {
    descriptor: {
      tool: tool.data,
      contract: problem === null ? (object.contract as CustodyAdapter['contract']) : null,
      problem,
      cancellable: object.cancellable === true,
      reconcilable: typeof object.reconcile === 'function',
      deadlineMs: typeof deadline === 'number' && Number.isSafeInteger(deadline) && deadline > 0 ? deadline : null,
      source,
      description: typeof object.description === 'string' ? cutText(object.description, 1024) : null,
      inputSchema: problem === null ? inputSchemaOf(object.argumentSchema) : null,
      maxArgumentBytes: typeof object.maxArgumentBytes === 'number' && problem === null ? object.maxArgumentBytes : DEFAULT_MAX_ARGUMENT_BYTES,
    },
    adapter: problem === null ? (object as unknown as CustodyAdapter) : null,
  });
}

/** Why an adapter may not run, or null when its contract is complete. */
function contractProblem(object: Record<string, unknown>): string | null {
  const contract = object.contract;
  if (typeof contract !== 'string' || !(CONTRACTS as readonly string[]).includes(contract)) {
    return `declares contract ${JSON.stringify(contract) ?? 'nothing'}; it must be one of ${CONTRACTS.join(', ')}`;
  }
  if (typeof object.execute !== 'function') return 'has no execute function';
  const schema = object.argumentSchema as { safeParse?: unknown } | undefined;
  if (typeof schema?.safeParse !== 'function') return 'has no argumentSchema with a safeParse function';
  if (contract === 'durable' && typeof object.reconcile !== 'function') {
    return 'declares durable but has no reconcile(operationKey); durable needs it';
  }
  for (const key of ['deadlineMs', 'maxArgumentBytes'] as const) {
    const value = object[key];
    if (value !== undefined && !(typeof value === 'number' && Number.isSafeInteger(value) && value > 0)) {
      return `has ${key} ${JSON.stringify(value)}; expected a positive integer`;
    }
  }
  if (object.cancellable !== undefined && typeof object.cancellable !== 'boolean') return 'has a non-boolean cancellable';
  return null;
}

/**
 * The argument schema as JSON Schema for clients (GET /v1/tools, `custody mcp`):
 * zod schemas convert (checks JSON Schema cannot say, such as a byte bound,
 * are left out, so the published schema admits a superset and the executor
 * still decides); anything else, or a schema that fails to convert, is null.
 */
function inputSchemaOf(schema: unknown): JsonObject | null {
  if (!(schema instanceof z.ZodType)) return null;
  try {
    const json = z.toJSONSchema(schema, { unrepresentable: 'any', io: 'input' }) as Record<string, unknown>;
    delete json.$schema;
    return JSON.parse(JSON.stringify(json)) as JsonObject;
  } catch {
    return null;
  }
}
