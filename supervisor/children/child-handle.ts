// One configured child (the kernel, or one executor) across its processes.
// Every process gets a fresh session; a replacement starts only after the old
// process was reaped (its exit seen), which is the proof it can no longer
// act; then the supervisor clears the child's directory lock at once instead
// of waiting for it to go stale (DESIGN §7). Restarts follow the OTP
// intensity; past it the child is failed. Heartbeats catch a hung child.
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { type Logger, errorFields } from '../../shared/log.js';
import { type ChildRole, type JsonObject } from '../../shared/protocol/common.js';
import { type MessageKind, type RequestOf, type ResultOf } from '../../shared/protocol/messages.js';
import { defineMachine, Machine } from '../../shared/state-machine.js';
import { clearDirLock } from '../../shared/store/dir-lock.js';
import { type ChildExit, type ChildSession, spawnChild } from '../../shared/child/spawn.js';
import { type FrameLimits } from '../../shared/wire/frame-reader.js';
import { type PinnedIdentity } from '../../shared/wire/hello.js';
import { type RequestOptions } from '../../shared/wire/client.js';
import { nowMs } from '../../shared/clock.js';
import { type RestartPolicy, type Timing } from '../config/schema.js';
import { type SupervisorStore } from '../store/supervisor-store.js';
import { processStartTicks } from './proc-stat.js';
import { RestartIntensity } from './restart-intensity.js';

export type ChildState = 'stopped' | 'starting' | 'running' | 'backoff' | 'failed' | 'stopping';

export const CHILD_MACHINE = defineMachine<ChildState>('child', {
  stopped: ['starting', 'stopping'],
  starting: ['running', 'backoff', 'failed', 'stopping'],
  running: ['backoff', 'failed', 'stopping'],
  backoff: ['starting', 'failed', 'stopping'],
  stopping: ['stopped'],
  failed: ['stopping'],
});

export interface ChildSpec {
  readonly name: string;
  readonly role: ChildRole;
  readonly argv: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  /** The child's local state directory, whose lock is cleared after reaping; null for a remote child. */
  readonly lockDir: string | null;
  readonly settings: JsonObject;
  readonly pins: { readonly kernel: string | null };
  readonly maxInFlight: number;
}

export interface ChildDeps {
  readonly store: SupervisorStore;
  readonly log: Logger;
  readonly limits: FrameLimits;
  readonly timing: Timing;
  readonly restart: RestartPolicy;
  /** The identity every hello must prove, from the pins recorded at init. */
  readonly pin: () => PinnedIdentity | null;
  /** The child exceeded its restart intensity or cannot prove its identity. */
  readonly onFailed: (child: ChildHandle, reason: CustodyError) => void;
  /** A fresh session is up (first start or restart). */
  readonly onSession?: (child: ChildHandle, session: ChildSession) => void;
  /** Where the child's stderr lines (its JSON log) go; default: this process's stderr, as they are. */
  readonly onStderrLine?: (child: ChildHandle, line: string) => void;
}

interface Waiter {
  resolve(session: ChildSession): void;
  reject(reason: CustodyError): void;
}

export class ChildHandle {
  readonly spec: ChildSpec;
  readonly #deps: ChildDeps;
  readonly #log: Logger;
  readonly #machine: Machine<ChildState>;
  readonly #intensity: RestartIntensity;
  #session: ChildSession | null = null;
  #restarts = 0;
  #startedAt: number | null = null;
  #heartbeat: NodeJS.Timeout | null = null;
  #backoffTimer: NodeJS.Timeout | null = null;
  #waiters: Waiter[] = [];
  #failure: CustodyError | null = null;
  #lastExit: string | null = null;
  /** Why the current process is being killed; the first reason wins. */
  #killReason: string | null = null;

  constructor(spec: ChildSpec, deps: ChildDeps) {
    this.spec = spec;
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

  /** Start the first process; resolves once its hello proved the pinned identity. */
  async start(): Promise<void> {
    this.#machine.moveTo('starting', 'start');
    await this.#spawn();
  }

  /** The running session, waiting for a restart in progress; rejects when the child failed or stops. */
  waitForSession(timeoutMs: number): Promise<ChildSession> {
    if (this.#session && this.#machine.state === 'running') return Promise.resolve(this.#session);
    if (this.#machine.is('failed', 'stopping', 'stopped')) {
      return Promise.reject(this.#failure ?? new CustodyError('child_failed', `${this.name} is ${this.#machine.state}`));
    }
    return new Promise<ChildSession>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: (session) => {
          clearTimeout(timer);
          resolve(session);
        },
        reject: (reason) => {
          clearTimeout(timer);
          reject(reason);
        },
      };
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(new CustodyError('service_unavailable', `${this.name} has no running session after ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiters.push(waiter);
    });
  }

  /** Send a request on the current session (waiting briefly for a restart). */
  async request<K extends MessageKind>(kind: K, body: RequestOf<K>, options: RequestOptions & { waitMs?: number } = {}): Promise<ResultOf<K>> {
    const session = await this.waitForSession(options.waitMs ?? this.#deps.timing.hello_timeout_ms);
    return session.channel.request(kind, body, options);
  }

  /**
   * Kill the current process group with SIGKILL and wait until it is reaped.
   * The restart policy then starts a fresh session. Resolves after the reap.
   */
  async killAndReap(reason: string): Promise<void> {
    const session = this.#session;
    if (!session) return;
    this.#killReason ??= reason;
    session.kill('SIGKILL');
    await session.exited;
  }

  /** Graceful stop: `shutdown`, wait up to the grace, then SIGKILL; resolves after the reap. */
  async stop(graceMs: number): Promise<void> {
    if (this.#machine.is('stopped')) return;
    this.#clearTimers();
    if (!this.#machine.is('stopping')) this.#machine.moveTo('stopping', 'service stopping');
    const session = this.#session;
    if (session) {
      this.#killReason ??= 'service stopping';
      const answered = session.channel.request('shutdown', {}, { timeoutMs: graceMs }).catch(() => undefined);
      const exited = await Promise.race([session.exited.then(() => true), answered.then(() => wait(graceMs)).then(() => false)]);
      if (!exited) session.kill('SIGKILL');
      await session.exited;
    }
    this.#rejectWaiters(new CustodyError('shutting_down', `${this.name} is stopping`));
    this.#machine.moveTo('stopped', 'stopped');
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
        maxInFlight: spec.maxInFlight,
        helloTimeoutMs: this.#deps.timing.hello_timeout_ms,
        log: this.#deps.log,
        onStderrLine: (line) => this.#forwardStderr(line),
        onChannelEnd: (reason, state) => this.#onChannelEnd(reason, state),
      });
    } catch (error) {
      const reason = toCustodyError(error, 'peer_exited');
      this.#deps.store.recordIncident({ child: spec.name, kind: 'start_failed', code: reason.code, message: reason.message });
      if (reason.code === 'identity_mismatch' || reason.code === 'hello_invalid') {
        this.#fail(reason);
        throw reason;
      }
      this.#afterExit(`start failed: ${reason.code}`);
      throw reason;
    }
    if (this.#machine.is('stopping')) {
      session.kill('SIGKILL');
      await session.exited;
      return;
    }
    this.#session = session;
    this.#startedAt = nowMs();
    this.#killReason = null;
    this.#deps.store.openSession(session.sid, spec.name, session.pid);
    this.#machine.moveTo('running', `pid ${session.pid}`);
    void session.exited.then((exit) => this.#onExit(session, exit));
    this.#startHeartbeat(session);
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const waiter of waiters) waiter.resolve(session);
    this.#deps.onSession?.(this, session);
  }

  #onChannelEnd(reason: CustodyError, state: string): void {
    if (state !== 'poisoned') return;
    // A poisoned channel is never resumed: discard the process.
    this.#deps.store.recordIncident({ child: this.name, kind: 'channel_poisoned', code: reason.code, message: reason.message });
    this.#killReason ??= `channel poisoned: ${reason.code}`;
    this.#session?.kill('SIGKILL');
  }

  #onExit(session: ChildSession, exit: ChildExit): void {
    if (this.#session !== session) return;
    this.#session = null;
    this.#stopHeartbeat();
    const how = exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
    const why = this.#killReason ?? 'exited on its own';
    this.#deps.store.closeSession(session.sid, `${why} (${how})`);
    this.#clearLock(session.pid);
    if (this.#machine.is('stopping')) return;
    this.#deps.store.recordIncident({ child: this.name, kind: 'child_exit', code: exit.code === 70 ? 'channel_poisoned' : null, message: `${this.name} pid ${session.pid} ${how}: ${why}` });
    this.#lastExit = `${how}: ${why}`;
    this.#persist();
    this.#afterExit(`${how}: ${why}`);
  }

  /** The process is gone (reaped) or never came up: restart with backoff, or fail. */
  #afterExit(why: string): void {
    if (this.#machine.is('stopping', 'stopped', 'failed')) return;
    const decision = this.#intensity.next(nowMs());
    if (!decision.restart) {
      this.#fail(new CustodyError('child_failed', `${this.name} failed: ${decision.reason} (last: ${why})`));
      return;
    }
    this.#restarts++;
    this.#machine.moveTo('backoff', `${why}; restart in ${decision.delayMs} ms`);
    this.#backoffTimer = setTimeout(() => {
      this.#backoffTimer = null;
      if (!this.#machine.is('backoff')) return;
      this.#machine.moveTo('starting', `restart ${this.#restarts}`);
      this.#spawn().catch((error: unknown) => this.#log.warn('restart_failed', errorFields(error)));
    }, decision.delayMs);
  }

  #fail(reason: CustodyError): void {
    if (this.#machine.is('failed')) return;
    this.#failure = reason;
    this.#clearTimers();
    this.#deps.store.recordIncident({ child: this.name, kind: 'child_failed', code: reason.code, message: reason.message });
    this.#machine.moveTo('failed', reason.message);
    this.#rejectWaiters(reason);
    this.#deps.onFailed(this, reason);
  }

  #startHeartbeat(session: ChildSession): void {
    const { heartbeat_interval_ms: every, heartbeat_timeout_ms: timeout } = this.#deps.timing;
    this.#heartbeat = setInterval(() => {
      if (this.#session !== session) return;
      session.channel.request('ping', {}, { timeoutMs: timeout }).catch((error: unknown) => {
        const reason = toCustodyError(error);
        if (reason.code !== 'deadline_exceeded' || this.#session !== session) return;
        this.#deps.store.recordIncident({ child: this.name, kind: 'heartbeat_missed', code: reason.code, message: `${this.name} did not answer ping within ${timeout} ms` });
        void this.killAndReap('heartbeat missed');
      });
    }, every);
    this.#heartbeat.unref();
  }

  #stopHeartbeat(): void {
    if (this.#heartbeat) clearInterval(this.#heartbeat);
    this.#heartbeat = null;
  }

  #clearTimers(): void {
    this.#stopHeartbeat();
    if (this.#backoffTimer) clearTimeout(this.#backoffTimer);
    this.#backoffTimer = null;
  }

  #clearLock(pid: number): void {
    if (!this.spec.lockDir) return;
    try {
      clearDirLock(this.spec.lockDir, pid);
    } catch (error) {
      this.#log.warn('lock_not_cleared', { pid, ...errorFields(error) });
    }
  }

  #rejectWaiters(reason: CustodyError): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const waiter of waiters) waiter.reject(reason);
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

function wait(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
