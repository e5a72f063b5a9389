// bounds.max_requests_in_flight (README "Bounds", docs/SECURITY.md "Requests
// in flight"). Every request the supervisor carries holds memory until it
// reaches its goal, and waits behind every one logged before it: an agent
// calling in a loop with wait_ms 0 (each call answered 202 at once) would
// otherwise queue work without end, growing the supervisor by ~13 KB a call
// and putting every other caller behind it. Past the bound a new invoke is
// refused with service_busy before anything is recorded, so asking again
// later under the same request id is safe. Never refused: a request already
// logged (a retry, a wait for its answer), and the control token's requests
// (the operator is not shut out by an agent's flood). Operations in doubt
// (asked about again until a report proves them) are left out of the count,
// up to the bound's worth of them.
import { CustodyError } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { ThrottledTally } from '../throttled-tally.js';
import type { TokenRole } from './http.js';

/** How often a run of refusals is logged, at most. */
const REFUSAL_LOG_INTERVAL_MS = 10_000;

export interface CarriedRequests {
  /** Requests the driver carries now, those being logged included (driver.ts `driving`). */
  driving(): number;
  /** Of those, the ones waiting on a reconciliation (driver.ts `inDoubt`). */
  inDoubt(): number;
  /** Whether this request is logged already (or being carried). */
  known(requestId: string): boolean;
}

export const NOTHING_HELD = (): void => undefined;

/** A place's release: gives it back the first time it is called, and does nothing after. */
export function releaseOnce(giveBack: () => void): () => void {
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    giveBack();
  };
}

export class RequestBound {
  readonly #bound: number;
  readonly #carried: CarriedRequests;
  readonly #refusals: ThrottledTally;
  readonly #onRefused: () => void;
  /** Places taken by new requests not yet handed to the driver (in the check before the reserve). */
  #admitting = 0;

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

  /** Requests counted against the bound now. */
  get counted(): number {
    return this.#carried.driving() - Math.min(this.#carried.inDoubt(), this.#bound) + this.#admitting;
  }

  /**
   * Take a place for a new request, or refuse it (service_busy). The place
   * is held until the returned function is called, once the driver counts
   * the request or it was refused on the way. `requestId` undefined: the
   * caller left the name to the service, so the request is new.
   */
  admit(requestId: string | undefined, role: TokenRole): () => void {
    if (role === 'control') return NOTHING_HELD;
    const counted = this.counted;
    if (counted >= this.#bound) {
      // Looked up only at the bound: below it a known request just holds a place a moment.
      if (requestId !== undefined && this.#carried.known(requestId)) return NOTHING_HELD;
      this.#onRefused();
      this.#refusals.add();
      throw new CustodyError(
        'service_busy',
        `custody is carrying ${counted} requests, its bound (bounds.max_requests_in_flight ${this.#bound}); nothing was recorded for this one: ask again in a moment${requestId === undefined ? '' : ` with the same request id (${requestId})`}`,
      );
    }
    this.#admitting++;
    return releaseOnce(() => this.#admitting--);
  }

  close(): void {
    this.#refusals.close();
  }
}
