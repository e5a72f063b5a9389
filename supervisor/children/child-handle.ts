// One configured child (the kernel, or one executor) across its processes.
// Every process gets a fresh session; a replacement starts only after the old
// process group is gone (the leader reaped, every member killed), which is
// the proof that it can no longer act. The child's directory lock is an OS
// lock that went with the process (shared/store/dir-lock.ts): nothing to clear.
// Crashes follow the OTP intensity; past it the child is failed. The
// supervisor's own deliberate kills (the watchdog) restart at once and do not
// count: they are not the child's failures. A failed child comes back on an
// operator's restart, or (an executor) by itself after
// restart.failed_cooldown_s, each time with a fresh intensity.
import { setTimeout as sleep } from 'node:timers/promises';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { CHILD_EXIT } from '../../shared/exit-codes.js';
import { type Logger, errorFields } from '../../shared/log.js';
import { type ChildRole, type JsonObject } from '../../shared/protocol/common.js';
import { type MessageKind, type RequestOf, type ResultOf } from '../../shared/protocol/messages.js';
import { defineMachine, Machine } from '../../shared/state-machine.js';
import { type ChildExit, type ChildSession, spawnChild } from '../../shared/child/spawn.js';
import { type FrameLimits } from '../../shared/wire/frame-reader.js';
import { type PinnedIdentity } from '../../shared/wire/hello.js';
import { type RequestOptions } from '../../shared/wire/client.js';
import { nowMs } from '../../shared/clock.js';
import { type RestartPolicy, type Timing } from '../config/schema.js';
import { type SupervisorStore } from '../store/supervisor-store.js';
import { startHeartbeat } from './heartbeat.js';
import { processStartTicks } from './proc-stat.js';
import { killGroupAndWait } from './process-group.js';
import { RestartIntensity } from './restart-intensity.js';
import { SessionWaiters } from './session-waiters.js';
import { type HeadWitnessStore, rolledBack } from './witness.js';
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

/** What the way back does on the refused process before its head is checked again (docs/ROLLBACK.md). */
export type RollbackRecovery = (session: ChildSession, witnessed: number) => Promise<number>;

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
  /** Where the child's stderr lines (its JSON log) go; default: this process's stderr, as they are. */
  readonly onStderrLine?: (child: ChildHandle, line: string) => void;
}

/** Why the current process is being killed; the first intent wins. */
interface KillIntent {
  readonly reason: string;
  /** The supervisor's own decision (the watchdog): restart at once, not counted as a crash. */
  readonly deliberate: boolean;
}

/** The lost-reply drill's exit status: the executor retained its report and did not answer, as an operator asked. */
export const DROP_REPLY_EXIT = CHILD_EXIT.dropReply;

/** How long a killed child's process group may take to empty before the restart goes ahead anyway. */
const GROUP_EXIT_WAIT_MS = 5000;

export class ChildHandle {
  readonly spec: ChildSpec;
  readonly slots: Slots;
  readonly #deps: ChildDeps;
  readonly #log: Logger;
  readonly #machine: Machine<ChildState>;
  #intensity: RestartIntensity;
  #session: ChildSession | null = null;
  #spawning: Promise<void> | null = null;
  #restarts = 0;
  #startedAt: number | null = null;
  #stopHeartbeat: (() => void) | null = null;
  #backoffTimer: NodeJS.Timeout | null = null;
  #cooldownTimer: NodeJS.Timeout | null = null;
  #nextRetryAt: number | null = null;
  readonly #waiters = new SessionWaiters();
  #failure: CustodyError | null = null;
  #lastExit: string | null = null;
  #kill: KillIntent | null = null;
  /** Per session, the client requests in flight on it (count of sends), kept when the channel ends under them. */
  readonly #inFlight = new WeakMap<ChildSession, Map<string, number>>();
  #recovery: RollbackRecovery | null = null;

  constructor(spec: ChildSpec, deps: ChildDeps) {
    this.spec = spec;
    this.slots = new Slots(spec.maxInFlight);
    this.#deps = deps;
    this.#log = deps.log.child({ child: spec.name });
    this.#intensity = new RestartIntensity(deps.restart);
    this.#machine = new Machine(CHILD_MACHINE, 'stopped', (from, to, reason) => {
      this.#log.info('child_state', { from, to, reason });
      this.#persist();
    });
  }

  get name(): string {
    return this.spec.name;
  }

  get state(): ChildState {
    return this.#machine.state;
  }

  get session(): ChildSession | null {
    return this.#session;
  }

  get restarts(): number {
    return this.#restarts;
  }

  get startedAt(): number | null {
    return this.#startedAt;
  }

  get failure(): CustodyError | null {
    return this.#failure;
  }

  /** When a failed executor is next retried by itself (ms since the epoch), or null. */
  get nextRetryAt(): number | null {
    return this.#nextRetryAt;
  }

  /**
   * Restart on request: a failed child starts at once with a fresh restart
   * intensity, one in backoff starts now, a running one stops gracefully
   * (shutdown, then SIGKILL after `graceMs`) and starts again at once,
   * uncounted. Resolves once the new session proved its identity.
   */
  async restart(reason: string, graceMs: number): Promise<ChildSession> {
    if (this.#machine.is('stopping', 'stopped')) throw new CustodyError('shutting_down', `${this.name} is ${this.#machine.state}; it is not restarted`);
    this.#deps.store.recordIncident({ child: this.name, kind: 'restart_requested', code: null, message: `${this.name} restart from ${this.#machine.state}: ${reason}` });
    const waitMs = this.#deps.timing.hello_timeout_ms + graceMs;
    switch (this.#machine.state) {
      case 'failed':
        this.#startAfresh(reason);
        break;
      case 'backoff':
        if (this.#backoffTimer) clearTimeout(this.#backoffTimer);
        this.#backoffTimer = null;
        this.#machine.moveTo('starting', reason);
        this.#spawnTracked().catch((error: unknown) => this.#log.warn('restart_failed', errorFields(error)));
        break;
      case 'running': {
        const session = this.#session;
        if (!session) break;
        this.#kill ??= { reason, deliberate: true };
        const answered = session.channel.request('shutdown', {}, { timeoutMs: graceMs }).catch(() => undefined);
        const exited = await Promise.race([session.exited.then(() => true), answered.then(() => sleep(graceMs)).then(() => false)]);
        if (!exited) session.kill('SIGKILL');
        await session.exited;
        break;
      }
      default:
        // starting: a start is already under way.
        break;
    }
    return this.waitForSession(waitMs);
  }

  /** Start the first process; resolves once its hello proved the pinned identity. */
  async start(): Promise<void> {
    this.#machine.moveTo('starting', 'start');
    await this.#spawnTracked();
  }

  /**
   * The operator's way back for a store refused as rolled back: start a
   * process again and, since its hello head is below the witness, let
   * `recovery` give it what it lost and raise its head before it serves.
   * Refused unless the child is failed for store_rolled_back.
   */
  async recoverRollback(recovery: RollbackRecovery): Promise<void> {
    if (!this.#machine.is('failed') || this.#failure?.code !== 'store_rolled_back') {
      throw new CustodyError(
        'bad_request',
        `${this.name} is ${this.#machine.state}${this.#failure ? ` (${this.#failure.code})` : ''}, not refused for a rolled-back store; there is nothing to recover`,
      );
    }
    this.#recovery = recovery;
    this.#failure = null;
    this.#intensity = new RestartIntensity(this.#deps.restart);
    try {
      this.#machine.moveTo('starting', 'recover-rollback');
      await this.#spawnTracked();
    } finally {
      this.#recovery = null;
    }
  }

  /** The running session, waiting for a restart in progress; rejects when the child failed or stops. */
  waitForSession(timeoutMs: number): Promise<ChildSession> {
    if (this.#session && this.#machine.state === 'running') return Promise.resolve(this.#session);
    if (this.#machine.is('failed', 'stopping', 'stopped')) {
      return Promise.reject(this.#failure ?? new CustodyError('child_failed', `${this.name} is ${this.#machine.state}`));
    }
    return this.#waiters.wait(timeoutMs, () => new CustodyError('service_unavailable', `${this.name} has no running session after ${timeoutMs} ms`));
  }

  /** Send a request on the current session (waiting briefly for a restart). */
  async request<K extends MessageKind>(
    kind: K,
    body: RequestOf<K>,
    options: RequestOptions & { waitMs?: number; requestId?: string } = {},
  ): Promise<ResultOf<K>> {
    const session = await this.waitForSession(options.waitMs ?? this.#deps.timing.hello_timeout_ms);
    return this.send(session, kind, body, options);
  }

  /**
   * Send on a given session on behalf of a client request (`requestId`): it
   * is admitted first (a quarantined request is refused here, after any
   * restart it waited for), and counted as in flight on this session until
   * it is answered. A request the channel's end took with it stays counted:
   * the crash is attributed to it (see #onExit).
   */
  send<K extends MessageKind>(session: ChildSession, kind: K, body: RequestOf<K>, options: RequestOptions & { requestId?: string } = {}): Promise<ResultOf<K>> {
    const { requestId, ...channelOptions } = options;
    if (requestId === undefined) return session.channel.request(kind, body, channelOptions);
    try {
      this.#deps.admit?.(requestId);
    } catch (error) {
      return Promise.reject(toCustodyError(error));
    }
    if (session.channel.state !== 'open') return session.channel.request(kind, body, channelOptions);
    let inFlight = this.#inFlight.get(session);
    if (!inFlight) this.#inFlight.set(session, (inFlight = new Map<string, number>()));
    const table = inFlight;
    table.set(requestId, (table.get(requestId) ?? 0) + 1);
    const done = () => {
      const left = (table.get(requestId) ?? 1) - 1;
      if (left > 0) table.set(requestId, left);
      else table.delete(requestId);
    };
    return session.channel.request(kind, body, channelOptions).then(
      (result) => {
        done();
        return result;
      },
      (error: unknown) => {
        // Still open: answered with an error, or given up on (a deadline); not lost to the channel's end.
        if (session.channel.state === 'open') done();
        throw error;
      },
    );
  }

  /**
   * Kill the current process group with SIGKILL and wait until it is gone.
   * A fresh session follows: at once, uncounted, when the kill is the
   * supervisor's own decision; by the restart policy otherwise.
   */
  async killAndReap(reason: string, options: { deliberate?: boolean } = {}): Promise<void> {
    const session = this.#session;
    if (!session) return;
    this.#kill ??= { reason, deliberate: options.deliberate ?? false };
    session.kill('SIGKILL');
    await session.exited;
    await killGroupAndWait(session.pid, GROUP_EXIT_WAIT_MS);
  }

  /** Graceful stop: `shutdown`, wait up to the grace, then SIGKILL; resolves after the whole group is gone. */
  async stop(graceMs: number): Promise<void> {
    if (this.#machine.is('stopped')) return;
    this.#clearTimers();
    if (!this.#machine.is('stopping')) this.#machine.moveTo('stopping', 'service stopping');
    // A spawn in progress finishes first; it sees `stopping` and kills what it started.
    await this.#spawning?.catch(() => undefined);
    const session = this.#session;
    if (session) {
      this.#kill ??= { reason: 'service stopping', deliberate: true };
      const answered = session.channel.request('shutdown', {}, { timeoutMs: graceMs }).catch(() => undefined);
      const exited = await Promise.race([session.exited.then(() => true), answered.then(() => sleep(graceMs)).then(() => false)]);
      if (!exited) session.kill('SIGKILL');
      await session.exited;
      await this.#reap(session);
    }
    this.#waiters.rejectAll(new CustodyError('shutting_down', `${this.name} is stopping`));
    this.#machine.moveTo('stopped', 'stopped');
  }

  #spawnTracked(): Promise<void> {
    const spawning = this.#spawn().finally(() => {
      if (this.#spawning === spawning) this.#spawning = null;
    });
    this.#spawning = spawning;
    return spawning;
  }

  async #spawn(): Promise<void> {
    const { spec } = this;
    let session: ChildSession;
    try {
      session = await spawnChild({
        argv: spec.argv,
        ...(spec.env ? { env: spec.env } : {}),
        role: spec.role,
        name: spec.name,
        mode: 'serve',
        pins: spec.pins,
        settings: spec.settings,
        limits: this.#deps.limits,
        expect: this.#deps.pin(),
        // Room for control messages (ping, cancel, shutdown) above the operations' slots.
        maxInFlight: spec.maxInFlight + 8,
        helloTimeoutMs: this.#deps.timing.hello_timeout_ms,
        log: this.#deps.log,
        onStderrLine: (line) => this.#forwardStderr(line),
        onChannelEnd: (reason, state) => this.#onChannelEnd(reason, state),
        onHead: (head) => this.#onHead(head),
      });
      await this.#checkHead(session);
    } catch (error) {
      const reason = toCustodyError(error, 'peer_exited');
      if (this.#machine.is('stopping', 'stopped')) throw reason;
      this.#deps.store.recordIncident({ child: spec.name, kind: reason.code === 'store_rolled_back' ? 'store_rolled_back' : 'start_failed', code: reason.code, message: reason.message });
      // A rolled-back store is refused for good: restarting it would only be refused again (docs/ROLLBACK.md).
      if (reason.code === 'identity_mismatch' || reason.code === 'hello_invalid' || reason.code === 'store_rolled_back') {
        this.#fail(reason);
        throw reason;
      }
      // A previous process of this child still holds its store (a remote
      // executor still finishing an effect): not a crash, only not yet.
      this.#afterExit(`start failed: ${reason.code}`, reason.code === 'store_locked' ? { counted: false, delayMs: this.#deps.restart.backoff_max_ms } : { counted: true });
      throw reason;
    }
    if (this.#machine.is('stopping', 'stopped')) {
      session.kill('SIGKILL');
      await session.exited;
      await this.#reap(session);
      return;
    }
    this.#session = session;
    this.#startedAt = nowMs();
    this.#kill = null;
    this.#deps.store.openSession(session.sid, spec.name, session.pid);
    this.#machine.moveTo('running', `pid ${session.pid}`);
    void session.exited.then((exit) => this.#onExit(session, exit));
    this.#stopHeartbeat = startHeartbeat(session, this.#deps.timing, () => {
      if (this.#session !== session) return;
      this.#deps.store.recordIncident({ child: this.name, kind: 'heartbeat_missed', code: 'deadline_exceeded', message: `${this.name} did not answer ping within ${this.#deps.timing.heartbeat_timeout_ms} ms` });
      void this.killAndReap('heartbeat missed');
    });
    this.#waiters.resolveAll(session);
  }

  /**
   * The hello's head against the witness (docs/ROLLBACK.md): below it, the
   * process is killed and reaped before anything is asked of it, and the
   * start fails with store_rolled_back; at or above it, it becomes the witness.
   */
  async #checkHead(session: ChildSession): Promise<void> {
    const witnessed = this.#deps.witness.head(this.name);
    if (session.hello.head >= witnessed) {
      this.#deps.witness.recordNow(this.name, session.hello.head);
      return;
    }
    let recoveryFailed = '';
    if (this.#recovery) {
      try {
        const raised = await this.#recovery(session, witnessed);
        if (raised >= witnessed) {
          this.#deps.witness.recordNow(this.name, raised);
          return;
        }
        recoveryFailed = `; recover-rollback left its head at ${raised}`;
      } catch (error) {
        recoveryFailed = `; recover-rollback failed: ${toCustodyError(error).message}`;
      }
    }
    session.kill('SIGKILL');
    await session.exited;
    await killGroupAndWait(session.pid, GROUP_EXIT_WAIT_MS);
    const store = this.spec.storeDir ? `${this.spec.storeDir}/${this.spec.role === 'kernel' ? 'kernel.db' : 'ledger.db'}` : `(remote ${this.spec.role} ${this.name})`;
    const refusal = rolledBack(this.name, this.spec.role, store, session.hello.head, witnessed);
    throw recoveryFailed ? new CustodyError('store_rolled_back', refusal.message + recoveryFailed) : refusal;
  }

  /**
   * A head frame, group-committed (docs/ROLLBACK.md): the kernel's goes with
   * the request write that follows its decision, before the supervisor acts
   * on it; an executor waits for head.witnessed, sent once it is durable.
   */
  #onHead(head: number): Promise<void> {
    const durable = this.#deps.witness.record(this.name, head);
    durable.catch((error: unknown) => this.#log.error('witness_not_recorded', { head, ...errorFields(error) }));
    return durable;
  }

  #onChannelEnd(reason: CustodyError, state: string): void {
    if (state !== 'poisoned') return;
    // A poisoned channel is never resumed: discard the process.
    this.#deps.store.recordIncident({ child: this.name, kind: 'channel_poisoned', code: reason.code, message: reason.message });
    this.#kill ??= { reason: `channel poisoned: ${reason.code}`, deliberate: false };
    this.#session?.kill('SIGKILL');
  }

  async #onExit(session: ChildSession, exit: ChildExit): Promise<void> {
    if (this.#session !== session) return;
    this.#session = null;
    this.#stopHeartbeat?.();
    this.#stopHeartbeat = null;
    const how = exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
    const intent = this.#kill ?? { reason: 'exited on its own', deliberate: false };
    await this.#reap(session);
    this.#deps.store.closeSession(session.sid, `${intent.reason} (${how})`);
    if (this.#machine.is('stopping', 'stopped')) return;
    this.#deps.store.recordIncident({ child: this.name, kind: 'child_exit', code: exit.code === 70 ? 'channel_poisoned' : null, message: `${this.name} pid ${session.pid} ${how}: ${intent.reason}` });
    this.#lastExit = `${how}: ${intent.reason}`;
    this.#persist();
    if (intent.deliberate) {
      this.#afterExit(this.#lastExit, { counted: false, delayMs: 0 });
      return;
    }
    // Not the supervisor's decision: a crash, a poisoning or a missed heartbeat.
    // The client requests in flight on it at that moment share the blame
    // (the lost-reply drill is an operator's request, and blames nobody).
    const blamed = exit.code === DROP_REPLY_EXIT ? [] : [...(this.#inFlight.get(session)?.keys() ?? [])];
    this.#inFlight.delete(session);
    const verdict = blamed.length > 0 && this.#deps.onCrash ? this.#deps.onCrash(this, blamed, this.#lastExit) : { counted: true };
    this.#afterExit(this.#lastExit, verdict.counted ? { counted: true } : { counted: false, delayMs: this.#deps.restart.backoff_initial_ms });
  }

  /** The leader is reaped; make sure nothing of its group is left. */
  async #reap(session: ChildSession): Promise<void> {
    const emptied = await killGroupAndWait(session.pid, GROUP_EXIT_WAIT_MS);
    if (!emptied) this.#log.error('process_group_survived', { pid: session.pid, waited_ms: GROUP_EXIT_WAIT_MS });
  }

  /** The process is gone or never came up: restart (with backoff, counted as a crash or not), or fail. */
  #afterExit(why: string, how: { counted: true } | { counted: false; delayMs: number }): void {
    if (this.#machine.is('stopping', 'stopped', 'failed')) return;
    let delayMs: number;
    if (how.counted) {
      const decision = this.#intensity.next(nowMs());
      if (!decision.restart) {
        this.#fail(new CustodyError('child_failed', `${this.name} failed: ${decision.reason} (last: ${why})`));
        return;
      }
      delayMs = decision.delayMs;
    } else {
      delayMs = how.delayMs;
    }
    this.#restarts++;
    this.#machine.moveTo('backoff', `${why}; restart in ${delayMs} ms`);
    this.#backoffTimer = setTimeout(() => {
      this.#backoffTimer = null;
      if (!this.#machine.is('backoff')) return;
      this.#machine.moveTo('starting', `restart ${this.#restarts}`);
      this.#spawnTracked().catch((error: unknown) => this.#log.warn('restart_failed', errorFields(error)));
    }, delayMs);
  }

  #fail(reason: CustodyError): void {
    if (this.#machine.is('failed')) return;
    this.#failure = reason;
    this.#clearTimers();
    this.#deps.store.recordIncident({ child: this.name, kind: 'child_failed', code: reason.code, message: reason.message });
    // An executor failed for good is tried again after a cool-down; a failed kernel stops the service instead.
    if (this.spec.role === 'executor') {
      const cooldownMs = this.#deps.restart.failed_cooldown_s * 1000;
      this.#nextRetryAt = nowMs() + cooldownMs;
      this.#cooldownTimer = setTimeout(() => {
        this.#cooldownTimer = null;
        if (!this.#machine.is('failed')) return;
        this.#deps.store.recordIncident({
          child: this.name,
          kind: 'cooldown_restart',
          code: this.#failure?.code ?? null,
          message: `${this.name} restarted ${this.#deps.restart.failed_cooldown_s} s after it failed (restart.failed_cooldown_s); it failed with: ${this.#failure?.message ?? 'unknown'}`,
        });
        this.#startAfresh('restart.failed_cooldown_s passed');
      }, cooldownMs);
    }
    this.#machine.moveTo('failed', reason.message);
    this.#waiters.rejectAll(reason);
    this.#deps.onFailed(this, reason);
  }

  /** Out of `failed`: a fresh restart intensity, no failure, a new process. */
  #startAfresh(reason: string): void {
    this.#clearTimers();
    this.#intensity = new RestartIntensity(this.#deps.restart);
    this.#failure = null;
    this.#restarts++;
    this.#machine.moveTo('starting', reason);
    this.#spawnTracked().catch((error: unknown) => this.#log.warn('restart_failed', errorFields(error)));
  }

  #clearTimers(): void {
    this.#stopHeartbeat?.();
    this.#stopHeartbeat = null;
    if (this.#backoffTimer) clearTimeout(this.#backoffTimer);
    this.#backoffTimer = null;
    if (this.#cooldownTimer) clearTimeout(this.#cooldownTimer);
    this.#cooldownTimer = null;
    this.#nextRetryAt = null;
  }

  #forwardStderr(line: string): void {
    if (this.#deps.onStderrLine) this.#deps.onStderrLine(this, line);
    else process.stderr.write(line + '\n');
  }

  #persist(): void {
    const session = this.#session;
    this.#deps.store.recordChild({
      name: this.name,
      role: this.spec.role,
      state: this.#machine.state,
      pid: session?.pid ?? null,
      pid_start_ticks: session ? (processStartTicks(session.pid) ?? null) : null,
      sid: session?.sid ?? null,
      restarts: this.#restarts,
      started_at: this.#startedAt,
      last_exit: this.#lastExit,
    });
  }
}
