// custody init and custody start.
import { createLogger } from '../../../shared/log.js';
import { initState } from '../../init.js';
import { needsInit } from '../../paths.js';
import { Service } from '../../service.js';
import { type Output } from '../output.js';

export async function initCommand(out: Output, stateDir: string, executors: number): Promise<number> {
  const log = createLogger({ component: 'init' });
  const result = await out.progress(`provisioning ${stateDir}`, initState(stateDir, { executors, log }));
  out.result(
    { state_dir: result.paths.root, kernel_public_key: result.kernelPublicKey, executors: result.executors },
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

/** Run the service in the foreground until SIGTERM/SIGINT or a failed kernel; resolves with the exit code. */
export async function startCommand(stateDir: string, port: number | undefined): Promise<number> {
  const log = createLogger({ component: 'supervisor', pid: process.pid });
  if (needsInit(stateDir)) {
    log.info('state_initializing', { state: stateDir });
    await initState(stateDir, { log });
  }
  const service = await Service.start({ stateDir, log, ...(port === undefined ? {} : { port }) });
  process.stdout.write(`custody is running: http://127.0.0.1:${service.port} (state ${service.paths.root}, pid ${process.pid}); Ctrl-C stops it\n`);
  // A second signal during the graceful stop is noted, not obeyed: the stop is
  // already bounded by timing.shutdown_grace_ms, and SIGKILL remains for an
  // operator who cannot wait.
  const onSignal = (signal: NodeJS.Signals) => {
    log.info('signal', { signal, already_stopping: service.stopping });
    void service.stop(signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return service.done;
}
