// A warning that can come thousands of times a second (connections or calls
// past a bound, under a flood) is logged at once the first time, then at
// most once per interval with how many came since the last line. The last
// count of a run is logged too, once the interval has passed (an unref'd
// timer) or at close: none is lost, and the log is never the flood.
export class ThrottledTally {
  readonly #intervalMs: number;
  readonly #report: (count: number) => void;
  #count = 0;
  #lastReport = -Infinity;
  #pending: NodeJS.Timeout | null = null;

  constructor(intervalMs: number, report: (count: number) => void) {
    this.#intervalMs = intervalMs;
    this.#report = report;
  }

  add(): void {
    this.#count++;
    if (this.#pending) return;
    const wait = this.#lastReport + this.#intervalMs - performance.now();
    if (wait <= 0) this.#flush();
    else this.#pending = setTimeout(() => this.#flush(), wait).unref();
  }

  /** Report what is counted now and stop the timer (the server or the service is closing). */
  close(): void {
    if (this.#pending) clearTimeout(this.#pending);
    this.#flush();
  }

  #flush(): void {
    this.#pending = null;
    if (this.#count === 0) return;
    const count = this.#count;
    this.#count = 0;
    this.#lastReport = performance.now();
    this.#report(count);
  }
}
