// Messages between the executor and its adapter host (the helper process
// adapters run in; see host-client.ts for why). Node's IPC channel carries
// them as JSON. The executor checks everything the host sends with these
// closed schemas: adapter code runs in the host, and a bad message from it
// must not become a signed report.
import { z } from 'zod';
import { jsonObject, jsonValue, nonNegativeInt } from '../../shared/protocol/common.js';
import { CONTRACTS } from './contract.js';

export const HOST_ARGS_FLAG = '--host-config';

/** Given to the host on its command line (it holds no secrets). */
export const hostConfigSchema = z.strictObject({
  resources: z.string().min(1),
  modules: z.array(z.string().min(1)),
  note_max_bytes: z.number().int().min(1),
});
export type HostConfig = z.infer<typeof hostConfigSchema>;

// ------------------------------------------------------------ executor → host

export type HostRequest =
  | { readonly type: 'validate'; readonly id: number; readonly tool: string; readonly arguments: Record<string, unknown> }
  | { readonly type: 'execute'; readonly id: number; readonly tool: string; readonly operation_key: string; readonly arguments: Record<string, unknown> }
  | { readonly type: 'reconcile'; readonly id: number; readonly tool: string; readonly operation_key: string }
  | { readonly type: 'cancel'; readonly id: number };

// ------------------------------------------------------------ host → executor

export const adapterDescriptorSchema = z.strictObject({
  tool: z.string(),
  contract: z.enum(CONTRACTS).nullable(),
  problem: z.string().nullable(),
  cancellable: z.boolean(),
  reconcilable: z.boolean(),
  deadlineMs: z.number().int().min(1).nullable(),
  source: z.string(),
  description: z.string().max(1024).nullable(),
  inputSchema: jsonObject.nullable(),
  maxArgumentBytes: z.number().int().min(1),
});

export const executeResultSchema = z.discriminatedUnion('outcome', [
  z.strictObject({ outcome: z.literal('applied'), output: jsonValue.optional(), costUnits: nonNegativeInt.optional() }),
  z.strictObject({ outcome: z.literal('not_applied'), reason: z.string().max(4096) }),
  z.strictObject({ outcome: z.literal('cancelled') }),
]);
export type HostExecuteResult = z.infer<typeof executeResultSchema>;

export const reconcileResultSchema = z.discriminatedUnion('outcome', [
  z.strictObject({ outcome: z.literal('applied'), output: jsonValue.optional() }),
  z.strictObject({ outcome: z.literal('not_applied') }),
  z.strictObject({ outcome: z.literal('indeterminate'), reason: z.string().max(4096) }),
]);
export type HostReconcileResult = z.infer<typeof reconcileResultSchema>;

export const hostMessageSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('ready'), adapters: z.array(adapterDescriptorSchema) }),
  z.strictObject({ type: z.literal('load_failed'), message: z.string() }),
  /**
   * A call's answer. The IPC channel's JSON.parse made `value` JSON already, and the executor checks it with
   * the closed schema of the call (executeResultSchema, reconcileResultSchema) before using it, so it is not
   * walked a second time here: that second walk of every output was most of the executor's schema time
   * (docs/PERFORMANCE.md "Hot-path CPU").
   */
  z.strictObject({ type: z.literal('result'), id: z.number().int(), value: z.unknown() }),
  /** A call that failed: the code says how (arguments_invalid, adapter_unknown, indeterminate for a thrown effect). */
  z.strictObject({ type: z.literal('failure'), id: z.number().int(), code: z.string().max(64), message: z.string().max(4096) }),
  z.strictObject({
    type: z.literal('log'),
    level: z.enum(['debug', 'info', 'warn', 'error']),
    event: z.string().max(128),
    fields: jsonObject,
  }),
]);
export type HostMessage = z.infer<typeof hostMessageSchema>;
