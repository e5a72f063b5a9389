// Executor pins: which executor identity (id, public key, key epoch) the
// kernel addresses authorizations to and accepts reports from. executor.pin
// makes the first pin of an executor and updates its tools; a later key epoch
// is pinned only through a rotation statement signed by the pinned key
// (pin.rotate, rotation.ts). Older epochs stay pinned rows: reports signed
// under them still verify; new authorizations go to the current one.
import { publicKeyFromHex } from '../shared/crypto/ed25519.js';
import { CustodyError } from '../shared/errors.js';
import { toolPatternCovers } from '../shared/protocol/common.js';
import type { RequestOf, ResultOf } from '../shared/protocol/messages.js';
import type { UnitContext } from './commit-queue.js';
import type { Kernel } from './kernel.js';
import type { PinRow } from './store/pins-table.js';

export function pinExecutor(kernel: Kernel, request: RequestOf<'executor.pin'>, context: UnitContext): ResultOf<'executor.pin'> {
  const { now } = context;
  // Refuses a malformed, non-canonical or small-order key (key_invalid) before anything is recorded.
  publicKeyFromHex(request.public_key);
  const { pins } = kernel.store;
  const current = pins.current(request.executor_id);
  const tools = [...new Set(request.tools)];
  if (current && request.key_epoch < current.key_epoch) {
    throw new CustodyError(
      'epoch_stale',
      `executor ${request.executor_id} is pinned at key epoch ${current.key_epoch}; epoch ${request.key_epoch} is older and cannot be pinned`,
    );
  }
  if (current && request.key_epoch > current.key_epoch) {
    throw new CustodyError(
      'rotation_invalid',
      `executor ${request.executor_id} is pinned at key epoch ${current.key_epoch}; epoch ${request.key_epoch} is pinned only through a rotation statement signed by the pinned key (custody executor rotate ${request.executor_id})`,
    );
  }
  if (current && request.key_epoch === current.key_epoch) {
    if (current.public_key !== request.public_key) {
      throw new CustodyError(
        'identity_mismatch',
        `executor ${request.executor_id} epoch ${current.key_epoch} is pinned to key ${current.public_key.slice(0, 16)}…, not ${request.public_key.slice(0, 16)}…; a new key needs a higher epoch`,
      );
    }
    pins.setTools(request.executor_id, request.key_epoch, tools);
    return resultOf(pins.current(request.executor_id)!);
  }
  const row: PinRow = { executor_id: request.executor_id, key_epoch: request.key_epoch, public_key: request.public_key, tools: JSON.stringify(tools), pinned_at: now };
  pins.insert(row);
  context.whenCommitted(() => kernel.log.info('executor_pinned', { executor_id: row.executor_id, key_epoch: row.key_epoch, superseded_epoch: current?.key_epoch ?? null }));
  return resultOf(row);
}

function resultOf(row: PinRow): ResultOf<'executor.pin'> {
  return { executor_id: row.executor_id, public_key: row.public_key, key_epoch: row.key_epoch, pinned_at: row.pinned_at };
}

function toolsOf(pin: PinRow): string[] {
  return JSON.parse(pin.tools) as string[];
}

/**
 * The executor that serves a tool for an operation. Several executors may
 * serve one tool (`custody init --executors N`); the operation id picks one
 * of them, so operations spread across executors and a retried reserve of
 * the same operation addresses the same one. This is only the default: the
 * supervisor routes by health and load and names the executor in `start`
 * (decisions/start.ts, README "Executor pools").
 */
export function executorFor(kernel: Kernel, tool: string, operationId: string): PinRow | undefined {
  const candidates = kernel.store.pins.allCurrent().filter((pin) => servesTool(pin, tool));
  if (candidates.length === 0) return undefined;
  return candidates[Number.parseInt(operationId.slice(0, 8), 16) % candidates.length];
}

export function servesTool(pin: PinRow, tool: string): boolean {
  return toolsOf(pin).some((pattern) => toolPatternCovers(pattern, tool));
}
