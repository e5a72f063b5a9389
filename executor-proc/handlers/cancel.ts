// Cooperative cancel (ARCHITECTURE.md §6.2):
// the acknowledgement `cancelled: true` is sent only when the adapter has
// stopped and said no effect follows — its execute returned `cancelled` and
// the failed_before_effect report is retained. Asking is not stopping: an
// adapter that finishes anyway, takes too long or fails unclearly leaves
// `cancelled: false`, and the execute's own answer says what happened.
import { CustodyError } from '../../shared/errors.js';
import type { RequestOf, ResultOf } from '../../shared/protocol/messages.js';
import { type ExecutorContext, withinDeadline } from '../context.js';

export async function cancelEffect(context: ExecutorContext, body: RequestOf<'cancel'>): Promise<ResultOf<'cancel'>> {
  const effect = context.inFlight.get(body.target);
  if (!effect) return { cancelled: false };
  if (!effect.cancellable) {
    throw new CustodyError('not_cancellable', `adapter ${effect.tool} is not cancellable; operation ${effect.operationId} runs to its end or its deadline`);
  }
  effect.cancelRequested = true;
  context.host.cancel(effect.hostCallId);
  const status = await withinDeadline(effect.ended, context.settings.cancelWaitMs);
  const cancelled = status === 'failed_before_effect';
  context.log.info('cancel_answered', { operation_id: effect.operationId, cancelled, status: status ?? null });
  return { cancelled };
}
