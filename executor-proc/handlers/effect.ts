// Step 4 of execute_once: run the adapter in the adapter host, with no
// transaction open, and say what its answer proves. `applied` proves the
// effect; `not_applied` and `cancelled` prove there is none and will be none
// (failed_before_effect: the kernel releases the hold); anything else —
// a throw, a malformed answer, a host that died — proves nothing, and the
// claim stays without a report for reconciliation to decide.
import type { JsonValue } from '../../shared/protocol/common.js';
import type { AdapterDescriptor } from '../adapters/contract.js';
import { AdapterHost } from '../adapters/host-client.js';
import type { ExecutorContext } from '../context.js';
import { wellFormed, wellFormedValue } from '../../shared/text/cut.js';

export type EffectEnd =
  | {
      readonly kind: 'observed';
      readonly status: 'completed' | 'failed_before_effect';
      readonly output: JsonValue | null;
      readonly costUnits: number | null;
      readonly cancelled: boolean;
    }
  | { readonly kind: 'unclear'; readonly reason: string };

export function runEffect(
  context: ExecutorContext,
  descriptor: AdapterDescriptor,
  operationId: string,
  args: Record<string, unknown>,
): { readonly hostCallId: number; readonly end: Promise<EffectEnd> } {
  const call = context.host.call({ type: 'execute', tool: descriptor.tool, operation_key: operationId, arguments: args });
  const end = call.answer.then((answer): EffectEnd => {
    if (!answer.ok) return { kind: 'unclear', reason: answer.error.message };
    let result;
    try {
      result = AdapterHost.executeResult(answer.value);
    } catch (error) {
      return { kind: 'unclear', reason: (error as Error).message };
    }
    switch (result.outcome) {
      case 'applied':
        // An adapter's lone surrogates (canonical JSON cannot carry one) become U+FFFD: the effect's report is still signed.
        return { kind: 'observed', status: 'completed', output: wellFormedValue(result.output ?? null), costUnits: result.costUnits ?? null, cancelled: false };
      case 'not_applied':
        return { kind: 'observed', status: 'failed_before_effect', output: { failure: wellFormed(result.reason) }, costUnits: null, cancelled: false };
      case 'cancelled':
        return { kind: 'observed', status: 'failed_before_effect', output: { cancelled: true }, costUnits: null, cancelled: true };
    }
  });
  return { hostCallId: call.id, end };
}
