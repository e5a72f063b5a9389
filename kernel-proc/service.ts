// The kernel as a child service: each kernel message kind goes to its
// decision through the one write queue (commit-queue.ts); an expiry sweep runs
// before every batch and on a timer. One exhaustive switch over the kinds.
import { canonicalBytes } from '../shared/canonical/jcs.js';
import { type ChildIdentity, type ChildService } from '../shared/child/runtime.js';
import { nowMs } from '../shared/clock.js';
import { CustodyError } from '../shared/errors.js';
import { errorFields } from '../shared/log.js';
import { KERNEL_MESSAGES } from '../shared/protocol/kernel-messages.js';
import { type MessageKind, type RequestOf } from '../shared/protocol/messages.js';
import { type DirLock } from '../shared/store/dir-lock.js';
import { BatchSizes, HOLD_STATES, type StatsResult } from '../shared/protocol/stats.js';
import { CommitQueue, type Unit } from './commit-queue.js';
import { sweepExpired } from './decisions/expiry.js';
import { markUnknown } from './decisions/mark-unknown.js';
import { getOperation, listGrants, listOperations, recoverOperations } from './decisions/queries.js';
import { reconcile } from './decisions/reconcile.js';
import { reserve } from './decisions/reserve.js';
import { start } from './decisions/start.js';
import { addGrant, revokeGrant } from './grants.js';
import { KERNEL_ID, KERNEL_KEY_EPOCH, type Kernel } from './kernel.js';
import { pinExecutor } from './pins.js';
import { grantView } from './views.js';

type KernelKind = keyof typeof KERNEL_MESSAGES;

function isKernelKind(kind: MessageKind): kind is KernelKind {
  return Object.hasOwn(KERNEL_MESSAGES, kind);
}

export class KernelService implements ChildService {
  readonly identity: ChildIdentity;
  readonly #kernel: Kernel;
  readonly #lock: DirLock;
  readonly #queue: CommitQueue;
  readonly #timer: NodeJS.Timeout;
  readonly #batches = new BatchSizes('kernel');

  constructor(kernel: Kernel, lock: DirLock) {
    this.#kernel = kernel;
    this.#lock = lock;
    this.identity = { id: KERNEL_ID, keyEpoch: KERNEL_KEY_EPOCH, signer: kernel.signer };
    this.#queue = new CommitQueue({
      db: kernel.store.db,
      maxBatch: kernel.settings.commit_batch_max,
      clock: nowMs,
      assertWritable: () => lock.assertHeld(),
      beforeEachBatch: (context) => void sweepExpired(kernel, context),
      onCommitted: (units) => this.#batches.record(units),
      log: kernel.log,
    });
    this.#timer = setInterval(() => this.#sweepIfDue(), kernel.settings.sweep_interval_ms);
    this.#timer.unref();
  }

  handle(kind: MessageKind, body: unknown): Promise<unknown> {
    if (kind === 'stats') return Promise.resolve(this.#stats());
    if (!isKernelKind(kind)) return Promise.reject(new CustodyError('unexpected_message', `the kernel does not serve ${kind}`));
    return this.#dispatch(kind, body);
  }

  #dispatch(kind: KernelKind, body: unknown): Promise<unknown> {
    const kernel = this.#kernel;
    // The runtime has checked `body` against the kind's closed schema.
    const submit = <T>(unit: Unit<T>) => this.#queue.submit(unit);
    switch (kind) {
      case 'reserve': {
        const request = this.#bounded(kind, body as RequestOf<'reserve'>);
        return submit((context) => reserve(kernel, request, context));
      }
      case 'start': {
        const request = this.#bounded(kind, body as RequestOf<'start'>);
        return submit((context) => start(kernel, request, context));
      }
      case 'reconcile':
        return submit((context) => reconcile(kernel, body as RequestOf<'reconcile'>, context));
      case 'mark_unknown':
        return submit((context) => markUnknown(kernel, body as RequestOf<'mark_unknown'>, context));
      case 'operation.get':
        return submit(() => getOperation(kernel, body as RequestOf<'operation.get'>));
      case 'ops.list':
        return submit(() => listOperations(kernel, body as RequestOf<'ops.list'>));
      case 'recover':
        return submit((context) => recoverOperations(kernel, body as RequestOf<'recover'>, context));
      case 'grant.add':
        return submit((context) => grantView(kernel, addGrant(kernel, body as RequestOf<'grant.add'>, context.now)));
      case 'grant.list':
        return submit(() => listGrants(kernel));
      case 'grant.revoke':
        return submit((context) => grantView(kernel, revokeGrant(kernel, (body as RequestOf<'grant.revoke'>).capability_id, context.now)));
      case 'executor.pin':
        return submit((context) => {
          const pinned = pinExecutor(kernel, body as RequestOf<'executor.pin'>, context.now);
          context.afterCommit('after_pin_commit');
          return pinned;
        });
      default: {
        const unhandled: never = kind;
        return Promise.reject(new CustodyError('unexpected_message', `the kernel has no handler for ${String(unhandled)}`));
      }
    }
  }

  /** Reads only, outside the write queue: a scrape never waits behind decisions. */
  #stats(): StatsResult {
    const counts = new Map(this.#kernel.store.holds.countByState().map((row) => [row.state, row.count]));
    return { holds: HOLD_STATES.map((state) => ({ state, count: counts.get(state) ?? 0 })), commit_batches: this.#batches.entries() };
  }

  /** max_request_bytes bounds the RFC 8785 bytes of a reserve or start body, the requests that carry arguments. */
  #bounded<T>(kind: KernelKind, request: T): T {
    const bytes = canonicalBytes(request).length;
    const bound = this.#kernel.settings.max_request_bytes;
    if (bytes > bound) throw new CustodyError('body_too_large', `${kind} request is ${bytes} bytes (RFC 8785); max_request_bytes is ${bound}`);
    return request;
  }

  /** The timer's half of the sweep: a batch runs only when some nonce has run out. */
  #sweepIfDue(): void {
    if (this.#kernel.store.nonces.expired(nowMs(), 1).length === 0) return;
    this.#queue.submit(() => undefined).catch((error: unknown) => this.#kernel.log.error('sweep_failed', errorFields(error)));
  }

  stopAccepting(): void {
    clearInterval(this.#timer);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    // A sweep the timer queued just before the end is not a request the runtime waits for.
    await this.#queue.drain();
    this.#kernel.store.close();
    await this.#lock.release();
  }
}
