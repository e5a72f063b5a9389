// The crash matrix through the whole service (docs/RELIABILITY.md, "Cutpoints"):
// for every cutpoint, a real service in a temporary directory, a request that
// reaches it, the process killed there (it kills itself: CUSTODY_FAULT), the
// service restarted where the process was the supervisor (the supervisor
// restarts its children itself), the request retried with the same request id
// until its answer is final. Then: exactly one effect or none as the row says
// (journal lines), the answer equal to what kernel.db holds, and the invariant
// checker (scripts/chaos/invariants.ts) clean over the three stores. Each
// row's armed cutpoints must all have fired, so a row that no longer reaches
// its cutpoint fails instead of passing untested.
// Slow by nature: about a minute and a half on 2 cores (rows run three at a
// time; a supervisor row also waits for the restarted supervisor to take its lock).
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { checkInvariants, effectsPerOperation } from '../../scripts/chaos/invariants.js';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { parseConfig } from '../../supervisor/config/load.js';
import { initState } from '../../supervisor/init.js';
import { collectingLogger } from '../helpers/children.js';
import { eventually } from '../helpers/eventually.js';
import { FAST_TIMING, FIXTURE_EXECUTOR, initTestState, startService, type TestService } from '../helpers/service.js';

/** How a row reaches its cutpoint. */
type Walk =
  | 'invoke' //           POST /v1/invoke, retried with the same request id
  | 'refused' //          an invoke the kernel refuses (no grant covers the tool)
  | 'never_claimed' //    authorize, then reconcile before any execute
  | 'archive' //          an invoke that completes, then POST /v1/archive once its window has passed
  | 'init'; //            custody init

interface Row {
  /** CUSTODY_FAULT: the cutpoints armed, each fires once. */
  readonly fault: string;
  readonly walk: Walk;
  readonly tool?: string;
  /** Accepted kernel end states. */
  readonly ends: readonly string[];
  /** Journal lines of the operation at the end. */
  readonly effects: 0 | 1;
  /** Kernel settings for the row (custody.json kernel.settings). */
  readonly kernel?: Record<string, unknown>;
}

const NOTE = 'review-notes/append';

const MATRIX: readonly Row[] = [
  // executor
  { fault: 'executor:after_claim', walk: 'invoke', ends: ['released'], effects: 0 },
  { fault: 'executor:after_effect', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'executor:after_report', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'executor:after_claim,executor:after_reconciled_report_commit', walk: 'invoke', ends: ['released'], effects: 0 },
  { fault: 'executor:after_effect,executor:after_reconciled_report_commit', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'executor:after_never_claimed_commit', walk: 'never_claimed', ends: ['released'], effects: 0 },
  { fault: 'executor:inside_archive_copy', walk: 'archive', ends: ['completed'], effects: 1 },
  { fault: 'executor:after_archive_copy_commit', walk: 'archive', ends: ['completed'], effects: 1 },
  { fault: 'executor:after_archive_delete_commit', walk: 'archive', ends: ['completed'], effects: 1 },
  { fault: 'executor:after_provision_commit', walk: 'init', ends: [], effects: 0 },
  // the adapter host
  { fault: 'adapter_host:after_effect', walk: 'invoke', ends: ['completed'], effects: 1 },
  // kernel
  { fault: 'kernel:inside_reserve_transaction', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'kernel:after_reserve_commit', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'kernel:after_start_commit', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'kernel:after_start_commit,kernel:after_recovery_commit', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'kernel:after_settle_commit', walk: 'invoke', ends: ['completed'], effects: 1 },
  // kernel:after_sweep_commit has no row: the supervisor reserves and starts in one transaction
  // (reserve_start), so none of its reservations waits for a start to expire; the kernel's own
  // crash test provokes it (test/kernel-proc/crash.test.ts).
  { fault: 'kernel:after_mark_unknown_commit', walk: 'invoke', tool: 'fixture/unsure', ends: ['unknown'], effects: 0 },
  { fault: 'kernel:after_provision_commit', walk: 'init', ends: [], effects: 0 },
  { fault: 'kernel:after_pin_commit', walk: 'init', ends: [], effects: 0 },
  // supervisor
  { fault: 'supervisor:after_request_logged', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'supervisor:after_phase_reserved', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'supervisor:after_phase_authorized', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'supervisor:after_attempt_started', walk: 'invoke', ends: ['completed', 'released'], effects: 0 },
  { fault: 'supervisor:after_phase_reported', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'supervisor:after_report_forwarded', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'supervisor:after_phase_settled', walk: 'invoke', ends: ['completed'], effects: 1 },
  { fault: 'supervisor:after_phase_refused', walk: 'refused', tool: 'fixture/refuse', ends: ['denied'], effects: 0 },
  { fault: 'executor:after_claim,supervisor:after_phase_reconciling', walk: 'invoke', ends: ['released'], effects: 0 },
  { fault: 'supervisor:after_mark_unknown_sent', walk: 'invoke', tool: 'fixture/unsure', ends: ['unknown'], effects: 0 },
];

const FINAL_KERNEL_STATES = new Set(['completed', 'released', 'denied', 'start_denied', 'expired', 'finalization_denied', 'unknown']);

function firedMarkers(faultDir: string, fault: string): string[] {
  return fault.split(',').filter((entry) => !existsSync(path.join(faultDir, `${entry.replace(':', '.')}.fired`)));
}

function kernelState(service: TestService, requestId: string): { state: string; flag: string | null } | null {
  const db = new Database(path.join(service.paths.kernelDir, 'kernel.db'), { readonly: true, fileMustExist: true });
  try {
    return (db.prepare('SELECT state, flag FROM operations WHERE request_id = ?').get(requestId) as { state: string; flag: string | null } | undefined) ?? null;
  } finally {
    db.close();
  }
}

function ledgerCounts(service: TestService, operationId: string): { live: number; archived: number } {
  const count = (file: string, table: string) => {
    const db = new Database(path.join(service.paths.executorDir('default'), file), { readonly: true, fileMustExist: true });
    try {
      return (db.prepare(`SELECT count(*) AS n FROM ${table} WHERE operation_id = ?`).get(operationId) as { n: number }).n;
    } finally {
      db.close();
    }
  };
  return { live: count('ledger.db', 'claims'), archived: count('archive.db', 'archived_claims') };
}

/** The service that serves now: a supervisor that killed itself is started again, as a service manager would. */
async function serving(service: TestService): Promise<TestService> {
  if (service.process.exitCode === null && service.process.signalCode === null) return service;
  await new Promise((resolve) => (service.process.exitCode === null && service.process.signalCode === null ? service.process.once('close', resolve) : resolve(null)));
  return service.restart();
}

interface Driven {
  service: TestService;
  answer: Record<string, unknown>;
}

/** Send `send` until kernel.db holds a final state for the request, restarting a killed supervisor between tries. */
async function untilFinal(start: TestService, requestId: string, send: (service: TestService) => Promise<{ status: number; body: Record<string, unknown> }>): Promise<Driven> {
  let service = start;
  const deadline = Date.now() + 60_000;
  for (;;) {
    service = await serving(service);
    const answer = await send(service).catch(() => null);
    const kernel = kernelState(service, requestId);
    const final = answer && answer.status === 200 && (answer.body.final === true || answer.body.outcome === 'unknown');
    if (answer && kernel && FINAL_KERNEL_STATES.has(kernel.state) && (final || kernel.state === 'unknown')) return { service, answer: answer.body };
    if (Date.now() > deadline) throw new Error(`${requestId} not final within 60 s: answer ${JSON.stringify(answer?.body ?? null)}, kernel ${JSON.stringify(kernel)}`);
    await sleep(answer ? 200 : 50);
  }
}

const invokeBody = (requestId: string, tool: string, waitMs: number) => ({ tool, request_id: requestId, arguments: tool === NOTE ? { note: `matrix ${requestId}` } : {}, wait_ms: waitMs });

/** Rows run this many at a time: they spend most of their time waiting for processes, not computing. */
const CONCURRENCY = 3;

function configFor(row: Row): Record<string, unknown> {
  return {
    // Rows that kill twice kill on purpose: quarantine (its own tests in
    // quarantine.test.ts) would park the request after the second crash.
    restart: { max_restarts: 20, period_s: 60, backoff_initial_ms: 20, backoff_max_ms: 200, quarantine_after_crashes: 10 },
    executors: [FIXTURE_EXECUTOR],
    // A short window lets an archive row pass its operation's window without a long wait.
    kernel: { settings: { ...(row.walk === 'archive' ? { execution_window_ms: 3_000 } : {}), ...row.kernel } },
  };
}

async function runRow(row: Row, cleanups: Array<() => void>): Promise<void> {
  const faultDir = mkdtempSync(path.join(tmpdir(), 'custody-matrix-fault-'));
  cleanups.push(() => rmSync(faultDir, { recursive: true, force: true }));
  const env = { CUSTODY_FAULT: row.fault, CUSTODY_FAULT_DIR: faultDir };
  if (row.walk === 'init') return initRow(row, env, faultDir, cleanups);

  const root = await initTestState(configFor(row));
  let service = await startService({ dir: root, env });
  cleanups.push(() => service.cleanup());
  const tool = row.tool ?? NOTE;
  if (tool.startsWith('fixture/') && row.walk !== 'refused') {
    expect((await service.http('POST', '/v1/grants', { tool: 'fixture/*', max_invocations: 100, ttl_ms: 3_600_000 })).status).to.equal(201);
  }
  const requestId = `m-${row.fault.replace(/[^a-z]+/g, '-')}`.slice(0, 60);
  const operationId = operationIdFor(requestId);
  // An operation that ends unknown is never final for the supervisor (it keeps asking): do not wait long on it.
  const waitMs = row.ends.includes('unknown') ? 1_000 : 20_000;

  let driven: Driven;
  switch (row.walk) {
    case 'invoke':
    case 'refused':
    case 'archive':
      driven = await untilFinal(service, requestId, (s) => s.http('POST', '/v1/invoke', invokeBody(requestId, tool, waitMs), 'agent'));
      break;
    case 'never_claimed': {
      const authorized = await service.http('POST', '/v1/authorize', { tool, arguments: { note: `matrix ${requestId}` }, operation: requestId });
      expect(authorized.status, JSON.stringify(authorized.body)).to.equal(200);
      driven = await untilFinal(service, requestId, (s) => s.http('POST', `/v1/operations/${requestId}/reconcile`, {}));
      break;
    }
  }
  service = driven.service;

  if (row.walk === 'archive') {
    // Ask again until the settled operation has left the live ledger for the archive.
    await eventuallyAsync(async () => {
      service = await serving(service);
      await service.http('POST', '/v1/archive', {}).catch(() => null);
      const counts = ledgerCounts(service, operationId);
      return counts.live === 0 && counts.archived === 1;
    }, 30_000, `${requestId} archived`);
    // Archived, its report still replays: the retry answers the same.
    const again = await service.http('POST', '/v1/invoke', invokeBody(requestId, tool, waitMs), 'agent');
    expect(again.body.receipt).to.equal(driven.answer.receipt);
  }

  expect(firedMarkers(faultDir, row.fault), 'cutpoints armed but never reached').to.deep.equal([]);
  const kernel = kernelState(service, requestId);
  expect(row.ends, `kernel state ${kernel?.state}`).to.include(kernel?.state);
  if (kernel!.state !== 'unknown') expect(driven.answer.outcome, 'the answer is what kernel.db holds').to.equal(kernel!.state);
  else expect(kernel!.flag, 'unknown names its reason').to.be.a('string').and.not.equal('');
  const effects = effectsPerOperation(path.join(service.paths.resourcesDir, 'review-notes.jsonl')).get(operationId) ?? 0;
  if (row.ends.length > 1) expect(effects).to.equal(kernel!.state === 'completed' ? 1 : 0);
  else expect(effects, 'journal lines of the operation').to.equal(row.effects);

  await service.stop();
  const checked = checkInvariants({ root: service.dir, mustBeFinal: [requestId] });
  expect(checked.violations, JSON.stringify(checked.violations)).to.deep.equal([]);
}

describe('crash matrix: every cutpoint, through the whole service', function () {
  // Rows run CONCURRENCY at a time from `before`; each test waits for its own row.
  this.timeout(240_000);
  const cleanups: Array<() => void> = [];
  const runs = new Map<Row, Promise<void>>();

  before(() => {
    // Provisioning rows arm their cutpoint through this process's environment, which
    // any init running beside them would inherit: they run first, one at a time.
    const serial = MATRIX.filter((row) => row.walk === 'init');
    const queue = MATRIX.filter((row) => row.walk !== 'init');
    let chain: Promise<unknown> = Promise.resolve();
    for (const row of serial) {
      const run = chain.then(() => runRow(row, cleanups));
      runs.set(row, run);
      chain = run.catch(() => undefined);
    }
    const waiters: Array<() => void> = [];
    let running = 0;
    const slot = async () => {
      await chain;
      while (running >= CONCURRENCY) await new Promise<void>((resolve) => waiters.push(resolve));
      running += 1;
    };
    const free = () => {
      running -= 1;
      waiters.shift()?.();
    };
    for (const row of queue) {
      const run = slot().then(() => runRow(row, cleanups).finally(free));
      run.catch(() => undefined); // reported by its own test
      runs.set(row, run);
    }
  });

  after(async () => {
    await Promise.allSettled(runs.values());
    for (const cleanup of cleanups.splice(0)) cleanup();
  });

  for (const row of MATRIX) {
    const effects = row.ends.length > 1 ? 'one effect if completed, else none' : `${row.effects} effect${row.effects === 1 ? '' : 's'}`;
    it(`killed at ${row.fault}: ${row.walk} ends ${row.ends.join(' or ') || 'refused by init'} with ${effects}`, () => runs.get(row)!);
  }
});

async function eventuallyAsync(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await sleep(200);
  }
}

/** A provisioning cutpoint: init dies there, says so, and a second init over what it left is refused, never overwriting a key. */
async function initRow(row: Row, env: Record<string, string>, faultDir: string, cleanups: Array<() => void>): Promise<void> {
  const base = mkdtempSync(path.join(tmpdir(), 'custody-matrix-init-'));
  cleanups.push(() => rmSync(base, { recursive: true, force: true }));
  const root = path.join(base, 'state');
  const config = parseConfig({ port: 0, timing: FAST_TIMING });
  const saved = { ...process.env };
  Object.assign(process.env, env);
  let failure: unknown = null;
  try {
    await initState(root, { config, log: collectingLogger().log, onChildStderr: () => undefined });
  } catch (error) {
    failure = error;
  } finally {
    for (const key of Object.keys(env)) if (!(key in saved)) delete process.env[key];
  }
  expect(failure, 'init reports the provisioning it could not finish').to.be.instanceOf(Error);
  await eventually(() => firedMarkers(faultDir, row.fault).length === 0, 5_000, `${row.fault} fired`);
  let again: unknown = null;
  await initState(root, { config, log: collectingLogger().log, onChildStderr: () => undefined }).catch((error: unknown) => (again = error));
  expect(again).to.have.property('code', 'state_exists');
  expect(existsSync(path.join(root, 'resources', 'review-notes.jsonl')), 'nothing ran').to.equal(false);
}
