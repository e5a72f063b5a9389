// bounds.max_requests_in_flight (README "Bounds", docs/SECURITY.md "Requests
// in flight"). Every request the supervisor carries holds memory until it
// reaches its goal, and waits behind every one logged before it: an agent
// calling in a loop with wait_ms 0 (each call answered 202 at once) would
// otherwise queue work without end, growing the supervisor by ~13 KB a call
// and putting every other caller behind it. Past the bound a new invoke or
// authorize is refused with service_busy before anything is recorded, so
// asking again later under the same request id is safe; a request already
// logged (a retry, a wait for its answer) is carried as ever, and operations
// in doubt (asked about again until a report proves them) are not counted.
import { CustodyError } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { ThrottledTally } from '../throttled-tally.js';

/** How often a run of refusals is logged, at most. */
const REFUSAL_LOG_INTERVAL_MS = 10_000;

export interface CarriedRequests {
  /** Requests being carried toward their answer now (those waiting on a reconciliation left out: driver.ts `carrying`). */
  carried(): number;
  /** Whether this request is logged already (or being carried). */
  known(requestId: string): boolean;
}

export class RequestBound {
  readonly #bound: number;
  readonly #carried: CarriedRequests;
  readonly #refusals: ThrottledTally;
  readonly #onRefused: () => void;

  constructor(bound: number, carried: CarriedRequests, log: Logger, onRefused: () => void, intervalMs = REFUSAL_LOG_INTERVAL_MS) {
    this.#bound = bound;
    this.#carried = carried;
    this.#onRefused = onRefused;
    this.#refusals = new ThrottledTally(intervalMs, (refused) =>
      log.warn('requests_full', {
        bound,
        refused,
        message: `${bound} requests are being carried (bounds.max_requests_in_flight): ${refused} new ones refused with service_busy since the last line; callers ask again later with the same request id`,
      }),
    );
  }

  /** Refuse a new request while the bound is reached; `requestId` undefined: the caller left the name to the service, so it is new. */
  check(requestId: string | undefined): void {
    const active = this.#carried.carried();
    if (active < this.#bound) return;
    if (requestId !== undefined && this.#carried.known(requestId)) return;
    this.#onRefused();
    this.#refusals.add();
    throw new CustodyError(
      'service_busy',
      `custody is carrying ${active} requests, its bound (bounds.max_requests_in_flight ${this.#bound}); nothing was recorded for this one: ask again in a moment${requestId === undefined ? '' : ` with the same request id (${requestId})`}`,
    );
  }

  close(): void {
    this.#refusals.close();
  }
}
