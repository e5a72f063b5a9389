// A background task of the service (the recovery sweep, archival): run on
// demand and every interval, one run at a time. A run asked for while one is
// going shares it, so an operator's `custody archive` during a timed pass
// answers with that pass, and a slow sweep is never stacked on itself.

export class Periodic<T> {
  readonly #task: () => Promise<T>;
  #running: Promise<T> | null = null;
  #timer: NodeJS.Timeout | null = null;

  constructor(task: () => Promise<T>) {
    this.#task = task;
  }

  /** Whether a run is going now. */
  get running(): boolean {
    return this.#running !== null;
  }

  /** A run: the one going, or a new one. */
  run(): Promise<T> {
    this.#running ??= this.#task().finally(() => (this.#running = null));
    return this.#running;
  }

  /** Call `tick` every `intervalMs` from now on (never when 0); the timer holds no process open. */
  every(intervalMs: number, tick: () => void): void {
    if (intervalMs === 0) return;
    this.#timer = setInterval(tick, intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }
}
