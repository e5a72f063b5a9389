// The executor as a child service (shared/child/runtime.ts): setup opens or
// provisions what it owns and starts the adapter host; handle routes each
// executor message kind; close waits for nothing (the runtime has drained)
// and releases the host, the stores and the lock, in that order.
import { EXIT, type ChildService } from '../shared/child/runtime.js';
import { CustodyError } from '../shared/errors.js';
import { type Logger, errorFields } from '../shared/log.js';
import { type EXECUTOR_MESSAGES } from '../shared/protocol/executor-messages.js';
import { type MessageKind, type RequestOf } from '../shared/protocol/messages.js';
import { type Preamble } from '../shared/protocol/preamble.js';
import { type StatsResult } from '../shared/protocol/stats.js';
import { type RequestContext } from '../shared/wire/server.js';
import { AdapterHost } from './adapters/host-client.js';
import { type ExecutorContext } from './context.js';
import { cancelEffect } from './handlers/cancel.js';
import { archiveReconciled, getClaim, recoverLedger } from './handlers/claims.js';
import { checkToolArguments, listTools } from './handlers/tools.js';
import { executeOnce } from './handlers/execute.js';
import { reconcileOperation } from './handlers/reconcile.js';
import { HeadWitness } from './head-witness.js';
import { Archiver } from './ledger/archive.js';
import { Ledger } from './ledger/ledger.js';
import { ReconcileBudget } from './reconcile-budget.js';
import { FRAME_ROOM_BYTES, REPORT_MIN_BYTES, reportMaxBytes } from './report.js';
import { parseExecutorSettings } from './settings.js';
import { type ExecutorState, ensureResources, openExecutorState } from './state.js';

type ExecutorKind = keyof typeof EXECUTOR_MESSAGES;

export interface ExecutorOptions {
  /** The session's frame bound: every report this executor signs must fit in an answer. */
  readonly maxFrameBytes: number;
  readonly dir: string;
  readonly resources: string;
  readonly adapterModules: readonly string[];
  /** Ends the process at once (only the entry file may). */
  readonly exit: (code: number) => never;
}

const DRAIN_MARGIN_MS = 5_000;

export async function setupExecutor(preamble: Preamble, log: Logger, options: ExecutorOptions): Promise<ChildService> {
  const settings = parseExecutorSettings(preamble.settings);
  const reportMaxBytes = reportBoundFor(options.maxFrameBytes);
  // The adapter host starts while the stores open: a restart after kill -9 is on the recovery path.
  ensureResources(options.resources);
  const hostStarting = AdapterHost.start(
    { resources: options.resources, modules: [...options.adapterModules], note_max_bytes: settings.runtime.noteMaxBytes },
    log.child({ component: 'adapter-host' }),
  );
  let state: ExecutorState;
  try {
    state = await openExecutorState({
      mode: preamble.mode,
      dir: options.dir,
      name: preamble.name,
      kernelPin: preamble.pins.kernel,
      settings: settings.provision,
    });
  } catch (error) {
    await hostStarting.then((host) => host.close()).catch(() => undefined);
    throw error;
  }
  let host: AdapterHost;
  try {
    host = await hostStarting;
  } catch (error) {
    closeStores(state);
    await state.lock.release().catch(() => undefined);
    throw error;
  }

  let open = true;
  const ledger = new Ledger(state.stores, state.lock, (error) => {
    log.error('store_replaced', errorFields(error));
    // After the refusal has been answered: the next process opens what the path names.
    setTimeout(() => options.exit(EXIT.software), 50);
  });
  const witness = new HeadWitness(ledger.head());
  ledger.onAdvanced = (head) => void witness.announce(head);
  const context: ExecutorContext = {
    ledger,
    archiver: new Archiver(ledger, state.stores.archive),
    host,
    signer: state.signer,
    settings: settings.runtime,
    reportMaxBytes,
    log,
    inFlight: new Map(),
    reconcileBudget: new ReconcileBudget({
      perTool: settings.runtime.reconcilePerTool,
      perSession: settings.runtime.reconcilePerSession,
      windowMs: settings.runtime.reconcileWindowMs,
    }),
    witness,
    dropReply: () => options.exit(EXIT.dropReply),
    isOpen: () => open,
  };
  const { config } = ledger;
  log.info('executor_ready', {
    mode: preamble.mode,
    executor_id: config.executorId,
    key_epoch: config.keyEpoch,
    claim_capacity: config.claimCapacity,
    report_max_bytes: reportMaxBytes,
    live_claims: ledger.liveCount(),
    head: ledger.head(),
    tools: [...host.descriptors.values()].map((d) => ({ tool: d.tool, contract: d.contract, problem: d.problem })),
  });
  for (const descriptor of host.descriptors.values()) {
    if (descriptor.contract === null) log.warn('adapter_cannot_run', { tool: descriptor.tool, source: descriptor.source, problem: descriptor.problem });
  }

  const longestDeadline = Math.max(
    settings.runtime.adapterDeadlineMs,
    ...Object.values(settings.runtime.adapterDeadlines),
    ...[...host.descriptors.values()].map((d) => d.deadlineMs ?? 0),
  );
  return {
    identity: { id: config.executorId, keyEpoch: config.keyEpoch, signer: state.signer },
    maxInFlight: settings.runtime.maxInFlight,
    // Losing the supervisor lets a running effect finish and retain its report, bounded by its deadline.
    drainTimeoutMs: settings.runtime.drainTimeoutMs ?? longestDeadline + DRAIN_MARGIN_MS,
    handle: (kind: MessageKind, body: unknown, request: RequestContext) => handle(context, kind as ExecutorKind | 'stats', body, request),
    head: () => ledger.head(),
    attachPeer: (peer) => witness.attach(peer),
    stopAccepting: () => log.info('executor_draining', { effects_running: context.inFlight.size }),
    close: async () => {
      await host.close();
      open = false;
      closeStores(state);
      await state.lock.release();
    },
  };
}

async function handle(context: ExecutorContext, kind: ExecutorKind | 'stats', body: unknown, request: RequestContext): Promise<unknown> {
  switch (kind) {
    case 'stats':
      return { holds: [], commit_batches: context.ledger.commitBatches() } satisfies StatsResult;
    case 'execute':
      return executeOnce(context, body as RequestOf<'execute'>, request.id);
    case 'reconcile_operation':
      return reconcileOperation(context, body as RequestOf<'reconcile_operation'>);
    case 'cancel':
      return cancelEffect(context, body as RequestOf<'cancel'>);
    case 'claims.get':
      return getClaim(context, body as RequestOf<'claims.get'>);
    case 'archive':
      return archiveReconciled(context, body as RequestOf<'archive'>);
    case 'tools':
      return listTools(context);
    case 'arguments.check':
      return checkToolArguments(context, body as RequestOf<'arguments.check'>);
    case 'ledger.recover':
      return recoverLedger(context, body as RequestOf<'ledger.recover'>);
    case 'head.witnessed':
      context.witness.acknowledge((body as RequestOf<'head.witnessed'>).head);
      return {};
    default: {
      const never: never = kind;
      throw new CustodyError('unexpected_message', `an executor does not serve ${String(never)}`);
    }
  }
}

/** Refuses a frame bound under which even a report without its output might not be delivered. */
function reportBoundFor(maxFrameBytes: number): number {
  const bound = reportMaxBytes(maxFrameBytes);
  if (bound < REPORT_MIN_BYTES) {
    throw new CustodyError(
      'config_invalid',
      `preamble limits.max_frame_bytes ${maxFrameBytes} leaves reports ${bound} bytes; an executor needs at least ${REPORT_MIN_BYTES * 2 + FRAME_ROOM_BYTES} so every report it signs can be delivered`,
    );
  }
  return bound;
}

function closeStores(state: ExecutorState): void {
  state.stores.ledger.close();
  state.stores.archive.close();
}
