// The adapter host's side of its IPC channel: it validates arguments with
// the adapter's own schema and bounds, runs execute and reconcile, and
// forwards a cancel to the running call's AbortSignal. It decides nothing
// about claims or reports; the executor does, from these answers.
import { canonicalBytes } from '../../../shared/canonical/jcs.js';
import { type ErrorCode, toCustodyError } from '../../../shared/errors.js';
import type { JsonObject } from '../../../shared/protocol/common.js';
import { crashPoint } from '../../../shared/fault.js';
import { pausePoint } from '../../fault-pause.js';
import { type AdapterLog, type CustodyAdapter, DEFAULT_MAX_ARGUMENT_BYTES } from '../contract.js';
import type { HostRequest } from '../host-protocol.js';
import type { LoadedAdapter } from '../load.js';

export type HostSend = (message: Record<string, unknown>) => void;

class CallFailure extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export class HostServer {
  readonly #adapters: Map<string, LoadedAdapter>;
  readonly #send: HostSend;
  readonly #running = new Map<number, AbortController>();

  constructor(adapters: Map<string, LoadedAdapter>, send: HostSend) {
    this.#adapters = adapters;
    this.#send = send;
  }

  handle(request: HostRequest): void {
    if (request.type === 'cancel') {
      this.#running.get(request.id)?.abort(new Error('cancelled by the executor'));
      return;
    }
    void this.#answer(request.id, () => this.#call(request));
  }

  log(level: 'debug' | 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown> = {}): void {
    let safe: Record<string, unknown>;
    try {
      safe = JSON.parse(JSON.stringify(fields)) as Record<string, unknown>;
    } catch {
      safe = { unserializable: true };
    }
    this.#send({ type: 'log', level, event: event.slice(0, 128), fields: safe });
  }

  async #call(request: Exclude<HostRequest, { type: 'cancel' }>): Promise<unknown> {
    const adapter = this.#runnable(request.tool);
    const log: AdapterLog = (event, fields) => this.log('info', 'adapter_log', adapterLogFields(request.tool, event, fields));
    switch (request.type) {
      case 'validate':
        validateArguments(adapter, request.arguments);
        return { valid: true };
      case 'execute': {
        const controller = new AbortController();
        this.#running.set(request.id, controller);
        try {
          await pausePoint('pause_before_effect');
          const ended = await adapter.execute({
            operationKey: request.operation_key,
            arguments: request.arguments as JsonObject,
            signal: controller.signal,
            log,
          });
          // The effect happened; its answer has not left the host.
          crashPoint('adapter_host', 'after_effect');
          return ended;
        } catch (error) {
          throw new CallFailure('indeterminate', `${request.tool} threw during its effect: ${toCustodyError(error).message}`);
        } finally {
          this.#running.delete(request.id);
        }
      }
      case 'reconcile': {
        if (!adapter.reconcile) throw new CallFailure('indeterminate', `${request.tool} has no reconcile; it cannot tell whether its effect happened`);
        try {
          return await adapter.reconcile({ operationKey: request.operation_key, log });
        } catch (error) {
          throw new CallFailure('indeterminate', `${request.tool} reconcile threw: ${toCustodyError(error).message}`);
        }
      }
    }
  }

  #runnable(tool: string): CustodyAdapter {
    const loaded = this.#adapters.get(tool);
    if (!loaded) throw new CallFailure('adapter_unknown', `no adapter serves tool ${tool}`);
    if (!loaded.adapter) throw new CallFailure('adapter_contract_missing', `adapter ${tool} (${loaded.descriptor.source}) ${loaded.descriptor.problem ?? 'has no contract'}`);
    return loaded.adapter;
  }

  async #answer(id: number, work: () => Promise<unknown>): Promise<void> {
    try {
      const value = (await work()) ?? null;
      this.#send({ type: 'result', id, value: JSON.parse(JSON.stringify(value)) as unknown });
    } catch (error) {
      const code = error instanceof CallFailure ? error.code : 'indeterminate';
      this.#send({ type: 'failure', id, code, message: (error as Error).message.slice(0, 4000) });
    }
  }
}

/** Step 1's argument check: the adapter's byte bound, then its schema. Nothing is claimed yet. */
function validateArguments(adapter: CustodyAdapter, args: Record<string, unknown>): void {
  const max = adapter.maxArgumentBytes ?? DEFAULT_MAX_ARGUMENT_BYTES;
  const bytes = canonicalBytes(args).length;
  if (bytes > max) throw new CallFailure('arguments_too_large', `${adapter.tool} arguments are ${bytes} bytes of canonical JSON; at most ${max} are allowed`);
  let parsed: { success: boolean; error?: unknown };
  try {
    parsed = adapter.argumentSchema.safeParse(args);
  } catch (error) {
    throw new CallFailure('arguments_invalid', `${adapter.tool} argument schema threw: ${(error as Error).message}`);
  }
  if (parsed.success) return;
  const issues = issuesOf(parsed.error);
  const code: ErrorCode = issues.some((issue) => issue.code === 'too_big') ? 'arguments_too_large' : 'arguments_invalid';
  const detail = issues.length > 0 ? issues.slice(0, 3).map(describeIssue).join('; ') : String(parsed.error);
  throw new CallFailure(code, `${adapter.tool} arguments: ${detail}`);
}

interface Issue {
  readonly code?: unknown;
  readonly path?: unknown;
  readonly message?: unknown;
}

function issuesOf(error: unknown): Issue[] {
  const issues = (error as { issues?: unknown } | undefined)?.issues;
  return Array.isArray(issues) ? (issues as Issue[]) : [];
}

function describeIssue(issue: Issue): string {
  const where = Array.isArray(issue.path) && issue.path.length > 0 ? issue.path.join('.') : '(top)';
  return `${where}: ${typeof issue.message === 'string' ? issue.message : 'invalid'}`;
}

/**
 * Members of a log line that say whose line it is and what it means
 * (docs/PROTOCOL.md §11.7), which an adapter's own `log(event, fields)`
 * must not set: a field of that name is kept as `adapter_<name>`, so a
 * reader that trusts `role`, `pid` or `code` is never told another
 * process's or another event's.
 */
export const LOG_ENVELOPE: ReadonlySet<string> = new Set(['ts', 'level', 'role', 'pid', 'name', 'sid', 'component', 'event', 'code', 'message', 'cause', 'tool', 'adapter_event']);

/** The fields of an adapter's `log(event, fields)` line: its own, renamed where they would say whose line it is, then the tool and its event. */
export function adapterLogFields(tool: string, event: string, fields: Record<string, unknown> | undefined): Record<string, unknown> {
  return { ...ownFields(fields), tool, adapter_event: event };
}

export function ownFields(fields: Record<string, unknown> | undefined): Record<string, unknown> {
  const own: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields ?? {})) own[LOG_ENVELOPE.has(key) ? `adapter_${key}` : key] = value;
  return own;
}
