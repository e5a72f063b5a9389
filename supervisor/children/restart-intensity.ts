// OTP-style restart intensity: at most `max_restarts` restarts within
// `period_s`; past that the child is failed. Backoff doubles with each restart
// inside the period. Pure, so it is tested without processes.
import type { RestartPolicy } from '../config/schema.js';

export type RestartDecision = { readonly restart: true; readonly delayMs: number } | { readonly restart: false; readonly reason: string };

export class RestartIntensity {
  readonly #policy: RestartPolicy;
  #restarts: number[] = [];

  constructor(policy: RestartPolicy) {
    this.#policy = policy;
  }

  /** Restarts counted inside the current period. */
  recent(now: number): number {
    const since = now - this.#policy.period_s * 1000;
    this.#restarts = this.#restarts.filter((at) => at > since);
    return this.#restarts.length;
  }

  /** Decide about one more restart at `now`, and count it when allowed. */
  next(now: number): RestartDecision {
    const recent = this.recent(now);
    if (recent >= this.#policy.max_restarts) {
      return {
        restart: false,
        reason: `${recent} restarts within ${this.#policy.period_s} s reached restart.max_restarts (${this.#policy.max_restarts})`,
      };
    }
    this.#restarts.push(now);
    const delayMs = Math.min(this.#policy.backoff_initial_ms * 2 ** recent, this.#policy.backoff_max_ms);
    return { restart: true, delayMs };
  }
}
