// The supervisor's view of a client request, as data. The kernel and the
// executor hold the truth; this machine records how far the supervisor has
// carried a request so that a restarted supervisor knows where to resume.
import { defineMachine } from '../../shared/state-machine.js';

export const REQUEST_PHASES = [
  'received', //    logged; nothing asked yet
  'reserved', //    the kernel reserved it (hold placed, nonce minted)
  'authorized', //  the kernel committed the start; the authorization is retained
  'executing', //   an execute was sent; the executor may be acting
  'reconciling', // the outcome is being asked of the executor (watchdog, lost reply, unknown)
  'reported', //    a signed report is retained; the kernel must settle it
  'settled', //     the kernel settled it: completed, released or finalization denied
  'refused', //     the kernel refused it before any effect could happen
  'quarantined', // parked: its handling crashed or poisoned a child twice (docs/POISON-AND-DISK.md)
] as const;
export type RequestPhase = (typeof REQUEST_PHASES)[number];

// There is no way back from reconciling to executing: once the outcome is
// in doubt it is only ever asked about, never run again.
//
// Any open phase may be parked as `quarantined`. Only an operator's release
// (`custody reconcile NAME`) leaves it, to the phase its stored columns prove
// (releasePhaseOf): before an authorization it is asked of the kernel again;
// after one it is only ever reconciled, never executed again.
export const REQUEST_MACHINE = defineMachine<RequestPhase>('request', {
  received: ['reserved', 'authorized', 'refused', 'settled', 'quarantined'],
  reserved: ['authorized', 'refused', 'settled', 'quarantined'],
  authorized: ['executing', 'reconciling', 'quarantined'],
  executing: ['reported', 'reconciling', 'quarantined'],
  reconciling: ['reported', 'quarantined'],
  reported: ['settled', 'quarantined'],
  settled: [],
  refused: [],
  quarantined: ['received', 'reserved', 'reconciling', 'reported'],
});

/** Where a released quarantined request resumes: the furthest phase its retained artifacts prove. */
export function releasePhaseOf(row: { readonly nonce_id: string | null; readonly authorization: string | null; readonly report: string | null }): RequestPhase {
  if (row.report) return 'reported';
  if (row.authorization) return 'reconciling';
  return row.nonce_id ? 'reserved' : 'received';
}

export const FINAL_PHASES: ReadonlySet<RequestPhase> = new Set(['settled', 'refused']);

/**
 * The phases a restarted supervisor resumes: neither final nor parked. Read
 * by phase through requests_by_phase, so a start costs the requests in
 * flight, not the history (docs/PERFORMANCE.md "History on the start path").
 */
export const OPEN_PHASES: readonly RequestPhase[] = REQUEST_PHASES.filter((phase) => !FINAL_PHASES.has(phase) && phase !== 'quarantined');

/** Open phases whose request the kernel does not list as in doubt (operations/recovery.ts carries them on): before its start, or after its report. */
export const BEFORE_OR_AFTER_KERNEL: readonly RequestPhase[] = ['received', 'reserved', 'reported'];
