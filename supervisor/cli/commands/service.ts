// custody init and custody start.
import { LOG_LEVELS, type LogLevel, createLogger, errorFields } from '../../../shared/log.js';
import { needsInit } from '../../paths.js';
import type { Service } from '../../service.js';
import type { Output } from '../output.js';

/**
 * The least level of a log line `custody init` shows: a person gets the
 * summary, with warnings and errors; `--verbose` (or CUSTODY_LOG_LEVEL) shows
 * the info lines of init and of the children it provisions as well.
 */
export function initLogLevel(verbose: boolean): LogLevel {
  const asked = process.env.CUSTODY_LOG_LEVEL;
  if (asked === 'debug' || asked === 'info' || asked === 'warn' || asked === 'error') return asked;
  return verbose ? 'info' : 'warn';
}

/** A child's stderr line is shown when it is at least `level`; a line that is not a JSON log line (a crash trace) always is. */
export function childLineShown(line: string, level: LogLevel): boolean {
  let record: unknown;
  try {
    record = JSON.parse(line);
  } catch {
    return true;
  }
  const lineLevel = (record as { level?: unknown } | null)?.level;
  return typeof lineLevel !== 'string' || !(lineLevel in LOG_LEVELS) || LOG_LEVELS[lineLevel as LogLevel] >= LOG_LEVELS[level];
}

export async function initCommand(out: Output, stateDir: string, executors: number, verbose = false): Promise<number> {
  const level = initLogLevel(verbose);
  const log = createLogger({ component: 'init' }, { level });
  const onChildStderr = (line: string) => {
    if (childLineShown(line, level)) process.stderr.write(line + '\n');
  };
  const { initState } = await import('../../init.js');
  const result = await out.progress(`provisioning ${stateDir}`, initState(stateDir, { executors, log, onChildStderr }));
  out.result(
    {
      state_dir: result.paths.root,
      kernel_public_key: result.kernelPublicKey,
      // One naming in --json: the API's and the stores' snake_case.
      executors: result.executors.map((e) => ({ name: e.name, id: e.id, public_key: e.publicKey, key_epoch: e.keyEpoch })),
    },
    () =>
      [
        `Initialized ${result.paths.root}`,
        `  kernel    ${result.kernelPublicKey}  (${result.paths.kernelPub})`,
        ...result.executors.map((e) => `  ${e.name.padEnd(9)} ${e.publicKey}  epoch ${e.keyEpoch}`),
        `Start it with: custody start --state ${result.paths.root}`,
      ].join('\n'),
  );
  return 0;
}

/**
 * Run the service in the foreground until SIGTERM, SIGINT or SIGHUP, or a
 * failed kernel; resolves with the exit code. SIGHUP (the terminal that
 * started it closed) stops it as gracefully as the others: Node's default
 * would end the process at once, leaving what was in flight to recovery.
 */
export async function startCommand(stateDir: string, port: number | undefined): Promise<number> {
  const log = createLogger({ component: 'supervisor', pid: process.pid });
  // A signal during the boot stops it (a child may be migrating its store for a long while): its children are stopped, none is left behind.
  // A second signal during the graceful stop is noted, not obeyed: the stop is
  // already bounded by timing.shutdown_grace_ms, and SIGKILL remains for an
  // operator who cannot wait.
  const booting = new AbortController();
  let service: Service | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    log.info('signal', { signal, already_stopping: service ? service.stopping : booting.signal.aborted });
    if (service) void service.stop(signal);
    else booting.abort();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.on('SIGHUP', onSignal);
  // Handlers first: a signal while the code loads or the state is made (keys, stores) lets that finish, then stops,
  // instead of ending the process half-way through an init (Node's default).
  const [{ initState }, { Service }] = await Promise.all([import('../../init.js'), import('../../service.js')]);
  if (needsInit(stateDir)) {
    log.info('state_initializing', { state: stateDir });
    await initState(stateDir, { log });
  }
  try {
    service = await Service.start({ stateDir, log, signal: booting.signal, ...(port === undefined ? {} : { port }) });
  } catch (error) {
    if (!booting.signal.aborted) throw error;
    log.info('service_stopped', { reason: 'a signal during the boot', ...errorFields(error) });
    return 0;
  }
  process.stdout.write(`custody is running: http://127.0.0.1:${service.port} (state ${service.paths.root}, pid ${process.pid}); Ctrl-C stops it\n`);
  // A signal that came as the boot ended.
  if (booting.signal.aborted) void service.stop('SIGTERM');
  return service.done;
}
