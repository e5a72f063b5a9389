// Key rotation, carried by the supervisor (docs/PROTOCOL.md §12, docs/SECURITY.md
// "Rotating keys"). A key is made in the process that owns it; the
// supervisor only carries the statement the old key signed, and moves its own
// pins (supervisor.db) through the same statements, after the kernel did:
//
//   executor rotate — the executor rotates (durable before it answers), the
//     kernel pins the new epoch (pin.rotate), then supervisor.db;
//   kernel rotate — the kernel rotates, supervisor.db records it, then every
//     running executor re-pins the kernel key (kernel.rotated).
//
// A crash anywhere in between is caught up at the next hello: a hello at a
// newer epoch than supervisor.db's pin is trusted only once the child's own
// statements, verified from that pin, end at the hello's key (and an
// executor's were carried to the kernel); every executor is given the
// kernel's statements at each hello, so one stopped during a kernel rotation
// re-pins before it serves. One rotation or catch-up at a time.
import type { ChildSession } from '../shared/child/spawn.js';
import { nowMs } from '../shared/clock.js';
import { type EpochKey, verifyChain, verifyRotation } from '../shared/artifacts/rotation.js';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import { crashPoint } from '../shared/fault.js';
import type { Logger } from '../shared/log.js';
import type { MessageKind, RequestOf, ResultOf } from '../shared/protocol/messages.js';
import type { PinnedIdentity } from '../shared/wire/hello.js';
import { ROTATION_STATEMENTS_MAX } from '../shared/protocol/rotation-messages.js';
import type { ChildHandle } from './children/child-handle.js';
import type { Timing } from './config/schema.js';
import { isTransportFailure } from './operations/context.js';
import type { PinRow, SupervisorStore } from './store/supervisor-store.js';

export interface RotationDeps {
  readonly store: SupervisorStore;
  readonly log: Logger;
  readonly timing: Timing;
  readonly kernel: () => ChildHandle;
  readonly executors: () => ReadonlyMap<string, ChildHandle>;
  /** Aborted when the service stops. */
  readonly signal: AbortSignal;
  /** After a pin moved: settle what the rotation retired and nobody is carrying (Service.settleRetired). */
  readonly afterRotation?: () => void;
}

export interface ExecutorRotated {
  readonly name: string;
  readonly key_epoch: number;
  readonly public_key: string;
  readonly retired_epoch: number;
  readonly statement: string;
}

export interface KernelRotated {
  readonly key_epoch: number;
  readonly public_key: string;
  readonly retired_epoch: number;
  readonly statement: string;
  /** Each executor's kernel pin after the rotation; null: not running now, it re-pins at its next hello. */
  readonly executors: ReadonlyArray<{ readonly name: string; readonly kernel_epoch: number | null }>;
}

export class KeyRotation {
  readonly #deps: RotationDeps;
  #serial: Promise<unknown> = Promise.resolve();
  /** Kernel chains being given to an executor after a kernel_key_unpinned refusal, by executor name. */
  readonly #giving = new Map<string, Promise<void>>();

  constructor(deps: RotationDeps) {
    this.#deps = deps;
  }

  /** The identity a hello must prove: the pin, or a later epoch of it that afterHello then catches up. */
  pinFor(name: string): PinnedIdentity | null {
    const pin = this.#deps.store.getPin(name);
    return pin ? { id: pin.identity_id, publicKey: pin.public_key, keyEpoch: pin.key_epoch, acceptNewerEpoch: true } : null;
  }

  /** `custody executor rotate NAME`. */
  rotateExecutor(name: string): Promise<ExecutorRotated> {
    return this.#exclusive(async () => {
      const child = this.#deps.executors().get(name);
      if (!child) throw new CustodyError('not_found', `no executor named ${JSON.stringify(name)}; the executors are ${[...this.#deps.executors().keys()].join(', ')}`);
      const pin = await this.#caughtUp(child);
      const answer = await child.request('key.rotate', {}, { timeoutMs: this.#deps.timing.kernel_request_ms, waitMs: this.#deps.timing.hello_timeout_ms });
      // Durable at the executor now: from here a crash is caught up at its next hello.
      crashPoint('supervisor', 'after_executor_key_rotated');
      const { next } = verifyRotation(epochKeyOf(pin), answer.statement);
      await this.#pinAtKernel(answer.statement);
      this.#record(pin, next, answer.statement);
      this.#deps.log.info('executor_key_rotated', { executor: name, key_epoch: next.epoch, retired_epoch: pin.key_epoch });
      this.#deps.afterRotation?.();
      return { name, key_epoch: next.epoch, public_key: next.publicKey, retired_epoch: pin.key_epoch, statement: answer.statement };
    });
  }

  /** `custody kernel rotate`. */
  rotateKernel(): Promise<KernelRotated> {
    return this.#exclusive(async () => {
      const pin = await this.#caughtUp(this.#deps.kernel());
      const answer = await this.#deps.kernel().request('kernel.rotate', {}, { timeoutMs: this.#deps.timing.kernel_request_ms });
      crashPoint('supervisor', 'after_kernel_key_rotated');
      const { next } = verifyRotation(epochKeyOf(pin), answer.statement);
      this.#record(pin, next, answer.statement);
      this.#deps.log.info('kernel_key_rotated', { key_epoch: next.epoch, retired_epoch: pin.key_epoch });
      const executors = await this.#deliverKernelChain();
      this.#deps.afterRotation?.();
      return { key_epoch: next.epoch, public_key: next.publicKey, retired_epoch: pin.key_epoch, statement: answer.statement, executors };
    });
  }

  /**
   * ChildDeps.afterHello: catch a pin up to the hello (one at a time with
   * rotations), and give an executor the kernel's statements, which it
   * applies past its own kernel pin (idempotent, so no lock is needed).
   */
  async afterHello(child: ChildHandle, session: ChildSession): Promise<void> {
    if (session.hello.key_epoch > this.#pin(child.name).key_epoch) {
      await this.#exclusive(async () => {
        const pin = this.#pin(child.name);
        if (session.hello.key_epoch > pin.key_epoch) await this.#catchUp(child, session, pin);
      });
    }
    if (child.spec.role !== 'executor') return;
    const epoch = await this.#giveKernelChain(session);
    if (epoch !== null) this.#deps.log.info('executor_kernel_pin', { executor: child.name, kernel_epoch: epoch });
  }

  /**
   * The kernel refused a report as signed under an epoch it has not pinned
   * (epoch_unpinned): carry that executor's statements now (after any
   * rotation under way has finished).
   */
  catchUpPin(identityId: string): Promise<void> {
    return this.#exclusive(async () => {
      const child = [...this.#deps.executors().values()].find((handle) => this.#deps.store.getPin(handle.name)?.identity_id === identityId);
      if (!child) throw new CustodyError('executor_unknown', `no configured executor has the pinned identity ${identityId}`);
      const session = await child.waitForSession(this.#deps.timing.hello_timeout_ms);
      await this.#catchUp(child, session, this.#pin(child.name));
    });
  }

  /**
   * An executor refused an authorization as signed by a kernel key it has
   * not pinned (kernel_key_unpinned): give it the kernel's chain now, after
   * any rotation under way has recorded its statement. A kernel rotation
   * whose kernel.rotated did not reach a running executor (refused at its
   * bound, a timeout) is caught up by the first operation that needs it.
   */
  giveKernelKeys(child: ChildHandle): Promise<void> {
    // Every execute refused at once waits for the one delivery under way to this executor, not for one each in turn.
    const underWay = this.#giving.get(child.name);
    if (underWay) return underWay;
    const giving = this.#exclusive(async () => {
      const epoch = await this.#giveKernelChain(child, this.#deps.timing.hello_timeout_ms);
      this.#deps.log.info('executor_kernel_pin', { executor: child.name, kernel_epoch: epoch, why: 'kernel_key_unpinned' });
    }).finally(() => this.#giving.delete(child.name));
    this.#giving.set(child.name, giving);
    return giving;
  }

  /**
   * The pin a rotation starts from, caught up first: an earlier rotation the
   * child committed but supervisor.db did not record (its answer timed out,
   * supervisor.db was full) would otherwise make this one's statement, signed
   * by the unrecorded key, fail to verify from the pin for good.
   */
  async #caughtUp(child: ChildHandle): Promise<PinRow> {
    const session = await child.waitForSession(this.#deps.timing.hello_timeout_ms);
    await this.#catchUp(child, session, this.#pin(child.name));
    return this.#pin(child.name);
  }

  /** Verify the child's statements from the pin; an executor's go to the kernel first; then supervisor.db moves. */
  async #catchUp(child: ChildHandle, session: ChildSession, pin: PinRow): Promise<void> {
    const statements = await this.#statementsAfter(child, session, pin.key_epoch);
    let chain;
    try {
      chain = verifyChain(epochKeyOf(pin), statements);
    } catch (error) {
      throw new CustodyError('identity_mismatch', `${child.name} presents key epoch ${session.hello.key_epoch}, but its rotation statements do not lead there from the pinned epoch ${pin.key_epoch}: ${toCustodyError(error).message}`, { cause: error });
    }
    const { end, applied } = chain;
    const { hello } = session;
    if (end.epoch < hello.key_epoch || (end.epoch === hello.key_epoch && end.publicKey !== hello.public_key)) {
      throw new CustodyError(
        'identity_mismatch',
        `${child.name} proved key ${hello.public_key.slice(0, 16)}… epoch ${hello.key_epoch}; its rotation statements lead from the pinned epoch ${pin.key_epoch} only to ${end.publicKey.slice(0, 16)}… epoch ${end.epoch}`,
      );
    }
    let from = pin;
    for (const statement of applied) {
      if (child.spec.role === 'executor') await this.#pinAtKernel(statement.text);
      const next = { ...epochKeyOf(from), epoch: statement.body.new_epoch, publicKey: statement.body.new_public_key };
      this.#record(from, next, statement.text);
      from = this.#pin(child.name);
    }
    if (applied.length > 0) {
      this.#deps.store.recordIncident({ child: child.name, kind: 'key_rotation_caught_up', code: null, message: `${child.name} key epoch ${pin.key_epoch} → ${end.epoch}: ${applied.length} rotation statement(s) carried after a rotation cut short` });
      this.#deps.log.warn('key_rotation_caught_up', { child: child.name, from_epoch: pin.key_epoch, to_epoch: end.epoch });
      if (child.spec.role === 'kernel') void this.#deliverKernelChain();
      this.#deps.afterRotation?.();
    }
  }

  /** A child's own statements past `after`, paged (ROTATION_STATEMENTS_MAX a message), oldest first. */
  async #statementsAfter(child: ChildHandle, session: ChildSession, after: number): Promise<string[]> {
    const timeoutMs = this.#deps.timing.hello_timeout_ms;
    const statements: string[] = [];
    for (let from = after; ; ) {
      let page: string[];
      let current: number;
      if (child.spec.role === 'kernel') {
        const answer = await session.channel.request('keys.list', { after_epoch: from }, { timeoutMs });
        page = answer.kernel.flatMap((row) => (row.statement === null ? [] : [row.statement]));
        current = answer.kernel_epoch;
      } else {
        const answer = await session.channel.request('key.statements', { after_epoch: from }, { timeoutMs });
        page = answer.statements;
        current = answer.key_epoch;
      }
      statements.push(...page);
      from += page.length;
      if (page.length === 0 || from >= current) return statements;
    }
  }

  /**
   * The kernel's chain to one executor (kernel.rotated), in messages of at
   * most ROTATION_STATEMENTS_MAX, in order; the executor's kernel pin after
   * the last. The one way it is delivered: on the session a hello just
   * opened, or through the handle, waiting up to `waitMs` for a session.
   */
  async #giveKernelChain(to: ChildSession | ChildHandle, waitMs?: number): Promise<number | null> {
    const timeoutMs = this.#deps.timing.hello_timeout_ms;
    const send = (statements: string[]): Promise<ResultOf<'kernel.rotated'>> =>
      'channel' in to ? to.channel.request('kernel.rotated', { statements }, { timeoutMs }) : to.request('kernel.rotated', { statements }, { timeoutMs, waitMs });
    const chain = this.#deps.store.rotationsOf('kernel').map((row) => row.statement);
    let epoch: number | null = null;
    for (let at = 0; at < chain.length; at += ROTATION_STATEMENTS_MAX) epoch = (await send(chain.slice(at, at + ROTATION_STATEMENTS_MAX))).kernel_epoch;
    return epoch;
  }

  /** pin.rotate at the kernel, asked again across a kernel restart (it is idempotent). */
  async #pinAtKernel(statement: string): Promise<ResultOf<'pin.rotate'>> {
    return this.#askKernel('pin.rotate', { statement });
  }

  async #askKernel<K extends MessageKind>(kind: K, body: RequestOf<K>): Promise<ResultOf<K>> {
    const deadline = performance.now() + this.#deps.timing.hello_timeout_ms * 3;
    for (;;) {
      try {
        return await this.#deps.kernel().request(kind, body, { timeoutMs: this.#deps.timing.kernel_request_ms });
      } catch (error) {
        if (!isTransportFailure(error) || performance.now() > deadline || this.#deps.signal.aborted) throw error;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  }

  #record(from: PinRow, next: EpochKey, statement: string): void {
    const now = nowMs();
    this.#deps.store.rotatePin(
      { ...from, public_key: next.publicKey, key_epoch: next.epoch, pinned_at: now },
      { name: from.name, role: from.role, new_epoch: next.epoch, old_public_key: from.public_key, new_public_key: next.publicKey, statement, recorded_at: now },
    );
  }

  /** Every executor not failed or stopped re-pins the kernel key now; one that cannot be asked does it at its next hello. */
  async #deliverKernelChain(): Promise<Array<{ name: string; kernel_epoch: number | null }>> {
    const results: Array<{ name: string; kernel_epoch: number | null }> = [];
    for (const child of this.#deps.executors().values()) {
      if (child.state !== 'running' && child.state !== 'starting' && child.state !== 'backoff') {
        results.push({ name: child.name, kernel_epoch: null });
        continue;
      }
      try {
        const epoch = await this.#giveKernelChain(child, 2_000);
        results.push({ name: child.name, kernel_epoch: epoch });
      } catch (error) {
        this.#deps.log.warn('kernel_pin_deferred', { executor: child.name, ...{ code: toCustodyError(error).code } });
        results.push({ name: child.name, kernel_epoch: null });
      }
    }
    return results;
  }

  #pin(name: string): PinRow {
    const pin = this.#deps.store.getPin(name);
    if (!pin) throw new CustodyError('store_missing', `supervisor.db has no pin for ${name}; run custody init`);
    return pin;
  }

  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#serial.catch(() => undefined).then(work);
    this.#serial = run;
    return run;
  }
}

function epochKeyOf(pin: PinRow): EpochKey {
  return { role: pin.role, id: pin.identity_id, epoch: pin.key_epoch, publicKey: pin.public_key };
}
