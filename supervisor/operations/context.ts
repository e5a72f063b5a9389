// What the operation steps need from the running service, gathered in one
// object so each step is a plain function of (context, request).
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import type { MessageKind, RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { ChildHandle } from '../children/child-handle.js';
import type { ExecutorPool } from '../children/pool.js';
import type { CustodyConfig } from '../config/schema.js';
import type { SupervisorStore } from '../store/supervisor-store.js';
import { Backoff } from './backoff.js';

export interface OperationContext {
  readonly store: SupervisorStore;
  readonly config: CustodyConfig;
  readonly log: Logger;
  readonly kernel: ChildHandle;
  /** The executor whose pinned identity id is `id`. */
  executorById(id: string): ChildHandle;
  /** The executors of each tool, and what is in flight on each (children/pool.ts); absent in tests that drive one executor. */
  readonly pool?: ExecutorPool;
  /** Carry an executor's rotation statements the kernel lacks (supervisor/rotation.ts); absent in tests without rotation. */
  readonly catchUpPin?: (executorId: string) => Promise<void>;
  /** Give an executor the kernel's rotation statements it lacks (kernel_key_unpinned, supervisor/rotation.ts); absent in tests without rotation. */
  readonly giveKernelKeys?: (executor: ChildHandle) => Promise<void>;
  /** Aborted when the service stops: steps stop waiting and leave the request where it is. */
  readonly signal: AbortSignal;
}

/** Transport failures: the request may or may not have been acted upon; asking again is safe for kernel calls. */
export const TRANSPORT_CODES: ReadonlySet<string> = new Set([
  'peer_exited',
  'channel_closed',
  'channel_poisoned',
  'deadline_exceeded',
  'service_unavailable',
  'too_many_in_flight',
  'shutting_down',
]);

export function isTransportFailure(error: unknown): boolean {
  return error instanceof CustodyError && TRANSPORT_CODES.has(error.code);
}

/** The backoff of every retry that waits for a peer: reconciliation, kernel requests, sends. */
export function retryBackoff(ctx: OperationContext): Backoff {
  return new Backoff({ initialMs: ctx.config.timing.retry_backoff_initial_ms, maxMs: ctx.config.timing.retry_backoff_max_ms, signal: ctx.signal });
}

/**
 * A kernel request, asked again after transport failures (a restarting or
 * hung kernel) until it answers or the service stops. Safe because every
 * kernel request is idempotent by request id and bytes (ARCHITECTURE.md §6.1). A
 * request quarantined meanwhile is refused before it is sent again.
 */
export async function askKernel<K extends MessageKind>(ctx: OperationContext, kind: K, body: RequestOf<K>, requestId?: string): Promise<ResultOf<K>> {
  const backoff = retryBackoff(ctx);
  for (;;) {
    if (ctx.signal.aborted) throw new CustodyError('shutting_down', 'the service is stopping');
    try {
      // Sent on behalf of `requestId`: a crash of the kernel with it in flight counts against it (quarantine.ts).
      return await ctx.kernel.request(kind, body, { timeoutMs: ctx.config.timing.kernel_request_ms, ...(requestId === undefined ? {} : { requestId }) });
    } catch (error) {
      if (!isTransportFailure(error) || ctx.kernel.state === 'failed') throw error;
      ctx.log.warn('kernel_retry', { kind, code: toCustodyError(error).code, attempt: backoff.attempts + 1 });
      await backoff.wait();
    }
  }
}
