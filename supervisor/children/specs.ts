// How each configured child is run: its argv (the build's own entry points by
// default, or any command from custody.json that speaks the wire on stdio),
// its settings and its pins.
import path from 'node:path';
import { installedProgram } from '../../shared/entry-points.js';
import type { JsonObject } from '../../shared/protocol/common.js';
import { ADAPTER_DEADLINE_MARGIN_MS, type CustodyConfig, type ExecutorConfig } from '../config/schema.js';
import type { StatePaths } from '../paths.js';
import type { ChildSpec } from './child-handle.js';

export function kernelArgv(config: CustodyConfig, paths: StatePaths): string[] {
  return config.kernel.argv ?? [process.execPath, installedProgram('kernel'), '--dir', paths.kernelDir];
}

export function executorArgv(executor: ExecutorConfig, paths: StatePaths): string[] {
  if (executor.argv) return executor.argv;
  const adapters = executor.adapters.flatMap((module) => ['--adapter', path.resolve(paths.root, module)]);
  return [process.execPath, installedProgram('executor'), '--dir', paths.executorDir(executor.name), '--resources', paths.resourcesDir, ...adapters];
}


/** Settings an executor receives in its preamble: its identity, capacity and deadlines, then the operator's own. */
export function executorSettings(executor: ExecutorConfig): JsonObject {
  const { '*': fallback = 30_000, ...perTool } = executor.deadlines_ms;
  return {
    executor_id: executor.name,
    key_epoch: executor.key_epoch,
    claim_capacity: executor.claim_capacity,
    max_in_flight: executor.max_in_flight,
    adapter_deadline_ms: fallback + ADAPTER_DEADLINE_MARGIN_MS,
    adapter_deadlines: Object.fromEntries(Object.entries(perTool).map(([tool, ms]) => [tool, ms + ADAPTER_DEADLINE_MARGIN_MS])),
    ...executor.settings,
  };
}

export function kernelSpec(config: CustodyConfig, paths: StatePaths): ChildSpec {
  return {
    name: 'kernel',
    role: 'kernel',
    argv: kernelArgv(config, paths),
    settings: config.kernel.settings,
    pins: { kernel: null },
    storeDir: config.kernel.argv ? null : paths.kernelDir,
    maxInFlight: config.bounds.kernel_max_in_flight,
  };
}

export function executorSpec(executor: ExecutorConfig, config: CustodyConfig, paths: StatePaths, kernelPublicKey: string): ChildSpec {
  return {
    name: executor.name,
    role: 'executor',
    argv: executorArgv(executor, paths),
    settings: executorSettings(executor),
    pins: { kernel: kernelPublicKey },
    storeDir: executor.argv ? null : paths.executorDir(executor.name),
    maxInFlight: executor.max_in_flight,
  };
}
