// The kernel as a child service: each kernel message kind goes to its
// decision through the one write queue (commit-queue.ts); an expiry sweep runs
// before every batch and on a timer. One typed handler per kind (shared/dispatch.ts).
import { canonicalBytes } from '../shared/canonical/jcs.js';
import { statSync } from 'node:fs';
import type { ChildIdentity, ChildPeer, ChildService } from '../shared/child/runtime.js';
import { nowMs } from '../shared/clock.js';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import { errorFields } from '../shared/log.js';
import { KERNEL_MESSAGES } from '../shared/protocol/kernel-messages.js';
import type { MessageKind, ResultOf } from '../shared/protocol/messages.js';
import { type HandlerMap, dispatch } from '../shared/dispatch.js';
import type { DirLock } from '../shared/store/dir-lock.js';
import { BatchSizes, HOLD_STATES, type StatsResult } from '../shared/protocol/stats.js';
import { CommitQueue, type Unit } from './commit-queue.js';
import { sweepExpired } from './decisions/expiry.js';
import { markUnknown } from './decisions/mark-unknown.js';
import { getOperation, listGrants, listOperations, recoverOperations } from './decisions/queries.js';
import { settle } from './decisions/settle.js';
import { reserve } from './decisions/reserve.js';
import { reserveStart } from './decisions/reserve-start.js';
import { start } from './decisions/start.js';
import { addGrant, revokeGrant } from './grants.js';
import { KERNEL_ID, type Kernel } from './kernel.js';
import { type KernelRotation, finishKernelRotation, listKeys, rotateKernel, rotatePin } from './rotation.js';
import { pinExecutor } from './pins.js';
import { grantView } from './views.js';

/** The kernel's kinds: its decisions (KERNEL_MESSAGES) and key rotation's (rotation.ts). */
type KernelKind = keyof typeof KERNEL_MESSAGES | 'pin.rotate' | 'kernel.rotate' | 'keys.list';

function isKernelKind(kind: MessageKind): kind is KernelKind {
  return kind === 'pin.rotate' || kind === 'kernel.rotate' || kind === 'keys.list' || Object.hasOwn(KERNEL_MESSAGES, kind);
}

export class KernelService implements ChildService {
  readonly identity: ChildIdentity;
  /**
   * The kernel's only client is the supervisor, whose channel bounds what it
   * sends (bounds.kernel_max_in_flight, 256 by default, at most 4096). A lower
   * bound here (the runtime's 64) refused the 65th concurrent request with
   * too_many_in_flight, which the supervisor retries only after a backoff.
   */
  readonly maxInFlight = 4096;
  readonly #kernel: Kernel;
  readonly #lock: DirLock;
  readonly #queue: CommitQueue;
  readonly #timer: NodeJS.Timeout;
  readonly #onReplaced: (error: CustodyError) => void;
  #peer: ChildPeer | null = null;
  /** The latest time a batch of this process was decided at, or kernel.db's mark (#decisionTime). */
  #highWater: number;
  #replaced: CustodyError | null = null;
  readonly #batches = new BatchSizes('kernel');
  readonly #handlers: HandlerMap<KernelKind>;

  constructor(kernel: Kernel, lock: DirLock, onReplaced: (error: CustodyError) => void = () => undefined) {
    this.#kernel = kernel;
    this.#lock = lock;
    this.#onReplaced = onReplaced;
    this.identity = { id: KERNEL_ID, keyEpoch: kernel.store.currentKernelEpoch().epoch, signer: kernel.signer };
    this.#highWater = kernel.store.clockHighWater();
    this.#queue = new CommitQueue({
      db: kernel.store.db,
      maxBatch: kernel.settings.commit_batch_max,
      clock: () => this.#decisionTime(),
      wallClock: nowMs,
      assertWritable: () => {
        lock.assertHeld();
        this.#assertSameFile();
      },
      assertNotRolledBack: () => this.#assertNotRolledBack(),
      beforeEachBatch: (context) => void sweepExpired(kernel, context),
      advanceHead: () => kernel.store.raiseHead(this.#highWater),
      headAdvanced: () => void this.#peer?.sendHead(kernel.store.head()),
      onCommitted: (units) => this.#batches.record(units),
      log: kernel.log,
    });
    this.#handlers = this.#handlersFor(kernel);
    this.#timer = setInterval(() => this.#sweepIfDue(), kernel.settings.sweep_interval_ms);
    this.#timer.unref();
  }

  /** The store head presented in the signed hello (docs/ROLLBACK.md). */
  head(): number {
    return this.#kernel.store.head();
  }

  attachPeer(peer: ChildPeer): void {
    this.#peer = peer;
  }

  /**
   * kernel.db's path must still name the file this process opened (one stat
   * per write batch): a store renamed or replaced while running takes no
   * decision, and the process is replaced so the next one opens what the path
   * names and presents its head.
   */
  #assertSameFile(): void {
    if (!this.#replaced) {
      const file = this.#kernel.store.file;
      let found: { dev: number; ino: number } | null;
      try {
        const stat = statSync(file.path);
        found = { dev: stat.dev, ino: stat.ino };
      } catch {
        found = null;
      }
      if (found && found.dev === file.dev && found.ino === file.ino) return;
      this.#replaced = new CustodyError(
        'store_replaced',
        `kernel store ${file.path} now names ${found ? `device ${found.dev} inode ${found.ino}` : 'nothing'}, not the file this process opened ` +
          `(device ${file.dev} inode ${file.ino}): it was renamed or replaced while running; no decision was written, and the kernel restarts on whatever the path names — put the original file back`,
      );
      this.#onReplaced(this.#replaced);
    }
    throw this.#replaced;
  }

  /** The same for a kernel.db whose head went back under this process (kernel-store.ts assertNotRolledBack). */
  #assertNotRolledBack(): void {
    if (this.#replaced) throw this.#replaced;
    try {
      this.#kernel.store.assertNotRolledBack();
    } catch (error) {
      this.#replaced = toCustodyError(error);
      this.#onReplaced(this.#replaced);
      throw this.#replaced;
    }
  }

  handle(kind: MessageKind, body: unknown): Promise<unknown> {
    if (kind === 'stats') return Promise.resolve(this.#stats());
    if (!isKernelKind(kind)) return Promise.reject(new CustodyError('unexpected_message', `the kernel does not serve ${kind}`));
    // The runtime has checked `body` against the kind's closed schema.
    return Promise.resolve(dispatch(this.#handlers, kind, body));
  }

  /** One handler per kernel kind, each typed by its schema; every decision goes through the write queue. */
  #handlersFor(kernel: Kernel): HandlerMap<KernelKind> {
    const submit = <T>(unit: Unit<T>) => this.#queue.submit(unit);
    return {
      reserve: (body) => {
        const request = this.#bounded('reserve', body);
        return submit((context) => reserve(kernel, request, context));
      },
      start: (body) => {
        const request = this.#bounded('start', body);
        return submit((context) => start(kernel, request, context));
      },
      reserve_start: (body) => {
        const request = this.#bounded('reserve_start', body);
        return submit((context) => reserveStart(kernel, request, context));
      },
      settle: (body) => submit((context) => settle(kernel, body, context)),
      mark_unknown: (body) => submit((context) => markUnknown(kernel, body, context)),
      'operation.get': (body) => submit(() => getOperation(kernel, body)),
      'ops.list': (body) => submit(() => listOperations(kernel, body)),
      recover: (body) => submit((context) => recoverOperations(kernel, body, context)),
      'grant.add': (body) => submit((context) => grantView(kernel, addGrant(kernel, body, context.now))),
      'grant.list': (body) => submit((context) => listGrants(kernel, body, context)),
      'grant.revoke': (body) => submit((context) => grantView(kernel, revokeGrant(kernel, body.capability_id, context.now))),
      'executor.pin': (body) =>
        submit((context) => {
          const pinned = pinExecutor(kernel, body, context);
          context.afterCommit('after_pin_commit');
          return pinned;
        }),
      'pin.rotate': (body) =>
        submit((context) => {
          const pinned = rotatePin(kernel, body, context);
          context.afterCommit('after_pin_rotate_commit');
          return pinned;
        }),
      'keys.list': (body) => submit(() => listKeys(kernel, body)),
      'kernel.rotate': () => this.#rotateKernel(kernel),
    };
  }

  /** A kernel key rotation (rotation.ts): decided through the write queue, the key file promoted after the commit. */
  #rotateKernel(kernel: Kernel): Promise<ResultOf<'kernel.rotate'>> {
    let rotation: KernelRotation | null = null;
    return this.#queue.submit((context) => (rotation = rotateKernel(kernel, kernel.dir, context))).then(
      (done) => {
        finishKernelRotation(kernel, kernel.dir, true, done);
        return done.result;
      },
      (error: unknown) => {
        finishKernelRotation(kernel, kernel.dir, false, rotation);
        throw error;
      },
    );
  }

  /** Reads only, outside the write queue: a scrape never waits behind decisions. */
  #stats(): StatsResult {
    const counts = new Map(this.#kernel.store.holds.countByState().map((row) => [row.state, row.count]));
    return { holds: HOLD_STATES.map((state) => ({ state, count: counts.get(state) ?? 0 })), commit_batches: this.#batches.entries() };
  }

  /** max_request_bytes bounds the RFC 8785 bytes of a reserve, start or reserve_start body, the requests that carry arguments. */
  #bounded<T>(kind: KernelKind, request: T): T {
    const bytes = canonicalBytes(request).length;
    const bound = this.#kernel.settings.max_request_bytes;
    if (bytes > bound) throw new CustodyError('body_too_large', `${kind} request is ${bytes} bytes (RFC 8785); max_request_bytes is ${bound}`);
    return request;
  }

  /**
   * The time a grant, a nonce or a window is judged at: max(clock, high-water
   * mark), the mark read from kernel.db at start and raised by every batch
   * since (schema version 11). A clock stepped back signed "allow" for a
   * grant it had just refused as expired. Signed windows still open at the
   * clock (UnitContext.wallNow): after a large step back the executor, by
   * its own mark, refuses them at once, instead of every request waiting for
   * the clock to catch up with the mark (docs/RELIABILITY.md).
   */
  #decisionTime(): number {
    this.#highWater = Math.max(nowMs(), this.#highWater);
    return this.#highWater;
  }

  /** The timer's half of the sweep: a batch runs only when some nonce has run out. */
  #sweepIfDue(): void {
    if (this.#kernel.store.nonces.expired(this.#decisionTime(), 1).length === 0) return;
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
