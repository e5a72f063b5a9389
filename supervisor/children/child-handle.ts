// One configured child (the kernel, or one executor) across its processes.
// Every process gets a fresh session; a replacement starts only after the old
// process group is gone (the leader reaped, every member killed), which is
// the proof that it can no longer act. The child's directory lock is an OS
// lock that went with the process (shared/store/dir-lock.ts): nothing to clear.
// Crashes follow the OTP intensity; past it the child is failed. The
// supervisor's own deliberate kills (the watchdog) restart at once and do not
// count: they are not the child's failures. A failed child comes back on an
// operator's restart, or (an executor) by itself after
// restart.failed_cooldown_s, each time with a fresh intensity
// (ARCHITECTURE.md §7). The handle keeps the process lifecycle; restarts and
// their timers are restart-book.ts, the current process run.ts, kill, reap
// and the heartbeat supervisor/watchdog/.
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { CHILD_EXIT } from '../../shared/exit-codes.js';
import type { Logger } from '../../shared/log.js';
import type { ChildRole, JsonObject } from '../../shared/protocol/common.js';
import type { MessageKind, RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { defineMachine, Machine } from '../../shared/state-machine.js';
import { type ChildExit, type ChildSession, spawnChild } from '../../shared/child/spawn.js';
import type { FrameLimits } from '../../shared/wire/frame-reader.js';
import type { PinnedIdentity } from '../../shared/wire/hello.js';
import type { RequestOptions } from '../../shared/wire/client.js';
import { nowMs } from '../../shared/clock.js';
import type { RestartPolicy, Timing } from '../config/schema.js';
import type { SupervisorStore } from '../store/supervisor-store.js';
import { watchHeartbeat } from '../watchdog/heartbeat.js';
import { killAndReap, reapGroup, type StopWaits } from '../watchdog/reap.js';
import { type RollbackRecovery, assertRecoverable, checkHead } from './head-check.js';
import { InFlightRequests } from './in-flight.js';
import { RestartBook } from './restart-book.js';
import { Run } from './run.js';
import { SessionWaiters } from './session-waiters.js';
import { spawnOptionsFor } from './spawn-options.js';
import type { HeadWitnessStore } from './witness.js';
import { Slots } from './slots.js';

export type ChildState = 'stopped' | 'starting' | 'running' | 'backoff' | 'failed' | 'stopping';

export const CHILD_MACHINE = defineMachine<ChildState>('child', {
  stopped: ['starting', 'stopping'],
  starting: ['running', 'backoff', 'failed', 'stopping'],
  running: ['backoff', 'failed', 'stopping'],
  backoff: ['starting', 'failed', 'stopping'],
  stopping: ['stopped'],
  // failed → starting: `custody restart`, the failed executor's cool-down retry, or
  // `custody recover-rollback` (the operator's way back for a rolled-back ledger).
  failed: ['starting', 'stopping'],
});

export interface ChildSpec {
  readonly name: string;
  readonly role: ChildRole;
  readonly argv: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly settings: JsonObject;
  readonly pins: { readonly kernel: string | null };
  /** The child's local state directory, named in refusals (a rolled-back store); null for a remote child. */
  readonly storeDir: string | null;
  /** Operations in flight at once; control messages (ping, cancel, shutdown) come on top. */
  readonly maxInFlight: number;
}

export interface ChildDeps {
  readonly store: SupervisorStore;
  readonly log: Logger;
  readonly limits: FrameLimits;
  readonly timing: Timing;
  readonly restart: RestartPolicy;
  /** The witness of store heads (docs/ROLLBACK.md): a hello below it is refused. */
  readonly witness: HeadWitnessStore;
  /** The identity every hello must prove, from the pins recorded at init. */
  readonly pin: () => PinnedIdentity | null;
  /** The child exceeded its restart intensity or cannot prove its identity. */
  readonly onFailed: (child: ChildHandle, reason: CustodyError) => void;
  /**
   * Before a request attributed to a client request is sent: throw to refuse
   * it (a quarantined request is never sent again).
   */
  readonly admit?: (requestId: string) => void;
  /**
   * The process ended on its own, was poisoned or missed its heartbeat, with
   * these client requests in flight on it: attribute the crash to them.
   * `counted: false` restarts it without counting toward the intensity.
   */
  readonly onCrash?: (child: ChildHandle, requestIds: readonly string[], why: string) => { counted: boolean };
  /**
   * After the hello proved an identity and before the session serves
   * anything: key rotation's catch-up (supervisor/rotation.ts). A hello at a
   * newer key epoch than the pin is trusted only once this moved the pin
   * to it; throwing refuses the process (identity_mismatch fails the child).
   */
  readonly afterHello?: (child: ChildHandle, session: ChildSession) => Promise<void>;
  /** Where the child's stderr lines (its JSON log) go; default: this process's stderr, as they are. */
  readonly onStderrLine?: (child: ChildHandle, line: string) => void;
}

/** The lost-reply drill's exit status: the executor retained its report and did not answer, as an operator asked. */
export const DROP_REPLY_EXIT = CHILD_EXIT.dropReply;

export class ChildHandle {
  /** performance.now() when the running process said hello (uptimeMs). */
  #runningSince: number | null = null;
  readonly spec: ChildSpec;
  readonly slots: Slots;
  /** The deps, with the log scoped to this child. */
  readonly #deps: ChildDeps;
  readonly #machine: Machine<ChildState>;
  readonly #book: RestartBook;
  readonly #waiters = new SessionWaiters();
  readonly #requests: InFlightRequests;
  #run: Run | null = null;
  #spawning: Promise<void> | null = null;
  /** Abandons the start in progress: a stop does not wait out a hello (a store migration may take an hour). */
  #spawnAbort: AbortController | null = null;

  constructor(spec: ChildSpec, deps: ChildDeps) {
    this.spec = spec;
    this.slots = new Slots(spec.maxInFlight);
    const log = deps.log.child({ child: spec.name });
    this.#deps = { ...deps, log };
    this.#requests = new InFlightRequests(deps.admit);
    this.#machine = new Machine(CHILD_MACHINE, 'stopped', (from, to, reason) => {
      log.info('child_state', { from, to, reason });
      this.#book.record(this.session);
    });
    this.#book = new RestartBook(this, this.#machine, { ...this.#deps, spawn: () => this.#spawnTracked(null), failed: (reason) => this.#waiters.rejectAll(reason) });
  }

  get name(): string {
    return this.spec.name;
  }

  get state(): ChildState {
    return this.#machine.state;
  }

  get session(): ChildSession | null {
    return this.#run?.session ?? null;
  }

  get restarts(): number {
    return this.#book.restarts;
  }

  get startedAt(): number | null {
    return this.#book.startedAt;
  }

  /** How long this process has been running, on the monotonic clock (a stepped wall clock cannot make it negative); null when none runs. */
  get uptimeMs(): number | null {
    return this.session && this.#runningSince !== null ? Math.round(performance.now() - this.#runningSince) : null;
  }

  get failure(): CustodyError | null {
    return this.#book.failure;
  }

  /** When a failed executor is next retried by itself (ms since the epoch), or null. */
  get nextRetryAt(): number | null {
    return this.#book.nextRetryAt;
  }

  /**
   * An operator's restart: a failed child starts at once, afresh; one in
   * backoff starts now; a running one stops gracefully and starts again at
   * once, uncounted. Resolves once the new session proved its identity.
   */
  async restart(reason: string, graceMs: number): Promise<ChildSession> {
    const from = this.#machine.state;
    if (from === 'stopping' || from === 'stopped') throw new CustodyError('shutting_down', `${this.name} is ${from}; it is not restarted`);
    this.#deps.store.recordIncident({ child: this.name, kind: 'restart_requested', code: null, message: `${this.name} restart from ${from}: ${reason}` });
    const run = this.#run;
    if (from === 'failed') this.#book.startAfresh(reason);
    else if (from === 'backoff') this.#book.startNow(reason);
    else if (from === 'running' && run) await run.stop(reason, this.#stopWaits(graceMs), this.#deps.log);
    // starting: a start is already under way.
    return this.waitForSession(this.#deps.timing.hello_timeout_ms + graceMs);
  }

  /** Start the first process; resolves once its hello proved the pinned identity. */
  async start(): Promise<void> {
    this.#machine.moveTo('starting', 'start');
    await this.#spawnTracked(null);
  }

  /**
   * The operator's way back for a store refused as rolled back: start a
   * process again and, since its hello head is below the witness, let
   * `recovery` give it what it lost and raise its head before it serves.
   * Refused unless the child is failed for store_rolled_back.
   */
  async recoverRollback(recovery: RollbackRecovery): Promise<void> {
    assertRecoverable(this.name, this.#machine.state, this.#book.failure);
    this.#book.afresh();
    this.#machine.moveTo('starting', 'recover-rollback');
    await this.#spawnTracked(recovery);
  }

  /** The running session, waiting for a restart in progress; rejects when the child failed or stops. */
  waitForSession(timeoutMs: number): Promise<ChildSession> {
    if (this.#run && this.#machine.state === 'running') return Promise.resolve(this.#run.session);
    if (this.#machine.is('failed', 'stopping', 'stopped')) {
      return Promise.reject(this.#book.failure ?? new CustodyError('child_failed', `${this.name} is ${this.#machine.state}`));
    }
    return this.#waiters.wait(timeoutMs, () => new CustodyError('service_unavailable', `${this.name} has no running session after ${timeoutMs} ms`));
  }

  /** Send a request on the current session (waiting briefly for a restart). */
  async request<K extends MessageKind>(kind: K, body: RequestOf<K>, options: RequestOptions & { waitMs?: number; requestId?: string } = {}): Promise<ResultOf<K>> {
    const session = await this.waitForSession(options.waitMs ?? this.#deps.timing.hello_timeout_ms);
    return this.send(session, kind, body, options);
  }

  /** Send on a given session; on behalf of a client request (`requestId`), admitted first and counted for crash attribution (in-flight.ts). */
  send<K extends MessageKind>(session: ChildSession, kind: K, body: RequestOf<K>, options: RequestOptions & { requestId?: string } = {}): Promise<ResultOf<K>> {
    return this.#requests.send(session, kind, body, options);
  }

  /** Kill the process group and wait until it is gone; the next follows at once, uncounted, if `deliberate`, else by the restart policy. */
  async killAndReap(reason: string, options: { deliberate?: boolean; stoppedFromOutside?: boolean } = {}): Promise<void> {
    await this.#run?.killAndReap({ reason, deliberate: options.deliberate ?? false, stoppedFromOutside: options.stoppedFromOutside ?? false }, this.#deps.log);
  }

  /** Graceful stop: `shutdown`, wait up to the grace, then SIGKILL; resolves after the whole group is gone. */
  async stop(graceMs: number): Promise<void> {
    if (this.#machine.is('stopped')) return;
    this.#run?.stopHeartbeat();
    this.#book.clearTimers();
    if (!this.#machine.is('stopping')) this.#machine.moveTo('stopping', 'service stopping');
    // A spawn in progress is abandoned (killed before its hello) or, past its hello, sees `stopping` and kills what it started.
    this.#spawnAbort?.abort();
    await this.#spawning?.catch(() => undefined);
    const run = this.#run;
    if (run) {
      await run.stop('service stopping', this.#stopWaits(graceMs), this.#deps.log);
      await reapGroup(run.session, this.#deps.log);
    }
    this.#waiters.rejectAll(new CustodyError('shutting_down', `${this.name} is stopping`));
    this.#machine.moveTo('stopped', 'stopped');
  }

  #stopWaits(graceMs: number): StopWaits {
    return { graceMs, leaveMs: this.#deps.timing.heartbeat_timeout_ms };
  }

  #spawnTracked(recovery: RollbackRecovery | null): Promise<void> {
    const spawning = this.#spawn(recovery).finally(() => {
      if (this.#spawning === spawning) this.#spawning = null;
    });
    this.#spawning = spawning;
    return spawning;
  }

  /** The process of a start in progress exists: its row names it before its hello (supervisor.db `children`, for a successor). */
  recordSpawned(pid: number): void {
    this.#book.record(null, pid);
  }

  /** Start a process and serve with it, unless the child is stopping meanwhile. */
  async #spawn(recovery: RollbackRecovery | null): Promise<void> {
    const session = await this.#startProcess(recovery);
    if (this.#machine.is('stopping', 'stopped')) return killAndReap(session, this.#deps.log);
    this.#serve(session);
  }

  /** A process whose hello proved the pinned identity at a head not below the witness (docs/ROLLBACK.md); a failure goes to the restart book. */
  async #startProcess(recovery: RollbackRecovery | null): Promise<ChildSession> {
    try {
      const abort = (this.#spawnAbort = new AbortController());
      const session = await spawnChild(spawnOptionsFor(this, this.#deps, (reason, state) => this.#onChannelEnd(reason, state), abort.signal));
      // The way back sends authorizations the kernel signed, perhaps with a key rotated since the backup: the
      // restored ledger learns the rotated keys first, or it could verify none of them (signer_untrusted).
      let caughtUp = false;
      const recover: RollbackRecovery | null = recovery && (async (refused, witnessed) => {
        await this.#afterHello(refused);
        caughtUp = true;
        return recovery(refused, witnessed);
      });
      await checkHead(this.spec, this.#deps.witness, session, recover, this.#deps.log);
      if (!caughtUp) await this.#afterHello(session);
      return session;
    } catch (error) {
      const reason = toCustodyError(error, 'peer_exited');
      if (!this.#machine.is('stopping', 'stopped')) this.#book.startFailed(reason);
      throw reason;
    }
  }

  /** `running` on this process: its heartbeat, its session row, the exit watched, whoever waits answered. */
  #serve(session: ChildSession): void {
    this.#run = new Run(session, watchHeartbeat(this, session, this.#deps));
    this.#book.startedAt = nowMs();
    this.#runningSince = performance.now();
    this.#deps.store.openSession(session.sid, this.name, session.pid);
    this.#machine.moveTo('running', `pid ${session.pid}`);
    void session.exited.then((exit) => this.#onExit(session, exit));
    this.#waiters.resolveAll(session);
  }

  /** Catch-up of rotated keys (supervisor/rotation.ts); a process that cannot be caught up is killed and reaped before the refusal. */
  async #afterHello(session: ChildSession): Promise<void> {
    if (!this.#deps.afterHello) return;
    try {
      await this.#deps.afterHello(this, session);
    } catch (error) {
      await killAndReap(session, this.#deps.log);
      throw error;
    }
  }

  #onChannelEnd(reason: CustodyError, state: string): void {
    if (state !== 'poisoned') return;
    // A poisoned channel is never resumed: discard the process.
    this.#deps.store.recordIncident({ child: this.name, kind: 'channel_poisoned', code: reason.code, message: reason.message });
    this.#run?.discard(`channel poisoned: ${reason.code}`);
  }

  /** The process is gone: reap its group, close its session, and restart (the crash blamed on what was in flight) or not. */
  async #onExit(session: ChildSession, exit: ChildExit): Promise<void> {
    const run = this.#run;
    if (run?.session !== session) return;
    this.#run = null;
    run.stopHeartbeat();
    const how = exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
    const { intent } = run;
    await reapGroup(session, this.#deps.log);
    this.#deps.store.closeSession(session.sid, `${intent.reason} (${how})`);
    if (this.#machine.is('stopping', 'stopped')) return;
    // The lost-reply drill is an operator's request, and blames nobody.
    const inFlight = this.#requests.take(session);
    this.#book.exited({ pid: session.pid, how, code: exit.code, ...intent }, exit.code === DROP_REPLY_EXIT ? [] : inFlight);
  }
}
