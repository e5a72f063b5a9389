// reserve_start (docs/PROTOCOL.md §6): a reserve and, when it allows, the
// start naming the nonce it minted, decided in one unit of the write queue,
// so in one transaction: one commit and one round trip where the two
// messages cost two of each. Each half is the very decision its own message
// makes (reserve.ts, start.ts), so every retry — of the pair, or of either
// half alone — is answered as that message would be, byte for byte.
//
// Nothing a host could do between the two messages is lost: a supervisor
// writes nothing durable between them (ARCHITECTURE.md §6.6), and deciding
// both in one transaction only leaves out the interleavings (a sweep, a
// revocation between reserve and start) that the separate messages allow
// and the model already covers (model/README.md).
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import type { UnitContext } from '../commit-queue.js';
import type { Kernel } from '../kernel.js';
import { reserve } from './reserve.js';
import { start } from './start.js';

export function reserveStart(kernel: Kernel, request: RequestOf<'reserve_start'>, context: UnitContext): ResultOf<'reserve_start'> {
  const { executor_id: executorId, request_binding_hash: hostBinding, ...reserveRequest } = request;
  const reserved = reserve(kernel, reserveRequest, context);
  if (reserved.verdict !== 'allow' || reserved.nonce === null) return { reserve: reserved, start: null };
  // The host checks the reservation's invocation against its own log before it acts on an authorization
  // (ARCHITECTURE.md §6.2); with the two decided at once, the kernel checks the binding first, so a
  // reservation the host would disown is refused, its hold released, and no authorization signed.
  const started = start(
    kernel,
    { request_id: request.request_id, nonce_id: reserved.nonce.id, arguments: request.arguments, ...(executorId === undefined ? {} : { executor_id: executorId }) },
    context,
    hostBinding,
  );
  return { reserve: reserved, start: started };
}
