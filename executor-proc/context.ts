// What every handler of one executor session shares: its ledger, archive,
// adapter host, key, bounds and the table of effects in flight.
import type { Signer } from '../shared/crypto/ed25519.js';
import { CustodyError } from '../shared/errors.js';
import type { Logger } from '../shared/log.js';
import { withTimeout } from '../shared/timeout.js';
import type { ReportStatus } from '../shared/protocol/artifacts.js';
import type { AdmittedArguments } from './admitted-arguments.js';
import type { ReportBound } from './report.js';
import type { AdapterDescriptor } from './adapters/contract.js';
import type { AdapterHost } from './adapters/host-client.js';
import type { HeadWitness } from './head-witness.js';
import type { Archiver } from './ledger/archive.js';
import type { Ledger } from './ledger/ledger.js';
import type { ReconcileBudget } from './reconcile-budget.js';
import type { RuntimeSettings } from '../shared/protocol/executor-settings.js';

/** An execute whose adapter is running, by the frame id of its request (the target of `cancel`). */
export interface InFlightEffect {
  readonly operationId: string;
  readonly tool: string;
  readonly hostCallId: number;
  readonly cancellable: boolean;
  cancelRequested: boolean;
  /** The status retained when the effect ended (null: none, the outcome is unknown). */
  readonly ended: Promise<ReportStatus | null>;
}

export interface ExecutorContext {
  readonly ledger: Ledger;
  readonly archiver: Archiver;
  readonly host: AdapterHost;
  /** Arguments the adapter admitted at arguments.check, for the execute that follows (admitted-arguments.ts). */
  readonly admitted: AdmittedArguments;
  /** The key of the current epoch; key.rotate replaces it (handlers/rotation.ts). */
  signer: Signer;
  /** The executor's directory (executor.key, ledger.db): where a rotation makes the next key. */
  readonly dir: string;
  readonly settings: RuntimeSettings;
  /** The largest and deepest report this session's frames can always carry (report.ts reportBoundOf). */
  readonly reportBound: ReportBound;
  readonly log: Logger;
  readonly inFlight: Map<string, InFlightEffect>;
  readonly reconcileBudget: ReconcileBudget;
  /** The supervisor's witness of the ledger head (docs/ROLLBACK.md). */
  readonly witness: HeadWitness;
  /** The lost-reply drill: end the process with exit code 75, now. */
  readonly dropReply: () => never;
  /** False once the stores are closed: a late effect can no longer be recorded. */
  isOpen(): boolean;
}

/** The adapter for a tool, refused by name when there is none or it declared no contract. */
export function runnableAdapter(context: ExecutorContext, tool: string): AdapterDescriptor {
  const descriptor = context.host.descriptors.get(tool);
  if (!descriptor) {
    const served = [...context.host.descriptors.keys()].join(', ');
    throw new CustodyError('adapter_unknown', `no adapter serves tool ${tool} on executor ${context.ledger.config.executorId} (it serves ${served})`);
  }
  if (descriptor.contract === null) {
    throw new CustodyError('adapter_contract_missing', `adapter ${tool} (${descriptor.source}) ${descriptor.problem ?? 'declares no contract'}; it cannot run`);
  }
  return descriptor;
}

export function deadlineFor(context: ExecutorContext, descriptor: AdapterDescriptor): number {
  return context.settings.adapterDeadlines[descriptor.tool] ?? descriptor.deadlineMs ?? context.settings.adapterDeadlineMs;
}

/** Whether an effect for this operation is running in this process. */
export function effectRunning(context: ExecutorContext, operationId: string): boolean {
  for (const effect of context.inFlight.values()) if (effect.operationId === operationId) return true;
  return false;
}

/** A promise, or `undefined` when the deadline came first (shared/timeout.ts). */
export function withinDeadline<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  return withTimeout(work, ms, () => undefined);
}
