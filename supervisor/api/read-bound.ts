// bounds.max_reads_in_flight (README "Bounds", docs/SECURITY.md "Reads in
// flight"). A read of operations, tools or keys asks the kernel or an
// executor over its channel, whose bound on requests in flight
// (bounds.kernel_max_in_flight, an executor's max_in_flight) the invokes
// need too. Unbounded, an agent pipelining thousands of GET /v1/operations
// on a few connections kept the kernel's channel full: the invokes' reserves
// were refused and retried behind them (3 of 30 invokes had not started
// after 30 s), and every read past it was answered 409 and logged on a line
// of its own (65 MB of log a minute). Reads of the agent token that ask a child hold a place
// here until answered; past the bound a read is refused with service_busy at
// once, counted, and tallied in one throttled log line. The control token's
// reads are never refused here (the operator is not shut out by an agent).
import { CustodyError } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { ThrottledTally } from '../throttled-tally.js';
import type { TokenRole } from './http.js';
import { NOTHING_HELD, releaseOnce } from './request-bound.js';

/** How often a run of refusals is logged, at most. */
const REFUSAL_LOG_INTERVAL_MS = 10_000;

export class ReadBound {
  readonly #bound: number;
  readonly #refusals: ThrottledTally;
  readonly #onRefused: () => void;
  #held = 0;

  constructor(bound: number, log: Logger, onRefused: () => void, intervalMs = REFUSAL_LOG_INTERVAL_MS) {
    this.#bound = bound;
    this.#onRefused = onRefused;
    this.#refusals = new ThrottledTally(intervalMs, (refused) =>
      log.warn('reads_full', {
        bound,
        refused,
        message: `${bound} reads were waiting on the kernel or an executor (bounds.max_reads_in_flight): ${refused} more refused with service_busy since the last line; callers ask again later`,
      }),
    );
  }

  /** Take a place for a read, or refuse it (service_busy). The place is held until the returned function is called. */
  admit(role: TokenRole): () => void {
    if (role === 'control') return NOTHING_HELD;
    if (this.#held >= this.#bound) {
      this.#onRefused();
      this.#refusals.add();
      throw new CustodyError('service_busy', `custody is answering ${this.#held} reads, its bound (bounds.max_reads_in_flight ${this.#bound}); ask again in a moment`);
    }
    this.#held++;
    return releaseOnce(() => this.#held--);
  }

  close(): void {
    this.#refusals.close();
  }
}
