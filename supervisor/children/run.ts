// One process of a child, from its accepted hello to its exit: its session,
// the heartbeat watching it, and why it is being killed. The first intent
// wins: it decides how the exit is restarted (ARCHITECTURE.md §7 "restarts").
import type { Logger } from '../../shared/log.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import { killAndReap, stopGracefully, type StopWaits } from '../watchdog/reap.js';

/** Why the current process is being killed. */
export interface KillIntent {
  readonly reason: string;
  /** The supervisor's own decision (the watchdog, an operator's restart, stopping): restart at once, not counted as a crash. */
  readonly deliberate: boolean;
  /**
   * The process was stopped from outside (SIGSTOP, a debugger: /proc state T or t) when its heartbeat
   * was missed: counted as a crash, but the requests in flight on it take no blame (docs/POISON-AND-DISK.md).
   */
  readonly stoppedFromOutside?: boolean;
}

export class Run {
  readonly session: ChildSession;
  readonly #stopHeartbeat: () => void;
  #intent: KillIntent | null = null;

  constructor(session: ChildSession, stopHeartbeat: () => void) {
    this.session = session;
    this.#stopHeartbeat = stopHeartbeat;
  }

  /** Why it ended: the first kill's intent, else on its own. */
  get intent(): KillIntent {
    return this.#intent ?? { reason: 'exited on its own', deliberate: false };
  }

  /** SIGKILL the process group and wait until it is gone. */
  async killAndReap(intent: KillIntent, log: Logger): Promise<void> {
    this.#intent ??= intent;
    await killAndReap(this.session, log);
  }

  /** `shutdown`, then SIGKILL past its waits; resolves once the leader has exited. */
  async stop(reason: string, waits: StopWaits, log: Logger): Promise<void> {
    this.#intent ??= { reason, deliberate: true };
    await stopGracefully(this.session, waits, log);
  }

  /** A poisoned channel is never resumed: the process is discarded, and its exit counts as a crash. */
  discard(reason: string): void {
    this.#intent ??= { reason, deliberate: false };
    this.session.kill('SIGKILL');
  }

  stopHeartbeat(): void {
    this.#stopHeartbeat();
  }
}
