// Executor pools (README "Executor pools"): every configured executor whose
// tool patterns cover a tool is a candidate for it. A new operation is
// started on a running candidate with the fewest operations in flight; ties
// go to the one routed to least so far, then to the first name, so the
// choice is a pure function of the counts (stable, testable) and a stream of
// one-at-a-time calls still spreads. A failed, backing-off, starting or
// stopping candidate is never chosen. Until the kernel commits the start the
// choice is only the supervisor's: a retried start may name another
// candidate; once an authorization exists it names its executor, and the
// operation stays there (the kernel refuses any other).
//
// When no candidate is running, a caller waits up to timing.executor_wait_ms
// for one to come up and is then refused with executor_unavailable.
import { setTimeout as sleep } from 'node:timers/promises';
import { CustodyError } from '../../shared/errors.js';
import { toolPatternCovers } from '../../shared/protocol/common.js';
import { isStopped } from '../../shared/child/proc-stat.js';
import type { ChildState } from './child-handle.js';

/** What the pool needs of an executor's handle. */
export interface PoolChild {
  readonly name: string;
  readonly state: ChildState;
  /** Why a failed child failed, if it did. */
  readonly failure?: { readonly code: string } | null;
  /** The process it runs as, when it runs (a member stopped from outside is passed over). */
  readonly session?: { readonly pid: number } | null;
}

export interface PoolMember {
  readonly name: string;
  /** The identity the kernel's pin knows it by (supervisor.db pins). */
  readonly identityId: string;
  readonly tools: readonly string[];
  readonly child: PoolChild;
}

export interface PoolCounts {
  readonly in_flight: number;
  readonly completed: number;
  readonly routed: number;
}

/** How long what /proc said of a member being stopped is taken as still true. */
const STOPPED_LOOK_MS = 100;

/** How often a waiting caller looks again for a running candidate. */
const WAIT_POLL_MS = 25;

export class ExecutorPool {
  readonly #members: readonly PoolMember[];
  readonly #byIdentity = new Map<string, PoolMember>();
  /** Request id → the executor (identity id) it is in flight on. */
  readonly #inFlight = new Map<string, string>();
  readonly #completed = new Map<string, number>();
  readonly #routed = new Map<string, number>();
  readonly #waitMs: () => number;
  readonly #stoppedSeen = new Map<PoolMember, { pid: number; at: number; stopped: boolean }>();

  constructor(members: readonly PoolMember[], waitMs: () => number) {
    this.#members = [...members].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const member of this.#members) this.#byIdentity.set(member.identityId, member);
    this.#waitMs = waitMs;
  }

  /** Every configured executor that serves `tool`, by name. */
  candidates(tool: string): PoolMember[] {
    return this.#members.filter((member) => member.tools.some((pattern) => toolPatternCovers(pattern, tool)));
  }

  /** The running candidate to route to now, or undefined when none is running. */
  choose(tool: string): PoolMember | undefined {
    let best: PoolMember | undefined;
    for (const member of this.candidates(tool)) {
      if (member.child.state !== 'running') continue;
      if (!best || this.#rank(member) < this.#rank(best)) best = member;
    }
    // Stopped from outside (SIGSTOP, a debugger), a member answers nothing until its heartbeat gets it killed: a call
    // routed to it would wait for that while another could serve it now. Looked at only where there is a choice.
    if (best && this.#isStopped(best)) {
      const others = this.candidates(tool).filter((member) => member !== best && member.child.state === 'running' && !this.#isStopped(member));
      return others.reduce<PoolMember | undefined>((chosen, member) => (!chosen || this.#rank(member) < this.#rank(chosen) ? member : chosen), undefined) ?? best;
    }
    return best;
  }

  /** Whether a member's process is stopped, read from /proc at most every STOPPED_LOOK_MS (a read costs tens of µs). */
  #isStopped(member: PoolMember): boolean {
    const pid = member.child.session?.pid;
    if (pid === undefined || this.#members.length < 2) return false;
    const now = performance.now();
    const seen = this.#stoppedSeen.get(member);
    if (seen && seen.pid === pid && now - seen.at < STOPPED_LOOK_MS) return seen.stopped;
    const stopped = isStopped(pid);
    this.#stoppedSeen.set(member, { pid, at: now, stopped });
    return stopped;
  }

  /**
   * A running candidate, waiting up to timing.executor_wait_ms for one;
   * undefined when no executor is configured for the tool (the kernel names
   * that refusal). Throws executor_unavailable past the bound.
   */
  async pick(tool: string, signal?: AbortSignal): Promise<PoolMember | undefined> {
    const candidates = this.candidates(tool);
    if (candidates.length === 0) return undefined;
    const waitMs = this.#waitMs();
    const deadline = performance.now() + waitMs;
    for (;;) {
      const chosen = this.choose(tool);
      if (chosen) return chosen;
      if (signal?.aborted) throw new CustodyError('shutting_down', 'the service is stopping');
      if (performance.now() >= deadline) {
        const states = candidates.map((member) => `${member.name} ${member.child.state}`).join(', ');
        // A store restored from a backup is not mended by a restart: say the way back instead.
        const rolledBack = candidates.filter((member) => member.child.failure?.code === 'store_rolled_back').map((member) => member.name);
        const way =
          rolledBack.length > 0
            ? `${rolledBack.join(', ')} refused a store restored from an older copy (store_rolled_back): a restart is refused again; put back the newest copy, or run custody recover-rollback ${rolledBack[0]} (docs/ROLLBACK.md), then ask again with the same name`
            : 'see custody status, restart one with custody restart NAME, and ask again with the same name';
        throw new CustodyError('executor_unavailable', `no executor serving ${tool} is running after ${waitMs} ms (timing.executor_wait_ms): ${states}; nothing was started — ${way}`);
      }
      await sleep(Math.min(WAIT_POLL_MS, Math.max(1, deadline - performance.now())));
    }
  }

  /** Count a request as in flight on the executor with this identity (idempotent; a move re-counts it). */
  track(requestId: string, identityId: string, routed = false): void {
    if (!this.#byIdentity.has(identityId)) return;
    this.#inFlight.set(requestId, identityId);
    if (routed) this.#routed.set(identityId, (this.#routed.get(identityId) ?? 0) + 1);
  }

  /** The request left its executor; `completed` when it came back with a signed report. */
  release(requestId: string, completed: boolean): void {
    const identityId = this.#inFlight.get(requestId);
    if (identityId === undefined) return;
    this.#inFlight.delete(requestId);
    if (completed) this.#completed.set(identityId, (this.#completed.get(identityId) ?? 0) + 1);
  }

  memberByIdentity(identityId: string): PoolMember | undefined {
    return this.#byIdentity.get(identityId);
  }

  /** Per executor name: operations in flight on it, completed on it and routed to it since the service started. */
  counts(name: string): PoolCounts {
    const member = this.#members.find((m) => m.name === name);
    if (!member) return { in_flight: 0, completed: 0, routed: 0 };
    return {
      in_flight: this.#inFlightOn(member.identityId),
      completed: this.#completed.get(member.identityId) ?? 0,
      routed: this.#routed.get(member.identityId) ?? 0,
    };
  }

  #inFlightOn(identityId: string): number {
    let count = 0;
    for (const id of this.#inFlight.values()) if (id === identityId) count++;
    return count;
  }

  /** Fewest in flight, then fewest routed, then the name (members are sorted by name: the first of equals wins). */
  #rank(member: PoolMember): number {
    return this.#inFlightOn(member.identityId) * 1e9 + (this.#routed.get(member.identityId) ?? 0);
  }
}
