// The API's bound on open connections (README "Bounds", docs/SECURITY.md
// "Connections"). Every connection holds one file descriptor of the
// supervisor, and so do the pipes of every child it starts: a client that
// opens connections until the process runs out of descriptors would leave a
// crashed child with no pipes to restart on. Node's `server.maxConnections`
// closes each connection past the bound as soon as it is accepted (no HTTP
// answer: nothing has been read yet), so the supervisor's descriptors stay
// below its limit whatever clients do.
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { Logger } from '../../shared/log.js';
import { ThrottledTally } from '../throttled-tally.js';

/**
 * Descriptors kept for everything but connections: the stores, each child's
 * three pipes, the one-shot reconciliation sessions, Node's own. Or half the
 * limit, when the limit is below twice this.
 */
export const DESCRIPTOR_HEADROOM = 256;

/** How often a run of dropped connections is logged, at most. */
const DROP_LOG_INTERVAL_MS = 10_000;

/** This process's soft limit on open files (what EMFILE is measured against), or null where /proc does not say. */
export function openFileLimit(limitsText?: string): number | null {
  let text = limitsText;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/self/limits', 'utf8');
    } catch {
      return null;
    }
  }
  const soft = /^Max open files\s+(\d+|unlimited)\s/m.exec(text)?.[1];
  return soft === undefined || soft === 'unlimited' ? null : Number(soft);
}

/** The bound in force: the configured one, lowered to leave the headroom below the descriptor limit. */
export function connectionBound(configured: number, limit: number | null): { readonly bound: number; readonly lowered: boolean } {
  if (limit === null) return { bound: configured, lowered: false };
  const headroom = Math.min(DESCRIPTOR_HEADROOM, Math.floor(limit / 2));
  const most = Math.max(1, limit - headroom);
  return configured > most ? { bound: most, lowered: true } : { bound: configured, lowered: false };
}

/**
 * Bound the server's connections, saying so when the limit lowered the
 * bound, and log the connections it drops: the first of a run at once, then
 * at most one line per interval with how many were dropped since, the last
 * of a run included (a timer says it once the interval has passed).
 */
export function boundConnections(server: Server, configured: number, log: Logger, onDrop: () => void, intervalMs = DROP_LOG_INTERVAL_MS): number {
  const limit = openFileLimit();
  const { bound, lowered } = connectionBound(configured, limit);
  if (lowered && limit !== null) {
    log.warn('api_connections_lowered', {
      configured,
      bound,
      open_file_limit: limit,
      message: `bounds.max_connections ${configured} leaves fewer than ${limit - bound} of the ${limit} file descriptors this process may open for its stores and children; ${bound} connections at most. Raise the limit (ulimit -n, LimitNOFILE=) or lower the bound`,
    });
  }
  server.maxConnections = bound;
  const drops = new ThrottledTally(intervalMs, (dropped) =>
    log.warn('api_connections_full', {
      bound,
      dropped,
      message: `${bound} connections are open (bounds.max_connections): ${dropped} more closed unanswered since the last line; a client should reuse connections (keep-alive) or wait and retry`,
    }),
  );
  server.on('drop', () => {
    onDrop();
    drops.add();
  });
  server.on('close', () => drops.close());
  return bound;
}
