// A child's restarts across its processes (ARCHITECTURE.md §7 "restarts"):
// the OTP intensity that decides a crash's backoff or the child's failure,
// the one backoff timer, the failed executor's cool-down, and what the status
// shows (restarts, when the process started, how the last one ended). The
// child handle reports each start that failed and each exit; this decides
// whether, when and how the next process starts.
import { CustodyError } from '../../shared/errors.js';
import { errorFields } from '../../shared/log.js';
import type { Machine } from '../../shared/state-machine.js';
import { nowMs } from '../../shared/clock.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import type { ChildDeps, ChildHandle, ChildState } from './child-handle.js';
import { processStartTicks } from '../../shared/child/proc-stat.js';
import { RestartIntensity } from './restart-intensity.js';
import type { KillIntent } from './run.js';

/** How an exit is restarted: counted against the intensity, or at a fixed delay. */
export type ExitCounting = { readonly counted: true } | { readonly counted: false; readonly delayMs: number };

export interface RestartDeps extends Pick<ChildDeps, 'store' | 'log' | 'restart' | 'onFailed' | 'onCrash'> {
  /** Start a new process (the machine is already `starting`). */
  readonly spawn: () => Promise<void>;
  /** The child just became `failed`: the handle answers whoever waits for a session. */
  readonly failed: (reason: CustodyError) => void;
}

/** How a process that should have kept running ended. */
export interface ExitRecord extends KillIntent {
  readonly pid: number;
  /** `code N` or `signal S`. */
  readonly how: string;
  readonly code: number | null;
}

/**
 * Starts refused for good: restarting would only be refused again. A
 * rolled-back store (docs/ROLLBACK.md), an identity that does not verify,
 * settings the child refuses (config_invalid: its part of custody.json, an
 * adapter module that does not load, argv that does not start it), or a
 * ledger that is missing or another's, a store or key file missing, unreadable or
 * not writable by this user. Each waits for the operator; a
 * failed child is tried again every restart.failed_cooldown_s.
 */
const REFUSED_FOR_GOOD: ReadonlySet<string> = new Set(['identity_mismatch', 'hello_invalid', 'store_rolled_back', 'config_invalid', 'ledger_identity', 'ledger_missing', 'store_permissions', 'store_missing', 'key_file_invalid']);

/**
 * Starts that failed for a cause outside the child: its store still locked
 * by a process finishing an effect, no descriptors for its pipes, no process
 * to be had (a process or thread limit), or its store locked from a sqlite3
 * shell. Tried again at the longest backoff, never counted toward its
 * failure.
 */
export const NOT_YET: ReadonlySet<string> = new Set(['store_locked', 'descriptors_exhausted', 'processes_exhausted', 'store_busy']);

export class RestartBook {
  restarts = 0;
  startedAt: number | null = null;
  lastExit: string | null = null;
  failure: CustodyError | null = null;
  /** When a failed executor is next retried by itself (ms since the epoch), or null. */
  nextRetryAt: number | null = null;
  readonly #child: ChildHandle;
  readonly #machine: Machine<ChildState>;
  readonly #deps: RestartDeps;
  #intensity: RestartIntensity;
  #backoffTimer: NodeJS.Timeout | null = null;
  #cooldownTimer: NodeJS.Timeout | null = null;

  constructor(child: ChildHandle, machine: Machine<ChildState>, deps: RestartDeps) {
    this.#child = child;
    this.#machine = machine;
    this.#deps = deps;
    this.#intensity = new RestartIntensity(deps.restart);
  }

  /** Out of `failed`: a fresh intensity and no failure. */
  afresh(): void {
    this.#intensity = new RestartIntensity(this.#deps.restart);
    this.failure = null;
  }

  /** Out of `failed` into a new process, counted as a restart. */
  startAfresh(reason: string): void {
    this.afresh();
    this.restarts++;
    this.startNow(reason);
  }

  /** To `starting` at once, with no timer left pending, and a new process. */
  startNow(reason: string): void {
    this.clearTimers();
    this.#machine.moveTo('starting', reason);
    this.#deps.spawn().catch((error: unknown) => this.#deps.log.warn('restart_failed', errorFields(error)));
  }

  /** A start that failed: recorded, then the child fails (refused for good) or restarts. */
  startFailed(reason: CustodyError): void {
    const { name } = this.#child.spec;
    this.#deps.store.recordIncident({ child: name, kind: reason.code === 'store_rolled_back' ? 'store_rolled_back' : 'start_failed', code: reason.code, message: reason.message });
    if (REFUSED_FOR_GOOD.has(reason.code)) return this.fail(reason);
    // NOT_YET is not the child's crash. The refusal's words, not only its code: past the intensity `custody start` prints them.
    this.afterExit(`start failed: ${reason.code}: ${reason.message}`, NOT_YET.has(reason.code) ? { counted: false, delayMs: this.#deps.restart.backoff_max_ms } : { counted: true });
  }

  /**
   * A process ended while the child was to keep running: recorded, then
   * restarted — at once and uncounted after the supervisor's own kill; after
   * a crash, a poisoning or a missed heartbeat, counted unless the requests
   * in flight on it take the blame.
   */
  exited(exit: ExitRecord, blamed: readonly string[]): void {
    const { name } = this.#child.spec;
    this.#deps.store.recordIncident({ child: name, kind: 'child_exit', code: exit.code === 70 ? 'channel_poisoned' : null, message: `${name} pid ${exit.pid} ${exit.how}: ${exit.reason}` });
    const why = (this.lastExit = `${exit.how}: ${exit.reason}`);
    this.record(null);
    if (exit.deliberate) return this.afterExit(why, { counted: false, delayMs: 0 });
    // A crash with client requests in flight on it: they take the blame, and may leave it uncounted (quarantine);
    // not when the process was stopped from outside, which no request did.
    const verdict = blamed.length > 0 && !exit.stoppedFromOutside && this.#deps.onCrash ? this.#deps.onCrash(this.#child, blamed, why) : { counted: true };
    this.afterExit(why, verdict.counted ? { counted: true } : { counted: false, delayMs: this.#deps.restart.backoff_initial_ms });
  }

  /** The process is gone or never came up: restart after a backoff, or fail past the intensity. */
  afterExit(why: string, how: ExitCounting): void {
    if (this.#machine.is('stopping', 'stopped', 'failed')) return;
    // On the monotonic clock: a wall clock stepped back (NTP, a VM resumed) would keep restarts counted for as long
    // as the step, failing a child that crashes a few times in the next hour; one stepped forward would forget them.
    const decision = how.counted ? this.#intensity.next(performance.now()) : { restart: true as const, delayMs: how.delayMs };
    if (!decision.restart) return this.fail(new CustodyError('child_failed', `${this.#child.spec.name} failed: ${decision.reason} (last: ${why})`));
    this.restarts++;
    this.#machine.moveTo('backoff', `${why}; restart in ${decision.delayMs} ms`);
    this.#backoffTimer = setTimeout(() => {
      this.#backoffTimer = null;
      if (this.#machine.is('backoff')) this.startNow(`restart ${this.restarts}`);
    }, decision.delayMs);
  }

  /** Failed for good; an executor is tried again after a cool-down, a failed kernel stops the service instead. */
  fail(reason: CustodyError): void {
    if (this.#machine.is('failed')) return;
    this.failure = reason;
    this.clearTimers();
    this.#deps.store.recordIncident({ child: this.#child.spec.name, kind: 'child_failed', code: reason.code, message: reason.message });
    if (this.#child.spec.role === 'executor') this.#coolDown();
    this.#machine.moveTo('failed', reason.message);
    this.#deps.failed(reason);
    this.#deps.onFailed(this.#child, reason);
  }

  /** The child's row in supervisor.db, for the status and a successor supervisor (ARCHITECTURE.md §7); `starting`: the pid of a process before its hello. */
  record(session: ChildSession | null, starting?: number): void {
    const pid = session?.pid ?? starting ?? null;
    const { name, role } = this.#child.spec;
    this.#deps.store.recordChild({
      name,
      role,
      state: this.#machine.state,
      pid,
      pid_start_ticks: pid === null ? null : (processStartTicks(pid) ?? null),
      sid: session?.sid ?? null,
      restarts: this.restarts,
      started_at: this.startedAt,
      last_exit: this.lastExit,
    });
  }

  clearTimers(): void {
    if (this.#backoffTimer) clearTimeout(this.#backoffTimer);
    this.#backoffTimer = null;
    if (this.#cooldownTimer) clearTimeout(this.#cooldownTimer);
    this.#cooldownTimer = null;
    this.nextRetryAt = null;
  }

  /** restart.failed_cooldown_s after it failed, a failed executor starts afresh by itself. */
  #coolDown(): void {
    const { failed_cooldown_s: cooldownS } = this.#deps.restart;
    this.nextRetryAt = nowMs() + cooldownS * 1000;
    this.#cooldownTimer = setTimeout(() => {
      this.#cooldownTimer = null;
      if (!this.#machine.is('failed')) return;
      const { name } = this.#child.spec;
      const message = `${name} restarted ${cooldownS} s after it failed (restart.failed_cooldown_s); it failed with: ${this.failure?.message ?? 'unknown'}`;
      this.#deps.store.recordIncident({ child: name, kind: 'cooldown_restart', code: this.failure?.code ?? null, message });
      this.startAfresh('restart.failed_cooldown_s passed');
    }, cooldownS * 1000);
  }
}
