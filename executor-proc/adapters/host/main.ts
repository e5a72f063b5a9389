// Entry of the adapter host, the helper process adapters run in. Its stdin is
// /dev/null and its stdout and stderr are pipes the executor reads into its
// log, so nothing an adapter prints (console, process.stdout, a raw write to
// fd 1, a subprocess with inherited stdio) can reach the executor's frame
// channel. It talks to the executor only over Node's IPC channel.
import { logIgnoredSignals } from '../../../shared/inspector-guard.js';
import { createLogger } from '../../../shared/log.js';
import { CustodyError, toCustodyError } from '../../../shared/errors.js';
import { CHILD_EXIT } from '../../../shared/exit-codes.js';
import { HOST_ARGS_FLAG, type HostRequest, hostConfigSchema } from '../host-protocol.js';
import { loadAdapters } from '../load.js';
import { HostServer } from './serve.js';
import { optimizeSooner } from '../../../shared/tiering.js';


function send(message: Record<string, unknown>): void {
  if (process.connected) process.send?.(message);
}

function readConfig() {
  const index = process.argv.indexOf(HOST_ARGS_FLAG);
  const raw = index >= 0 ? process.argv[index + 1] : undefined;
  const parsed = hostConfigSchema.safeParse(raw === undefined ? undefined : JSON.parse(raw));
  if (!parsed.success) throw new CustodyError('config_invalid', `adapter host: bad ${HOST_ARGS_FLAG}`);
  return parsed.data;
}

if (!process.send) {
  process.stderr.write('the adapter host runs only as a child of executor-proc (it needs an IPC channel)\n');
  process.exit(CHILD_EXIT.config);
}

// On stderr, which the executor relays into its log (adapter_output).
logIgnoredSignals((event, fields) => createLogger({ pid: process.pid, program: 'adapter-host' }).warn(event, fields));

// The executor is gone (exited, or killed with -9): stop at once. An effect
// cut short here is the case the claim and the fence exist for.
process.on('disconnect', () => process.exit());

let server: HostServer | undefined;
try {
  const config = readConfig();
  const warn = (event: string, fields: Record<string, unknown>) => server?.log('warn', event, fields);
  const loaded = await loadAdapters(config, warn);
  server = new HostServer(loaded.adapters, send);
  const ready = server;
  process.on('message', (message: HostRequest) => ready.handle(message));
  send({ type: 'ready', adapters: [...loaded.adapters.values()].map((entry) => entry.descriptor) });
  // Serving now: its hot code optimized sooner (shared/tiering.ts).
  server.log('info', 'host_serving', { optimized_sooner: optimizeSooner() });
} catch (error) {
  process.exitCode = CHILD_EXIT.config;
  process.send({ type: 'load_failed', message: toCustodyError(error).message }, () => process.disconnect());
}
