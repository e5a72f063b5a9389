// How a child's process is started (shared/child/spawn.ts): its spec, the
// session's bounds and pin, and where the session's events go.
import type { CustodyError } from '../../shared/errors.js';
import type { SpawnChildOptions } from '../../shared/child/spawn.js';
import type { ChildDeps, ChildHandle } from './child-handle.js';
import { recordHead } from './head-check.js';
import { stderrSink } from '../../shared/log-sink.js';

/** Room for control messages (ping, cancel, shutdown) above the operations' slots. */
const CONTROL_ROOM = 8;

/** `onChannelEnd`: the session's channel stopped (poisoned or closed), first reason; `signal`: abandons the start (a stop). */
export function spawnOptionsFor(child: ChildHandle, deps: ChildDeps, onChannelEnd: (reason: CustodyError, state: string) => void, signal?: AbortSignal): SpawnChildOptions {
  const { spec } = child;
  return {
    argv: spec.argv,
    ...(spec.env ? { env: spec.env } : {}),
    role: spec.role,
    name: spec.name,
    mode: 'serve',
    pins: spec.pins,
    settings: spec.settings,
    limits: deps.limits,
    expect: deps.pin(),
    maxInFlight: spec.maxInFlight + CONTROL_ROOM,
    helloTimeoutMs: deps.timing.hello_timeout_ms,
    migrateTimeoutMs: deps.timing.migrate_timeout_ms,
    ...(signal ? { signal } : {}),
    log: deps.log,
    onStderrLine: (line) => relayStderr(child, deps, line),
    onChannelEnd,
    // A kernel's head rides on the request write that follows its decision; an executor's is awaited before an effect.
    onHead: (head) => recordHead(deps.witness, spec.name, head, deps.log, spec.role === 'kernel' ? deps.timing.kernel_head_linger_ms : 0),
    onSpawned: (pid) => child.recordSpawned(pid),
  };
}

/** A child's stderr line (its JSON log) goes where the deps say; by default to this process's stderr, as it is. */
function relayStderr(child: ChildHandle, deps: ChildDeps, line: string): void {
  if (deps.onStderrLine) deps.onStderrLine(child, line);
  else stderrSink().write(line + '\n');
}
