// Heartbeats: a ping every interval; one not answered within the timeout
// means the child hung. `onMissed` decides what follows (kill, reap, restart).
import { toCustodyError } from '../../shared/errors.js';
import { type ChildSession } from '../../shared/child/spawn.js';
import { type Timing } from '../config/schema.js';

/** Start pinging; returns the function that stops it. */
export function startHeartbeat(session: ChildSession, timing: Timing, onMissed: () => void): () => void {
  const timer = setInterval(() => {
    session.channel.request('ping', {}, { timeoutMs: timing.heartbeat_timeout_ms }).catch((error: unknown) => {
      if (toCustodyError(error).code === 'deadline_exceeded') onMissed();
    });
  }, timing.heartbeat_interval_ms);
  timer.unref();
  return () => clearInterval(timer);
}
