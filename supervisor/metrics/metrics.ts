// GET /metrics (README "Metrics"): the service's figures in the Prometheus
// text format, made with prom-client on a registry of its own. The
// supervisor's figures come from what its store records (StoreObserver: phase
// moves, incidents, children); the kernel's holds and every child's commit
// batches are asked of the children over the wire at each scrape (the
// `stats` message, shared/protocol/stats.ts). Counters start at zero with
// each supervisor process, as Prometheus expects of a restarted target.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { readEnvelope } from '../../shared/artifacts/artifact.js';
import { toCustodyError } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import type { StatsResult } from '../../shared/protocol/stats.js';
import type { ChildRow, RequestRow, StoreObserver } from '../store/supervisor-store.js';

/** A child the scrape asks for its figures. */
export interface StatsSource {
  readonly name: string;
  readonly role: 'kernel' | 'executor';
  /** The running session's id, or null when it has none (not asked then). */
  readonly sid: string | null;
  stats(timeoutMs: number): Promise<StatsResult>;
}

export interface MetricsSources {
  /** Requests being driven right now. */
  readonly inFlight: () => number;
  readonly children: () => readonly StatsSource[];
  readonly log: Logger;
}

/** How long a scrape waits for each child's figures; a child that does not answer is left out of that scrape. */
const STATS_TIMEOUT_MS = 2_000;

/** Incident kinds that say why the next restart of a child happens; the first seen since the last restart names it. */
const RESTART_REASONS: Record<string, string> = {
  heartbeat_missed: 'heartbeat_missed',
  channel_poisoned: 'channel_poisoned',
  watchdog_kill: 'watchdog',
  restart_requested: 'operator',
  cooldown_restart: 'cooldown',
  start_failed: 'start_failed',
  child_exit: 'exit',
};

const FINAL_PHASES: ReadonlySet<string> = new Set(['settled', 'refused', 'quarantined']);

export class ServiceMetrics implements StoreObserver {
  readonly registry = new Registry();
  readonly #sources: MetricsSources;
  readonly #operations: Counter<'tool' | 'outcome'>;
  readonly #duration: Histogram<'phase'>;
  readonly #restarts: Counter<'child' | 'reason'>;
  readonly #incidents: Counter<'kind'>;
  readonly #poisoned: Counter<'child' | 'code'>;
  readonly #holds: Gauge<'state'>;
  readonly #batches: Histogram<'store'>;
  readonly #reconciliations: Counter<'result'>;
  readonly #dropped: Counter;
  readonly #busy: Counter;
  readonly #readsBusy: Counter;
  /** The scrape under way: callers that arrive meanwhile share it (one `stats` request per child at a time). */
  #scraping: Promise<string> | null = null;
  /** Restarts each child had when last seen, and why the next one happens. */
  readonly #restartsSeen = new Map<string, number>();
  readonly #restartReason = new Map<string, string>();
  /** Per child session and store and size: the cumulative batch count already observed. */
  readonly #batchesSeen = new Map<string, number>();

  constructor(sources: MetricsSources) {
    this.#sources = sources;
    const registers = [this.registry];
    this.#operations = new Counter({ name: 'custody_operations_total', help: 'Requests that reached an end, by tool and outcome (the final kernel state: completed, released, denied, expired…; or quarantined).', labelNames: ['tool', 'outcome'], registers });
    this.#duration = new Histogram({
      name: 'custody_operation_duration_seconds',
      help: 'Time a request spent in each phase of the supervisor (received, reserved, authorized, executing, reconciling, reported), observed as it leaves the phase.',
      labelNames: ['phase'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    new Gauge({
      name: 'custody_operations_in_flight',
      help: 'Requests the supervisor is driving right now.',
      registers,
      collect() {
        this.set(sources.inFlight());
      },
    });
    this.#restarts = new Counter({ name: 'custody_child_restarts_total', help: 'Restarts of a child, by why (exit, heartbeat_missed, channel_poisoned, watchdog, operator, cooldown, start_failed).', labelNames: ['child', 'reason'], registers });
    this.#incidents = new Counter({ name: 'custody_incidents_total', help: 'Incidents recorded in supervisor.db, by kind (custody incidents lists them).', labelNames: ['kind'], registers });
    this.#poisoned = new Counter({ name: 'custody_channel_poisoned_total', help: 'Channels discarded after a protocol error, by child and error code.', labelNames: ['child', 'code'], registers });
    this.#holds = new Gauge({ name: 'custody_kernel_holds', help: "The kernel's budget holds by state, as of this scrape.", labelNames: ['state'], registers });
    this.#batches = new Histogram({
      name: 'custody_commit_batch_size',
      help: 'Units per committed write transaction, by store (kernel: grouped decisions; <executor>/ledger: the claims and reports of operations in flight together; supervisor: request writes, a witness-only commit counting one).',
      labelNames: ['store'],
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
      registers,
    });
    this.#dropped = new Counter({ name: 'custody_api_connections_dropped_total', help: 'Connections to the API closed unanswered as soon as they were accepted, because bounds.max_connections were open.', registers });
    this.#busy = new Counter({ name: 'custody_requests_refused_busy_total', help: 'New invokes of the agent token refused with service_busy, because bounds.max_requests_in_flight requests were being carried.', registers });
    this.#readsBusy = new Counter({ name: 'custody_reads_refused_busy_total', help: 'Reads of the agent token refused with service_busy, because bounds.max_reads_in_flight reads were waiting on the kernel or an executor.', registers });
    this.#reconciliations = new Counter({ name: 'custody_reconciliations_total', help: 'Reconciliations that ended, by result (the report status obtained, or quarantined).', labelNames: ['result'], registers });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /**
   * Ask the children for their figures, then render every metric. GET
   * /metrics needs no token by default, so a local flood of scrapes must not
   * become a flood of `stats` requests on the children's channels (they
   * would crowd out the invokes' frames): a scrape asked while one is under
   * way gets that one's text.
   */
  scrape(): Promise<string> {
    this.#scraping ??= this.#scrapeOnce().finally(() => {
      this.#scraping = null;
    });
    return this.#scraping;
  }

  async #scrapeOnce(): Promise<string> {
    await Promise.all(this.#sources.children().map((child) => this.#collectChild(child)));
    return this.registry.metrics();
  }

  // ------------------------------------------------------------ StoreObserver

  incident(incident: { readonly child: string | null; readonly kind: string; readonly code: string | null }): void {
    this.#incidents.inc({ kind: incident.kind });
    if (incident.kind === 'channel_poisoned') this.#poisoned.inc({ child: incident.child ?? 'unknown', code: incident.code ?? 'unknown' });
    const reason = RESTART_REASONS[incident.kind];
    if (reason && incident.child && !this.#restartReason.has(incident.child)) this.#restartReason.set(incident.child, reason);
  }

  child(row: Omit<ChildRow, 'updated_at'>): void {
    const seen = this.#restartsSeen.get(row.name);
    this.#restartsSeen.set(row.name, row.restarts);
    if (seen === undefined || row.restarts <= seen) return;
    this.#restarts.inc({ child: row.name, reason: this.#restartReason.get(row.name) ?? 'exit' }, row.restarts - seen);
    this.#restartReason.delete(row.name);
  }

  committed(writes: number): void {
    this.#batches.observe({ store: 'supervisor' }, writes);
  }

  phase(before: RequestRow, after: RequestRow): void {
    this.#duration.observe({ phase: before.phase }, Math.max(0, after.updated_at - before.updated_at) / 1000);
    if (before.phase === 'reconciling') this.#reconciliations.inc({ result: after.report ? reportStatus(after.report) : after.phase });
    if (FINAL_PHASES.has(after.phase)) this.#operations.inc({ tool: after.tool, outcome: after.phase === 'quarantined' ? 'quarantined' : (after.outcome ?? after.phase) });
  }

  /** The API closed a connection past bounds.max_connections (supervisor/api/connections.ts). */
  connectionDropped(): void {
    this.#dropped.inc();
  }

  /** A new request refused past bounds.max_requests_in_flight (supervisor/api/request-bound.ts). */
  requestRefusedBusy(): void {
    this.#busy.inc();
  }

  /** A read refused past bounds.max_reads_in_flight (supervisor/api/read-bound.ts). */
  readRefusedBusy(): void {
    this.#readsBusy.inc();
  }

  // ---------------------------------------------------------------- children

  async #collectChild(child: StatsSource): Promise<void> {
    const sid = child.sid;
    if (sid === null) return;
    let stats: StatsResult;
    try {
      stats = await child.stats(STATS_TIMEOUT_MS);
    } catch (error) {
      this.#sources.log.debug('stats_unanswered', { child: child.name, code: toCustodyError(error).code });
      return;
    }
    if (child.role === 'kernel') for (const { state, count } of stats.holds) this.#holds.set({ state }, count);
    // Counts are cumulative per process: observe what is new since this session's last answer.
    for (const { store, size, count } of stats.commit_batches) {
      const label = child.role === 'kernel' ? store : `${child.name}/${store}`;
      const key = `${sid}|${store}|${size}`;
      const fresh = count - (this.#batchesSeen.get(key) ?? 0);
      this.#batchesSeen.set(key, count);
      for (let i = 0; i < fresh; i++) this.#batches.observe({ store: label }, size);
    }
  }
}

function reportStatus(report: string): string {
  try {
    const status = (readEnvelope(report).envelope.body as { status?: unknown }).status;
    return typeof status === 'string' ? status : 'reported';
  } catch {
    return 'reported';
  }
}
