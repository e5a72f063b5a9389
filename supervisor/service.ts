// The running service: lock the state, kill what a killed predecessor left
// running, start the kernel and the executors with fresh sessions, resume
// every request the log holds open, sweep for operations nobody drives, and
// serve the control API. Stops gracefully on request; a failed kernel stops
// it with a clear message and a non-zero exit.
import { setTimeout as wait } from 'node:timers/promises';
import { rmSync } from 'node:fs';
import { CustodyError } from '../shared/errors.js';
import { CLI_EXIT } from '../shared/exit-codes.js';
import { type Logger, errorFields } from '../shared/log.js';
import { killGroup } from '../shared/child/spawn.js';
import { type DirLock, acquireDirLock } from '../shared/store/dir-lock.js';
import { writeServiceFile } from './service-file.js';
import { nowMs } from '../shared/clock.js';
import { discountStalls, withTimeout } from '../shared/timeout.js';
import { defineMachine, Machine } from '../shared/state-machine.js';
import { type ApiServer, startApiServer } from './api/server.js';
import { ChildHandle } from './children/child-handle.js';
import { ExecutorPool } from './children/pool.js';
import { ServiceMetrics, type StatsSource } from './metrics/metrics.js';
import { bootTimeMs, isGone, processSession, processStartTicks } from '../shared/child/proc-stat.js';
import { liveGroupMembers } from '../shared/child/process-group.js';
import { executorSpec, kernelSpec } from './children/specs.js';
import { HeadWitnessStore } from './children/witness.js';
import { loadConfig } from './config/load.js';
import type { CustodyConfig } from './config/schema.js';
import type { OperationContext } from './operations/context.js';
import { OperationDriver } from './operations/driver.js';
import { RecoverySweeper } from './operations/recovery.js';
import { Archival } from './operations/archival.js';
import { admitRequest, attributeCrash } from './operations/quarantine.js';
import { type StatePaths, statePaths } from './paths.js';
import { SupervisorStore } from './store/supervisor-store.js';
import { KeyRotation } from './rotation.js';
import { readEnvelope } from '../shared/artifacts/artifact.js';
import { authorizationBody } from '../shared/protocol/artifacts.js';
import type { ChildSession } from '../shared/child/spawn.js';
import { optimizeSooner } from '../shared/tiering.js';
import { watchStoreWals } from '../shared/store/sqlite-store.js';
import { RequestBound } from './api/request-bound.js';
import { ReadBound } from './api/read-bound.js';

export interface ServiceOptions {
  readonly stateDir: string;
  /** Overrides custody.json's port (0: any free port). */
  readonly port?: number;
  readonly log: Logger;
  /** Stops a boot in progress (SIGTERM before the service runs): every child stopped, its start abandoned; start rejects with shutting_down. */
  readonly signal?: AbortSignal;
}

export type ServiceState = 'booting' | 'running' | 'stopping' | 'stopped';

export const SERVICE_MACHINE = defineMachine<ServiceState>('service', {
  booting: ['running', 'stopping'],
  running: ['stopping'],
  stopping: ['stopped'],
  stopped: [],
});

export class Service {
  readonly paths: StatePaths;
  readonly config: CustodyConfig;
  readonly log: Logger;
  readonly store: SupervisorStore;
  readonly kernel: ChildHandle;
  readonly executors: ReadonlyMap<string, ChildHandle>;
  /** Which executors serve which tool, and what is in flight on each (children/pool.ts). */
  readonly pool: ExecutorPool;
  /** GET /metrics (metrics/metrics.ts). */
  readonly metrics: ServiceMetrics;
  readonly driver: OperationDriver;
  /** bounds.max_requests_in_flight, checked before a new request is logged (api/request-bound.ts). */
  readonly requestBound: RequestBound;
  /** bounds.max_reads_in_flight, held by a read that asks a child until it is answered (api/read-bound.ts). */
  readonly readBound: ReadBound;
  readonly sweeper: RecoverySweeper;
  /** Archival passes: on demand (custody archive) and every timing.archive_interval_ms. */
  readonly archival: Archival;
  /** Key rotation of the kernel and the executors, and its catch-up at each hello (rotation.ts). */
  readonly rotation: KeyRotation;
  readonly startedAt = nowMs();
  /** performance.now() at the start: uptimes are measured on the monotonic clock (shared/clock.ts). */
  readonly #startedMonotonic = performance.now();
  readonly #lock: DirLock;
  readonly #abort = new AbortController();
  /** Stops the watch on supervisor.db's write-ahead log (shared/store/wal-watch.ts). */
  #stopWalWatch: () => void = () => undefined;
  readonly #byIdentity = new Map<string, ChildHandle>();
  #api: ApiServer | null = null;
  readonly #lifecycle = new Machine(SERVICE_MACHINE, 'booting', (from, to, reason) => this.log.info('service_state', { from, to, reason }));
  #stopping: Promise<number> | null = null;
  #exitCode: ((code: number) => void) | null = null;
  /** Resolves with the process exit code once the service has stopped. */
  readonly done: Promise<number>;

  static async start(options: ServiceOptions): Promise<Service> {
    // The supervisor judges its children by its deadlines: time it did not run itself is not theirs (shared/timeout.ts).
    discountStalls();
    const paths = statePaths(options.stateDir);
    const config = loadConfig(paths.config);
    const log = options.log;
    // An OS lock (shared/store/dir-lock.ts): a live predecessor, even a stopped one, is refused at once
    // with its pid; a dead one's lock went with it, so there is nothing to wait for.
    const lock = await acquireDirLock(paths.supervisorDir);
    let store: SupervisorStore | null = null;
    try {
      store = SupervisorStore.open(paths.supervisorDir);
      await killPredecessorChildren(store, log);
      const service = new Service(paths, config, log, store, lock);
      await service.#boot(options.port ?? config.port, options.signal);
      return service;
    } catch (error) {
      store?.close();
      await lock.release().catch(() => undefined);
      throw error;
    }
  }

  private constructor(paths: StatePaths, config: CustodyConfig, log: Logger, store: SupervisorStore, lock: DirLock) {
    this.paths = paths;
    this.config = config;
    this.log = log;
    this.store = store;
    this.#lock = lock;
    this.done = new Promise((resolve) => (this.#exitCode = resolve));
    const kernelPin = store.getPin('kernel');
    if (!kernelPin) throw new CustodyError('store_missing', `${paths.root} has no kernel pin; run custody init`);
    const limits = { maxFrameBytes: config.bounds.max_frame_bytes, maxDepth: config.bounds.max_depth };
    const witness = new HeadWitnessStore(store);
    const deps = (name: string) => ({
      store,
      witness,
      log,
      limits,
      timing: config.timing,
      restart: config.restart,
      // A hello at a later key epoch is trusted once the rotation statements lead there (rotation.ts).
      pin: () => this.rotation.pinFor(name),
      afterHello: (child: ChildHandle, session: ChildSession) => this.rotation.afterHello(child, session),
      onFailed: (child: ChildHandle, reason: CustodyError) => this.#onChildFailed(child, reason),
      admit: (requestId: string) => admitRequest(store, requestId),
      onCrash: (child: ChildHandle, requestIds: readonly string[], why: string) =>
        attributeCrash(store, log, child.name, requestIds, why, config.restart.quarantine_after_crashes),
    });
    store.onBookkeepingFailed = (what, error) => log.error('store_write_skipped', { what, ...errorFields(error) });
    // Observing from the start: the children's first rows and incidents are counted too.
    this.metrics = new ServiceMetrics({
      inFlight: () => this.driver.active,
      children: () => [this.kernel, ...this.executors.values()].map((child) => statsSource(child)),
      log,
    });
    store.observer = this.metrics;
    this.rotation = new KeyRotation({
      store,
      log,
      timing: config.timing,
      kernel: () => this.kernel,
      executors: () => this.executors,
      signal: this.#abort.signal,
      afterRotation: () => this.#settleRetired(),
    });
    this.kernel = new ChildHandle(kernelSpec(config, paths), deps('kernel'));
    const executors = new Map<string, ChildHandle>();
    for (const executor of config.executors) {
      if (!store.getPin(executor.name)) throw new CustodyError('store_missing', `executor ${executor.name} is configured but was never provisioned (no pin); run custody init on a new state`);
      // The kernel's first key: an executor's ledger was provisioned with it; later ones reach it as rotation statements.
      executors.set(executor.name, new ChildHandle(executorSpec(executor, config, paths, store.firstKeyOf('kernel') ?? kernelPin.public_key), deps(executor.name)));
    }
    this.executors = executors;
    // Pins are fixed at init and read once: every step looks its executor up by identity.
    for (const [name, handle] of executors) this.#byIdentity.set(store.getPin(name)!.identity_id, handle);
    this.pool = new ExecutorPool(
      config.executors.map((executor) => ({ name: executor.name, identityId: store.getPin(executor.name)!.identity_id, tools: executor.tools, child: executors.get(executor.name)! })),
      () => config.timing.executor_wait_ms,
    );
    const ctx: OperationContext = {
      store,
      config,
      log,
      kernel: this.kernel,
      executorById: (id) => this.executorById(id),
      pool: this.pool,
      catchUpPin: (id) => this.rotation.catchUpPin(id),
      giveKernelKeys: (executor) => this.rotation.giveKernelKeys(executor),
      signal: this.#abort.signal,
    };
    this.driver = new OperationDriver(ctx);
    this.requestBound = new RequestBound(
      config.bounds.max_requests_in_flight,
      { driving: () => this.driver.driving, inDoubt: () => this.driver.inDoubt, known: (requestId) => this.driver.isDriving(requestId) || store.getRequest(requestId) !== undefined },
      log,
      () => this.metrics.requestRefusedBusy(),
    );
    this.readBound = new ReadBound(config.bounds.max_reads_in_flight, log, () => this.metrics.readRefusedBusy());
    this.sweeper = new RecoverySweeper(ctx, this.driver);
    this.archival = new Archival(ctx, this.executors);
  }

  get uptimeMs(): number {
    return Math.round(performance.now() - this.#startedMonotonic);
  }

  get port(): number {
    return this.#api?.port ?? 0;
  }

  get state(): ServiceState {
    return this.#lifecycle.state;
  }

  get stopping(): boolean {
    return this.#lifecycle.is('stopping', 'stopped');
  }

  /** `custody restart CHILD`: a failed child at once, a running one gracefully (ChildHandle.restart). */
  async restartChild(name: string): Promise<ChildHandle> {
    const child = name === this.kernel.name ? this.kernel : this.executors.get(name);
    if (!child) {
      throw new CustodyError('not_found', `no child named ${JSON.stringify(name)}; the children are ${[this.kernel.name, ...this.executors.keys()].join(', ')} (custody status lists them)`);
    }
    this.log.info('child_restart_requested', { child: name, state: child.state });
    await child.restart('restart requested by the operator', this.config.timing.shutdown_grace_ms);
    return child;
  }

  /**
   * After a key rotation: a request authorized but not executed (an
   * `authorize` waiting for its operator) whose authorization names a
   * retired executor epoch or was signed by a retired kernel key can never
   * run; reconcile it now, so the executor refuses it with a signed
   * epoch_retired report and the kernel releases its hold. Requests being
   * driven are carried by their drive (the executor refuses them the same way).
   */
  #settleRetired(): void {
    if (!this.#lifecycle.is('running')) return;
    const kernelKey = this.store.getPin('kernel')?.public_key;
    for (const row of this.store.openRequests()) {
      if (row.phase !== 'authorized' || !row.authorization || this.driver.isDriving(row.request_id)) continue;
      const { envelope } = readEnvelope(row.authorization);
      const addressed = authorizationBody.parse(envelope.body).executor;
      const pinned = [...this.executors.keys()].map((name) => this.store.getPin(name)).find((pin) => pin?.identity_id === addressed.id);
      if (envelope.signer === kernelKey && (!pinned || addressed.key_epoch >= pinned.key_epoch)) continue;
      this.log.info('retired_authorization_settled', { request_id: row.request_id, executor: addressed.id, key_epoch: addressed.key_epoch });
      this.driver.drive(row.request_id, 'reconcile').catch((error: unknown) => this.log.warn('retired_settle_failed', { request_id: row.request_id, ...errorFields(error) }));
    }
  }

  executorById(id: string): ChildHandle {
    const handle = this.#byIdentity.get(id);
    if (!handle) throw new CustodyError('executor_unknown', `no configured executor has the pinned identity ${id}`);
    return handle;
  }

  /**
   * Children first, all at once (an executor needs nothing of the running
   * kernel to start: its pins come from the store; a child that fails its
   * first start is restarted by its policy; boot waits for it and fails only
   * when it is failed for good), then the API (a port already taken fails the
   * boot before any work was resumed), and only then the requests the log
   * holds open. Any failure stops and reaps everything started so far.
   */
  async #boot(port: number, signal?: AbortSignal): Promise<void> {
    // A child that fails its first start may migrate its store again in the next (docs/PROTOCOL.md §5).
    const { timing, restart } = this.config;
    const bootWait = timing.hello_timeout_ms * (restart.max_restarts + 1) + restart.backoff_max_ms * restart.max_restarts + timing.migrate_timeout_ms;
    // A start whose process failed is retried by the restart policy (backoff): boot waits for it. Any other
    // failure (refused for good, or the supervisor's own store refusing the child's row) fails the boot now.
    const up = (child: ChildHandle) =>
      child
        .start()
        .catch((error: unknown) => {
          if (child.state !== 'backoff') throw error;
          return child.waitForSession(bootWait);
        })
        .then(() => undefined);
    // An executor refused for a rolled-back ledger stays failed while the
    // service serves the rest, so its operator can see it and take the way back.
    const upExecutor = (child: ChildHandle) =>
      up(child).catch((error: unknown) => {
        if (child.failure?.code !== 'store_rolled_back') throw error;
        process.stderr.write(`custody: executor ${child.name} is refused and stays failed: ${child.failure.message}\n`);
      });
    const children = () => [this.kernel, ...this.executors.values()];
    // A stop during the boot stops the children now: a start waiting for a hello (a store migration may take an hour) is abandoned.
    const stopBoot = () => void Promise.all(children().map((child) => child.stop(2000)));
    signal?.addEventListener('abort', stopBoot, { once: true });
    try {
      if (signal?.aborted) throw new CustodyError('shutting_down', 'the service was asked to stop while it booted');
      const kernelUp = up(this.kernel).catch((error: unknown) => {
        if (this.kernel.failure?.code === 'store_rolled_back') process.stderr.write(`custody: the kernel is refused; the service does not start: ${this.kernel.failure.message}
`);
        throw error;
      });
      // allSettled: every start has ended (or failed for good) before a failure stops them all.
      const started = await Promise.allSettled([kernelUp, ...[...this.executors.values()].map(upExecutor)]);
      for (const outcome of started) if (outcome.status === 'rejected') throw outcome.reason;
      await this.#pinTools();
      this.#api = await startApiServer(this, port);
    } catch (error) {
      await this.#api?.close();
      await Promise.all(children().map((child) => child.stop(2000)));
      throw signal?.aborted ? new CustodyError('shutting_down', 'the service was asked to stop while it booted; its children are stopped', { cause: error }) : error;
    } finally {
      signal?.removeEventListener('abort', stopBoot);
    }
    this.#lifecycle.moveTo('running', `port ${this.#api.port}`);
    this.driver.resumeAll();
    this.sweeper.start();
    void this.sweeper.sweep();
    this.archival.start();
    this.#stopWalWatch = watchStoreWals(this.log.child({ component: 'store' }));
    // Replaced whole, so a client never reads a half-written file.
    writeServiceFile(this.paths, this.#api.port, this.startedAt);
    // Serving now: its hot code optimized sooner (shared/tiering.ts).
    this.log.info('service_started', { state: this.paths.root, port: this.#api.port, pid: process.pid, optimized_sooner: optimizeSooner() });
  }

  /**
   * custody.json decides which executor serves which tool: tell the kernel at
   * every start, so an operator who adds a tool (an adapter module and its
   * tool pattern) only edits the configuration and restarts. The identity
   * stays the one pinned at init; only the tool list changes.
   */
  async #pinTools(): Promise<void> {
    for (const executor of this.config.executors) {
      const pin = this.store.getPin(executor.name)!;
      if (executor.key_epoch !== pin.key_epoch) {
        this.log.warn('key_epoch_informational', {
          executor: executor.name,
          configured: executor.key_epoch,
          key_epoch: pin.key_epoch,
          message: `custody.json names key_epoch ${executor.key_epoch} for ${executor.name}; its key is at epoch ${pin.key_epoch} (custody executor rotate moves it) — the configured value is information only`,
        });
      }
      await this.kernel.request('executor.pin', { executor_id: pin.identity_id, public_key: pin.public_key, key_epoch: pin.key_epoch, tools: executor.tools });
    }
  }

  /**
   * Graceful stop: refuse new requests, let in-flight operations finish up to
   * the grace, then stop the children (shutdown, then SIGKILL), reap them all,
   * and release the state. Resolves with the exit code.
   */
  stop(reason: string, exitCode = 0): Promise<number> {
    this.#stopping ??= this.#stop(reason, exitCode);
    return this.#stopping;
  }

  async #stop(reason: string, exitCode: number): Promise<number> {
    this.#lifecycle.moveTo('stopping', reason);
    this.log.info('service_stopping', { reason, in_flight: this.driver.active });
    this.sweeper.stop();
    this.archival.stop();
    this.#stopWalWatch();
    // Stop accepting now; open requests are answered as their drives end.
    const closing = this.#api?.close() ?? Promise.resolve();
    const grace = this.config.timing.shutdown_grace_ms;
    const deadline = performance.now() + grace;
    while (this.driver.active > 0 && performance.now() < deadline) await wait(50);
    this.#abort.abort();
    await withTimeout(closing, 1000, () => undefined);
    this.#api?.closeAll();
    this.requestBound.close();
    this.readBound.close();
    await Promise.all([...this.executors.values()].map((executor) => executor.stop(Math.max(1000, deadline - performance.now()))));
    await this.kernel.stop(5000);
    rmSync(this.paths.serviceJson, { force: true });
    this.store.close();
    await this.#lock.release().catch((error: unknown) => this.log.warn('lock_release_failed', errorFields(error)));
    this.#lifecycle.moveTo('stopped', reason);
    this.log.info('service_stopped', { reason, exit_code: exitCode });
    this.#exitCode?.(exitCode);
    return exitCode;
  }

  #onChildFailed(child: ChildHandle, reason: CustodyError): void {
    this.log.error('child_failed', { child: child.name, ...errorFields(reason) });
    if (child === this.kernel && this.#lifecycle.is('running')) {
      process.stderr.write(`custody: the kernel failed and the service cannot decide anything without it: ${reason.message}\n`);
      void this.stop('kernel failed', CLI_EXIT.error);
    }
  }
}

function statsSource(child: ChildHandle): StatsSource {
  return {
    name: child.name,
    role: child.spec.role,
    sid: child.state === 'running' ? (child.session?.sid ?? null) : null,
    stats: (timeoutMs) => child.request('stats', {}, { timeoutMs, waitMs: 0 }),
  };
}

/**
 * A supervisor killed with -9 leaves its children running (they stop on
 * their own once their stdin ends, but an effect may still be finishing).
 * Kill every child the predecessor recorded whose pid and start time both
 * still match, and wait until each is gone, before spawning anything. A gone
 * child's directory lock went with it (an OS lock), so the fresh children
 * take theirs at once.
 */
async function killPredecessorChildren(store: SupervisorStore, log: Logger): Promise<void> {
  // Without a recorded start time a pid proves nothing (it may have been reused), nor does one recorded before the
  // machine last booted (its start ticks count from another boot): leave those alone.
  const booted = bootTimeMs() ?? 0;
  const recorded = store.listChildren().filter((row) => row.pid !== null && row.pid_start_ticks !== null && row.updated_at >= booted);
  const survivors = recorded.filter((row) => !isGone(row.pid!, row.pid_start_ticks));
  for (const row of survivors) {
    log.warn('predecessor_child_killed', { child: row.name, child_pid: row.pid });
    store.recordIncident({ child: row.name, kind: 'predecessor_killed', code: null, message: `killed ${row.name} pid ${row.pid} left running by a previous supervisor` });
    killGroup(row.pid!, 'SIGKILL');
  }
  const orphans = recorded.filter((row) => !survivors.includes(row)).flatMap((row) => orphansOf(row.pid!, row.pid_start_ticks!).map((pid) => ({ row, pid })));
  const signalled: Array<{ row: (typeof recorded)[number]; pid: number }> = [];
  for (const { row, pid } of orphans) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch (error) {
      // Gone meanwhile, or not ours to signal (run as another user): said, not waited for.
      if ((error as NodeJS.ErrnoException).code === 'EPERM') log.error('predecessor_group_survivor', { child: row.name, leader: row.pid, pid, code: 'EPERM', why: 'left in the group of a dead child and not signallable by this user; stop it yourself' });
      continue;
    }
    signalled.push({ row, pid });
    log.warn('predecessor_group_killed', { child: row.name, leader: row.pid, child_pid: pid });
    store.recordIncident({ child: row.name, kind: 'predecessor_killed', code: null, message: `killed pid ${pid}, left running in the process group of ${row.name} (pid ${row.pid}, gone) by a previous supervisor` });
  }
  const deadline = performance.now() + 10_000;
  const waited = [...survivors.map((row) => ({ name: row.name, pid: row.pid!, ticks: row.pid_start_ticks })), ...signalled.map(({ row, pid }) => ({ name: row.name, pid, ticks: null }))];
  for (const { name, pid, ticks } of waited) {
    while (!isGone(pid, ticks)) {
      if (performance.now() > deadline) throw new CustodyError('internal', `${name} pid ${pid} is still running after SIGKILL`);
      await wait(5);
    }
  }
}

/**
 * What a child whose leader is gone left in its process group: an adapter's
 * subprocess, an adapter host stopped when its executor was killed. Only
 * while the leader's pid is free or still the leader's own zombie (an init
 * that reaps nothing keeps it), only members of its group AND its session
 * (the child was its session's leader; a group the pid was given to since
 * would have to have been made by a process with that pid, in that very
 * session), started after it, in this boot (the caller's check).
 */
function orphansOf(leader: number, leaderTicks: number): number[] {
  const holder = processStartTicks(leader);
  if (holder !== undefined && holder !== leaderTicks) return [];
  return (liveGroupMembers(leader) ?? []).filter((pid) => processSession(pid) === leader && (processStartTicks(pid) ?? -1) >= leaderTicks);
}
