// Refusing before reserving. A call whose tool no executor serves is refused
// at once (tool_unknown): the kernel would name the missing grant first. A
// call whose arguments the adapter refuses (its byte bound, its schema) or
// whose tool no adapter serves could only be reserved, dispatched, refused by
// the executor before any claim and then reconciled as never_claimed — the
// caller would learn "released", not why.
// So a new request is first shown to the executor that serves its tool
// (`arguments.check`, the adapter's own check, the one execute runs first);
// a refusal is answered with its cause and nothing is logged or reserved.
// A repeated request id is not checked again (its first answer stands), and
// an executor that cannot be asked does not block the call: execute checks
// the same things before it claims, and refuses with a signed never_claimed
// report that carries the cause, which the kernel settles as released with
// the cause as its reason.
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { faultArmed } from '../../shared/fault.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import type { Service } from '../service.js';

const CHECK_TIMEOUT_MS = 10_000;
const ARGUMENT_REFUSALS: ReadonlySet<string> = new Set(['arguments_invalid', 'arguments_too_large']);
const ADAPTER_REFUSALS: ReadonlySet<string> = new Set(['adapter_unknown', 'adapter_contract_missing']);

export async function refuseBeforeReserve(service: Service, requestId: string | undefined, tool: string, args: JsonObject): Promise<void> {
  if (requestId !== undefined && service.store.getRequest(requestId)) return;
  const serving = service.pool.candidates(tool);
  // The real cause first: asked of the kernel, a tool nobody serves would be refused for want of a grant, and a grant added for it would change nothing.
  if (serving.length === 0) {
    throw new CustodyError('tool_unknown', `no executor serves ${tool}: the tools served are those custody.json's executors[].tools name (GET /v1/tools lists them); nothing was recorded`);
  }
  // Test switch (docs/RELIABILITY.md): as if the executor could not be asked.
  if (faultArmed('supervisor', 'skip_arguments_check')) return;
  // Executor pools: wait (bounded) for a running executor of the tool, else executor_unavailable, before anything is logged.
  const chosen = await service.pool.pick(tool);
  const executor = chosen && service.executors.get(chosen.name);
  if (!executor) return; // the kernel names the refusal (no grant, no executor)
  try {
    await executor.request('arguments.check', { tool, arguments: args }, { timeoutMs: CHECK_TIMEOUT_MS, waitMs: 0 });
  } catch (error) {
    const failure = toCustodyError(error);
    // With one executor for the tool, its adapters are the tool's; with several, only the arguments' verdict is certain.
    if (ARGUMENT_REFUSALS.has(failure.code) || (serving.length === 1 && ADAPTER_REFUSALS.has(failure.code))) {
      throw new CustodyError(failure.code, `${failure.message}; nothing was reserved`);
    }
    service.log.info('arguments_check_skipped', { tool, executor: executor.name, code: failure.code });
  }
}
