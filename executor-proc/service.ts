// The executor as a child service (shared/child/runtime.ts): setup opens or
// provisions what it owns and starts the adapter host; handle routes each
// executor message kind; close waits for nothing (the runtime has drained)
// and releases the host, the stores and the lock, in that order.
import { CHILD_EXIT } from '../shared/exit-codes.js';
import type { ChildService } from '../shared/child/runtime.js';
import { CustodyError } from '../shared/errors.js';
import { type Logger, errorFields } from '../shared/log.js';
import { EXECUTOR_MESSAGES } from '../shared/protocol/executor-messages.js';
import type { MessageKind } from '../shared/protocol/messages.js';
import { type HandlerMap, dispatch } from '../shared/dispatch.js';
import type { Preamble } from '../shared/protocol/preamble.js';
import type { RequestContext } from '../shared/wire/server.js';
import { AdapterHost } from './adapters/host-client.js';
import { AdmittedArguments } from './admitted-arguments.js';
import type { ExecutorContext } from './context.js';
import { cancelEffect } from './handlers/cancel.js';
import { archiveReconciled, getClaim, listLive, recoverLedger } from './handlers/claims.js';
import { checkToolArguments, listTools } from './handlers/tools.js';
import { executeOnce } from './handlers/execute.js';
import { reconcileOperation } from './handlers/reconcile.js';
import { kernelRotated, keyStatements, rotateKey } from './handlers/rotation.js';
import { HeadWitness } from './head-witness.js';
import { Archiver } from './ledger/archive.js';
import { Ledger } from './ledger/ledger.js';
import { ReconcileBudget } from './reconcile-budget.js';
import { FRAME_ROOM_BYTES, REPORT_MIN_BYTES, type ReportBound, reportBoundOf } from './report.js';
import { type ExecutorSettings, parseExecutorSettings } from '../shared/protocol/executor-settings.js';
import { type ExecutorState, ensureResources, openExecutorState } from './state.js';

type ExecutorKind = keyof typeof EXECUTOR_MESSAGES | 'key.rotate' | 'key.statements' | 'kernel.rotated';

export interface ExecutorOptions {
  /** The session's frame bound: every report this executor signs must fit in an answer. */
  readonly maxFrameBytes: number;
  /** The session's nesting bound (limits.max_depth): a report's output must fit it in the kernel's settle answer. */
  readonly maxDepth: number;
  readonly dir: string;
  readonly resources: string;
  readonly adapterModules: readonly string[];
  /** Ends the process at once (only the entry file may). */
  readonly exit: (code: number) => never;
}

const DRAIN_MARGIN_MS = 5_000;

export async function setupExecutor(preamble: Preamble, log: Logger, options: ExecutorOptions): Promise<ChildService> {
  const settings = parseExecutorSettings(preamble.settings);
  const reportBound = reportBoundFor(options);
  const { state, host } = await openStateAndHost(preamble, log, options, settings);
  const stores = { open: true };
  const context = executorContext(state, host, { settings, reportBound, log, options, isOpen: () => stores.open });
  noteKeyEpoch(context, state, preamble.mode, settings.provision.keyEpoch);
  logReady(context, preamble.mode);
  return executorService(context, state, async () => {
    await host.close();
    stores.open = false;
    closeStores(state);
    await state.lock.release();
  });
}

/**
 * The adapter host starts while the stores open: a restart after kill -9 is
 * on the recovery path (ARCHITECTURE.md §7 "losing the supervisor"). If
 * either fails, what the other opened is closed before the refusal.
 */
async function openStateAndHost(preamble: Preamble, log: Logger, options: ExecutorOptions, settings: ExecutorSettings): Promise<{ state: ExecutorState; host: AdapterHost }> {
  ensureResources(options.resources);
  const hostStarting = AdapterHost.start(
    { resources: options.resources, modules: [...options.adapterModules], note_max_bytes: settings.runtime.noteMaxBytes },
    log.child({ component: 'adapter-host' }),
  );
  let state: ExecutorState;
  try {
    state = await openExecutorState({ mode: preamble.mode, dir: options.dir, name: preamble.name, kernelPin: preamble.pins.kernel, settings: settings.provision });
  } catch (error) {
    await hostStarting.then((host) => host.close()).catch(() => undefined);
    throw error;
  }
  try {
    return { state, host: await hostStarting };
  } catch (error) {
    closeStores(state);
    await state.lock.release().catch(() => undefined);
    throw error;
  }
}

interface ContextInputs {
  readonly settings: ExecutorSettings;
  readonly reportBound: ReportBound;
  readonly log: Logger;
  readonly options: ExecutorOptions;
  readonly isOpen: () => boolean;
}

/** What every handler works with: the ledger over the open stores, its head witness, the host, the bounds. */
function executorContext(state: ExecutorState, host: AdapterHost, { settings, reportBound, log, options, isOpen }: ContextInputs): ExecutorContext {
  const ledger = new Ledger(state.stores, state.lock, (error) => {
    // store_replaced, or store_rolled_back for a ledger.db rewritten under this process.
    log.error(error.code, errorFields(error));
    // A report head held back goes now: the witness must hold every head this process reached, so that the
    // replacement's hello on a rolled-back file is refused (docs/ROLLBACK.md).
    witness.leaving();
    // After the refusal has been answered: the next process opens what the path names.
    setTimeout(() => options.exit(CHILD_EXIT.software), 50);
  });
  const witness = new HeadWitness(ledger.head(), settings.runtime.reportHeadLingerMs);
  // A report's head may wait for the next claim's frame; a refusal's goes before its answer (head-witness.ts).
  ledger.onAdvanced = (head, event) => (event === 'report' ? witness.announceLater(head) : void witness.announce(head));
  return {
    ledger,
    archiver: new Archiver(ledger, state.stores.archive),
    host,
    admitted: new AdmittedArguments(settings.runtime.admittedArgumentsMax),
    signer: state.signer,
    dir: options.dir,
    settings: settings.runtime,
    reportBound,
    log,
    inFlight: new Map(),
    reconcileBudget: new ReconcileBudget({
      perTool: settings.runtime.reconcilePerTool,
      perSession: settings.runtime.reconcilePerSession,
      windowMs: settings.runtime.reconcileWindowMs,
    }),
    witness,
    dropReply: () => options.exit(CHILD_EXIT.dropReply),
    isOpen,
  };
}

/** custody.json's key_epoch is information: the ledger's key epochs decide (docs/SECURITY.md, "Rotating keys"). */
function noteKeyEpoch({ ledger, log }: ExecutorContext, state: ExecutorState, mode: Preamble['mode'], configured: number | undefined): void {
  const { config } = ledger;
  if (mode === 'serve' && configured !== undefined && configured !== config.keyEpoch) {
    log.warn('key_epoch_setting_differs', {
      configured,
      key_epoch: config.keyEpoch,
      message: `the settings name key epoch ${configured}, the ledger is at epoch ${config.keyEpoch} (custody executor rotate moves it); the ledger's epoch is used — key_epoch in custody.json is information only`,
    });
  }
  if (state.rotationFinished !== undefined) log.warn('key_rotation_finished', { key_epoch: state.rotationFinished });
  for (const { event, fields } of state.warnings ?? []) log.warn(event, fields);
  if (state.keysCaughtUp !== undefined) log.warn('ledger_key_epochs_caught_up', { key_epochs: state.keysCaughtUp, why: 'the ledger names an older key than executor.key (restored from before a key rotation); its epochs were recorded from executor.statements' });
}

/** One line saying what this executor is and serves, and one per adapter that cannot run. */
function logReady({ ledger, host, log, reportBound }: ExecutorContext, mode: Preamble['mode']): void {
  const { config } = ledger;
  log.info('executor_ready', {
    mode,
    executor_id: config.executorId,
    key_epoch: config.keyEpoch,
    kernel_epoch: ledger.epochs.current('kernel_epochs').epoch,
    claim_capacity: config.claimCapacity,
    report_max_bytes: reportBound.bytes,
    live_claims: ledger.liveCount(),
    head: ledger.head(),
    tools: [...host.descriptors.values()].map((d) => ({ tool: d.tool, contract: d.contract, problem: d.problem })),
  });
  for (const descriptor of host.descriptors.values()) {
    if (descriptor.contract === null) log.warn('adapter_cannot_run', { tool: descriptor.tool, source: descriptor.source, problem: descriptor.problem });
  }
}

/** The executor as the runtime sees it; `close` releases the host, the stores and the lock, in that order. */
function executorService(context: ExecutorContext, state: ExecutorState, close: () => Promise<void>): ChildService {
  const { ledger, witness, log, settings } = context;
  const { config } = ledger;
  const handlers = handlersFor(context);
  return {
    identity: { id: config.executorId, keyEpoch: config.keyEpoch, signer: state.signer },
    maxInFlight: settings.maxInFlight,
    drainTimeoutMs: drainTimeoutFor(context),
    handle: (kind: MessageKind, body: unknown, request: RequestContext) => handle(handlers, kind, body, request),
    head: () => ledger.head(),
    attachPeer: (peer) => witness.attach(peer),
    stopAccepting: () => {
      // Leaving: a held-back head is said now, and the heads of reports retained while draining at once.
      witness.leaving();
      log.info('executor_draining', { effects_running: context.inFlight.size });
    },
    close,
  };
}

/** Losing the supervisor lets a running effect finish and retain its report, bounded by its deadline (ARCHITECTURE.md §7). */
function drainTimeoutFor({ settings, host }: ExecutorContext): number {
  const longestDeadline = Math.max(settings.adapterDeadlineMs, ...Object.values(settings.adapterDeadlines), ...[...host.descriptors.values()].map((d) => d.deadlineMs ?? 0));
  return settings.drainTimeoutMs ?? longestDeadline + DRAIN_MARGIN_MS;
}

/** One handler per executor kind, each typed by its schema (shared/dispatch.ts). */
function handlersFor(context: ExecutorContext): HandlerMap<ExecutorKind | 'stats', [RequestContext]> {
  return {
    stats: () => ({ holds: [], commit_batches: context.ledger.commitBatches() }),
    execute: (body, request) => executeOnce(context, body, request.id),
    reconcile_operation: (body) => reconcileOperation(context, body),
    cancel: (body) => cancelEffect(context, body),
    'claims.get': (body) => getClaim(context, body),
    archive: (body) => archiveReconciled(context, body),
    'ledger.live': (body) => listLive(context, body),
    tools: () => listTools(context),
    'arguments.check': (body) => checkToolArguments(context, body),
    'ledger.recover': (body) => recoverLedger(context, body),
    'key.rotate': () => rotateKey(context),
    'key.statements': (body) => keyStatements(context, body),
    'kernel.rotated': (body) => kernelRotated(context, body),
    'head.witnessed': (body) => {
      context.witness.acknowledge(body.head);
      return {};
    },
  };
}

function isExecutorKind(kind: MessageKind): kind is ExecutorKind | 'stats' {
  return kind === 'stats' || kind === 'key.rotate' || kind === 'key.statements' || kind === 'kernel.rotated' || Object.hasOwn(EXECUTOR_MESSAGES, kind);
}

/** Serve a kind the runtime routed here (its body checked against the kind's schema); any other is unexpected_message. */
async function handle(handlers: HandlerMap<ExecutorKind | 'stats', [RequestContext]>, kind: MessageKind, body: unknown, request: RequestContext): Promise<unknown> {
  if (!isExecutorKind(kind)) throw new CustodyError('unexpected_message', `an executor does not serve ${kind}`);
  return dispatch(handlers, kind, body, request);
}

/** This session's report bound (report.ts reportBoundOf); refuses a frame bound under which even a report without its output might not be delivered. */
function reportBoundFor(limits: { readonly maxFrameBytes: number; readonly maxDepth: number }): ReportBound {
  const bound = reportBoundOf(limits);
  if (bound.bytes < REPORT_MIN_BYTES) {
    throw new CustodyError(
      'config_invalid',
      `preamble limits.max_frame_bytes ${limits.maxFrameBytes} leaves reports ${bound.bytes} bytes; an executor needs at least ${REPORT_MIN_BYTES * 2 + FRAME_ROOM_BYTES} so every report it signs can be delivered`,
    );
  }
  return bound;
}

function closeStores(state: ExecutorState): void {
  state.stores.ledger.close();
  state.stores.archive.close();
}
