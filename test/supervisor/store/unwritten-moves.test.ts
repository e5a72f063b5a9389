// The supervisor's moves kept in memory (ARCHITECTURE.md §6.6): reserved,
// authorized and reported are read as written by this process but reach
// supervisor.db only with the request's next durable write, or when a drive
// stops on them. Each case reads supervisor.db through a second connection,
// as an operator's sqlite3 shell would, and through the store.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { operationIdFor } from '../../../shared/protocol/binding.js';
import { SupervisorStore } from '../../../supervisor/store/supervisor-store.js';

describe('supervisor/store: moves kept in memory until the next durable write', () => {
  let dir: string;
  let store: SupervisorStore;
  let shell: Database.Database;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-unwritten-'));
    store = SupervisorStore.provision(path.join(dir, 'supervisor'));
    shell = new Database(path.join(dir, 'supervisor', 'supervisor.db'), { readonly: true });
  });
  afterEach(() => {
    shell.close();
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const onDisk = (id: string) => shell.prepare('SELECT phase, nonce_id, authorization, executor, report, receipt, attempts FROM requests WHERE request_id = ?').get(id) as Record<string, unknown>;

  /** Logged, reserved and authorized in memory, its attempt written, then its report held in memory only. */
  async function reportedInMemory(id: string, n: number): Promise<void> {
    await logged(id);
    store.movePhaseLater(id, 'reserved', { nonce_id: `n-${n}` });
    store.movePhaseLater(id, 'authorized', { authorization: `auth-${n}`, executor: 'e-1' });
    await store.startAttemptGrouped(id);
    store.movePhaseLater(id, 'reported', { report: `report-${n}` });
  }

  async function logged(id: string): Promise<void> {
    await store.logRequestGrouped({ request_id: id, operation_id: operationIdFor(id), kind: 'invoke', tool: 't/x', subject: 'agent', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });
  }

  it('reads reserved and authorized as written while supervisor.db still says received', async () => {
    await logged('r1');
    store.movePhaseLater('r1', 'reserved', { nonce_id: 'n-1', receipt: 'reserve-receipt' });
    store.movePhaseLater('r1', 'authorized', { authorization: 'auth-bytes', executor: 'e-1' });
    expect(store.getRequest('r1')).to.include({ phase: 'authorized', nonce_id: 'n-1', receipt: 'reserve-receipt', authorization: 'auth-bytes', executor: 'e-1' });
    expect(store.openRequests().find((row) => row.request_id === 'r1')?.phase).to.equal('authorized');
    expect(store.getRequestByOperation(operationIdFor('r1'))?.phase).to.equal('authorized');
    expect(onDisk('r1')).to.include({ phase: 'received', nonce_id: null, authorization: null });
  });

  it('writes them with the attempt, in the same transaction, before the execute frame could leave', async () => {
    await logged('r2');
    store.movePhaseLater('r2', 'reserved', { nonce_id: 'n-2' });
    store.movePhaseLater('r2', 'authorized', { authorization: 'auth-2', executor: 'e-1' });
    const started = await store.startAttemptGrouped('r2');
    expect(started).to.include({ phase: 'executing', attempts: 1, authorization: 'auth-2' });
    expect(onDisk('r2')).to.include({ phase: 'executing', nonce_id: 'n-2', authorization: 'auth-2', executor: 'e-1', attempts: 1 });
  });

  it('writes a report held in memory with the settlement', async () => {
    await reportedInMemory('r3', 3);
    expect(onDisk('r3')).to.include({ phase: 'executing', report: null });
    await store.movePhaseGrouped('r3', 'settled', { receipt: 'final-receipt', outcome: 'completed' });
    expect(onDisk('r3')).to.include({ phase: 'settled', report: 'report-3', receipt: 'final-receipt' });
  });

  it('persist writes a drive that stops on an in-memory phase, and is a no-op when nothing is unwritten', async () => {
    await logged('r4');
    store.movePhaseLater('r4', 'reserved', { nonce_id: 'n-4' });
    store.movePhaseLater('r4', 'authorized', { authorization: 'auth-4', executor: 'e-1' });
    const persisted = await store.persist(store.getRequest('r4')!);
    expect(persisted.phase).to.equal('authorized');
    expect(onDisk('r4')).to.include({ phase: 'authorized', nonce_id: 'n-4', authorization: 'auth-4' });
    const before = (shell.prepare('SELECT updated_at FROM requests WHERE request_id = ?').get('r4') as { updated_at: number }).updated_at;
    expect((await store.persist(store.getRequest('r4')!)).phase).to.equal('authorized');
    expect((shell.prepare('SELECT updated_at FROM requests WHERE request_id = ?').get('r4') as { updated_at: number }).updated_at).to.equal(before);
  });

  it('phaseOf answers the phase held in memory over the written one, without reading the row', async () => {
    await logged('r8');
    expect(store.phaseOf('r8')).to.equal('received');
    store.movePhaseLater('r8', 'reserved', { nonce_id: 'n-8' });
    expect(onDisk('r8')).to.include({ phase: 'received' });
    expect(store.phaseOf('r8')).to.equal('reserved');
    expect(store.phaseOf('nobody')).to.equal(undefined);
  });

  it('refuses a move the request machine does not allow from the phase held in memory', async () => {
    await logged('r5');
    store.movePhaseLater('r5', 'reserved', { nonce_id: 'n-5' });
    store.movePhaseLater('r5', 'authorized', { authorization: 'auth-5', executor: 'e-1' });
    expect(() => store.movePhaseLater('r5', 'reserved')).to.throw(/request/);
    expect(store.getRequest('r5')!.phase).to.equal('authorized');
  });

  it('writes what memory holds before a crash is counted, so a quarantine releases to the phase the artifacts prove', async () => {
    await reportedInMemory('r6', 6);
    expect(store.countCrash('r6', 'default', 'killed', 1).quarantined).to.equal(true);
    expect(onDisk('r6')).to.include({ phase: 'quarantined', report: 'report-6' });
    expect(store.getRequest('r6')!.phase).to.equal('quarantined');
    expect(store.releaseQuarantined('r6').phase).to.equal('reported');
  });

  it('keeps the moves in memory when the transaction that was to write them fails, and writes them with the next', async () => {
    await logged('r7');
    store.movePhaseLater('r7', 'reserved', { nonce_id: 'n-7' });
    // An illegal move fails its own savepoint: what memory holds is not lost with it.
    await store.movePhaseGrouped('r7', 'executing').then(
      () => expect.fail('reserved → executing is not a move'),
      (error: unknown) => expect(String(error)).to.match(/request r7/),
    );
    expect(store.getRequest('r7')).to.include({ phase: 'reserved', nonce_id: 'n-7' });
    expect(onDisk('r7')).to.include({ phase: 'received', nonce_id: null });
    await store.movePhaseGrouped('r7', 'refused', { outcome: 'denied' });
    expect(onDisk('r7')).to.include({ phase: 'refused', nonce_id: 'n-7' });
  });

  it('loses the in-memory moves with the process: a reopened store resumes from the last durable phase', async () => {
    await logged('r8');
    store.movePhaseLater('r8', 'reserved', { nonce_id: 'n-8' });
    store.close();
    store = SupervisorStore.open(path.join(dir, 'supervisor'));
    expect(store.getRequest('r8')).to.include({ phase: 'received', nonce_id: null });
  });
});
