// How the kernel shows its records on the wire: operations (operation.get,
// recover, mark_unknown; ops.list lists a row's own columns as they are) and
// grants (grant.*), assembled from the store's plain rows.
import type { Invocation } from '../shared/protocol/artifacts.js';
import type { JsonValue } from '../shared/protocol/common.js';
import type { OperationView } from '../shared/protocol/kernel-messages.js';
import type { ResultOf } from '../shared/protocol/messages.js';
import type { Kernel } from './kernel.js';
import type { GrantRow } from './store/grants-table.js';
import type { OperationRow } from './store/operations-table.js';

/** The invocation an allowed reservation binds; the supervisor records it and the executor compares it. */
export function expectedOf(operation: OperationRow): Invocation | null {
  if (operation.state === 'denied' || operation.capability_id === null || operation.capability_digest === null) return null;
  return {
    operation_id: operation.operation_id,
    request_id: operation.request_id,
    request_binding_hash: operation.request_binding_hash,
    capability_id: operation.capability_id,
    capability_digest: operation.capability_digest,
    tool: operation.tool,
    parameters_digest: operation.parameters_digest,
  };
}

export function operationView(kernel: Kernel, operation: OperationRow): OperationView {
  const { store } = kernel;
  const hold = store.holds.forOperation(operation.operation_id);
  const nonce = store.nonces.forOperation(operation.operation_id);
  const window =
    operation.window_not_before !== null && operation.window_expires_at !== null
      ? { not_before: operation.window_not_before, expires_at: operation.window_expires_at }
      : null;
  return {
    operation_id: operation.operation_id,
    request_id: operation.request_id,
    subject: operation.subject,
    tool: operation.tool,
    state: operation.state,
    capability_id: operation.capability_id,
    executor_id: operation.executor_id,
    created_at: operation.created_at,
    updated_at: operation.updated_at,
    nonce_expires_at: nonce?.expires_at ?? null,
    window,
    hold: hold
      ? {
          id: hold.hold_id,
          disposition: hold.state,
          invocations: hold.invocations,
          cost_units_held: hold.cost_units_held,
          cost_units_charged: hold.cost_units_charged,
        }
      : null,
    expected: expectedOf(operation),
    authorization: operation.authorization,
    last_receipt: store.receipts.last(operation.operation_id)?.receipt ?? null,
    output: operation.output === null ? null : (JSON.parse(operation.output) as JsonValue),
    flag: operation.flag,
  };
}

export function grantView(kernel: Kernel, grant: GrantRow): ResultOf<'grant.add'> {
  const usage = kernel.store.holds.usage(grant.capability_id);
  return {
    capability: grant.capability,
    capability_id: grant.capability_id,
    revoked_at: grant.revoked_at,
    invocations_used: usage.invocations_used,
    invocations_held: usage.invocations_held,
    cost_units_used: usage.cost_units_used,
    cost_units_held: usage.cost_units_held,
  };
}
