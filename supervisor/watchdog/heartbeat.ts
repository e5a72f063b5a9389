// Heartbeats (ARCHITECTURE.md §7 "heartbeats"): a ping every interval; one
// not answered within the timeout means the child hung (a stopped process
// included). The watchdog records it and kills and reaps the process; its
// exit is counted as a crash, so the restart policy decides what follows.
import { toCustodyError } from '../../shared/errors.js';
import type { ChildSession } from '../../shared/child/spawn.js';
import { readStat } from '../../shared/child/proc-stat.js';
import type { Timing } from '../config/schema.js';
import type { SupervisorStore } from '../store/supervisor-store.js';

/** The child as the heartbeat sees it: its current session, and the kill that ends it. */
export interface Watched {
  readonly name: string;
  readonly session: ChildSession | null;
  killAndReap(reason: string, options?: { stoppedFromOutside?: boolean }): Promise<void>;
}

/**
 * Ping `session` until it ends; a missed pong kills and reaps it if it is
 * still the child's session. A process found stopped (SIGSTOP, a debugger:
 * /proc state T or t) was stopped from outside: it is killed all the same,
 * but the requests in flight on it take no blame (an operator who paused the
 * kernel twice quarantined the requests it happened to hold).
 */
export function watchHeartbeat(child: Watched, session: ChildSession, deps: { readonly store: SupervisorStore; readonly timing: Timing }): () => void {
  return startHeartbeat(session, deps.timing, () => {
    if (child.session !== session) return;
    const state = readStat(session.pid)?.state;
    const stoppedFromOutside = state === 'T' || state === 't';
    const how = stoppedFromOutside ? ` (it was stopped from outside, /proc state ${state}: no request in flight on it is blamed)` : '';
    deps.store.recordIncident({ child: child.name, kind: 'heartbeat_missed', code: 'deadline_exceeded', message: `${child.name} did not answer ping within ${deps.timing.heartbeat_timeout_ms} ms${how}` });
    void child.killAndReap(stoppedFromOutside ? 'heartbeat missed: stopped from outside' : 'heartbeat missed', { stoppedFromOutside });
  });
}

/** Start pinging; `onMissed` runs for each ping unanswered within the timeout. Returns the function that stops it. */
export function startHeartbeat(session: ChildSession, timing: Timing, onMissed: () => void): () => void {
  const timer = setInterval(() => {
    session.channel.request('ping', {}, { timeoutMs: timing.heartbeat_timeout_ms }).catch((error: unknown) => {
      if (toCustodyError(error).code === 'deadline_exceeded') onMissed();
    });
  }, timing.heartbeat_interval_ms);
  timer.unref();
  return () => clearInterval(timer);
}
