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
] as const;
export type RequestPhase = (typeof REQUEST_PHASES)[number];

// There is no way back from reconciling to executing: once the outcome is
// in doubt it is only ever asked about, never run again.
export const REQUEST_MACHINE = defineMachine<RequestPhase>('request', {
  received: ['reserved', 'authorized', 'refused', 'settled'],
  reserved: ['authorized', 'refused', 'settled'],
  authorized: ['executing', 'reconciling'],
  executing: ['reported', 'reconciling'],
  reconciling: ['reported'],
  reported: ['settled'],
  settled: [],
  refused: [],
});

export const FINAL_PHASES: ReadonlySet<RequestPhase> = new Set(['settled', 'refused']);
