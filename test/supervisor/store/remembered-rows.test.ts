// The supervisor remembers request rows as supervisor.db holds them
// (supervisor/store/supervisor-store.ts, #remembered): a read outside a
// transaction is answered from memory until this process writes the row
// again. After every kind of write the store's answer must be the row a
// second connection reads, as an operator's sqlite3 shell would; and a row
// changed under a running store is seen at its next write, as the README's
// "Looking inside the stores" says.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { operationIdFor } from '../../../shared/protocol/binding.js';
import { type RequestRow, type StoreObserver, SupervisorStore } from '../../../supervisor/store/supervisor-store.js';

describe('supervisor/store: rows remembered between writes', () => {
  let dir: string;
  let store: SupervisorStore;
  let shell: Database.Database;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-remembered-'));
    store = SupervisorStore.provision(path.join(dir, 'supervisor'));
    shell = new Database(path.join(dir, 'supervisor', 'supervisor.db'));
  });
  afterEach(() => {
    shell.close();
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const onDisk = (id: string) => shell.prepare('SELECT * FROM requests WHERE request_id = ?').get(id) as RequestRow;
  /** The store's answer, read twice (the second from memory), against supervisor.db's row. */
  const agrees = (id: string, why: string) => {
    expect(store.getRequest(id), why).to.deep.equal(onDisk(id));
    expect(store.getRequest(id), `${why}, read again`).to.deep.equal(onDisk(id));
    expect(store.phaseOf(id), `${why}: its phase`).to.equal(onDisk(id).phase);
  };
  /** A change made under the running store, as from the shell: a store answering from memory does not see it. */
  const changedUnder = (id: string, reason: string) => shell.prepare('UPDATE requests SET reason = ? WHERE request_id = ?').run(reason, id);

  async function logged(id: string): Promise<void> {
    await store.logRequestGrouped({ request_id: id, operation_id: operationIdFor(id), kind: 'invoke', tool: 't/x', subject: 'agent', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });
  }

  it('answers from memory until its next write, then what supervisor.db holds', async () => {
    await logged('m1');
    agrees('m1', 'logged');
    changedUnder('m1', 'from the shell');
    expect(store.getRequest('m1')!.reason, 'remembered: the change under it is not read').to.equal(null);
    store.patchRequest('m1', { nonce_id: 'n-1' });
    expect(store.getRequest('m1'), 'after its own write, read again').to.include({ reason: 'from the shell', nonce_id: 'n-1' });
    agrees('m1', 'patched');
  });

  it('agrees with supervisor.db after every kind of write of a request', async () => {
    await logged('m2');
    store.getRequest('m2');
    store.movePhaseLater('m2', 'reserved', { nonce_id: 'n-2', receipt: 'reserve-receipt' });
    store.movePhaseLater('m2', 'authorized', { authorization: 'auth-2', executor: 'e-1' });
    expect(store.getRequest('m2'), 'moves in memory lie over the remembered row').to.include({ phase: 'authorized', authorization: 'auth-2' });
    expect(onDisk('m2').phase).to.equal('received');
    await store.startAttemptGrouped('m2');
    agrees('m2', 'attempt started (grouped), the moves in memory with it');
    store.startAttempt('m2');
    agrees('m2', 'attempt started again (alone)');
    store.movePhaseLater('m2', 'reported', { report: 'report-2' });
    await store.movePhaseGrouped('m2', 'settled', { receipt: 'final', outcome: 'completed' });
    agrees('m2', 'settled (grouped)');

    await logged('m3');
    store.getRequest('m3');
    store.movePhase('m3', 'reserved');
    agrees('m3', 'moved (alone), nothing learned');
    store.patchRequest('m3', { nonce_id: 'n-3' });
    agrees('m3', 'patched (alone)');
    store.movePhaseLater('m3', 'authorized', { authorization: 'auth-3', executor: 'e-1' });
    await store.persist(store.getRequest('m3')!);
    agrees('m3', 'persisted');
    store.startAttempt('m3');
    store.getRequest('m3');
    store.movePhaseLater('m3', 'reported');
    expect(store.countCrash('m3', 'executor', 'killed', 2).quarantined, 'one crash of two').to.equal(false);
    agrees('m3', 'a crash counted, the move in memory written with it');
    expect(store.countCrash('m3', 'executor', 'killed', 2).quarantined).to.equal(true);
    agrees('m3', 'quarantined by a crash');
    store.releaseQuarantined('m3');
    agrees('m3', 'released');
  });

  it('keeps what supervisor.db holds when a grouped write is refused and rolled back', async () => {
    await logged('m4');
    agrees('m4', 'logged');
    let refused: unknown;
    await store.movePhaseGrouped('m4', 'executing', { receipt: 'never' }).catch((error: unknown) => (refused = error));
    expect(refused, 'received → executing is not a move').to.be.an('error');
    agrees('m4', 'after the refused move');
    expect(store.getRequest('m4')!.receipt).to.equal(null);
  });

  it('keeps what supervisor.db holds when a grouped write is rolled back after its UPDATE', async () => {
    await logged('m7');
    store.movePhaseLater('m7', 'reserved', { nonce_id: 'n-7' });
    store.movePhaseLater('m7', 'authorized', { authorization: 'auth-7', executor: 'e-1' });
    await store.startAttemptGrouped('m7');
    agrees('m7', 'started');
    // Told of the move inside its savepoint, after the UPDATE: throwing there rolls the UPDATE back.
    store.observer = {
      incident: () => undefined,
      child: () => undefined,
      phase: () => {
        throw new Error('refused after the write');
      },
      committed: () => undefined,
    };
    const failed = await store.movePhaseGrouped('m7', 'reported', { report: 'report-7' }).catch((error: unknown) => error);
    store.observer = null;
    expect(failed).to.be.an('error').with.property('message', 'refused after the write');
    agrees('m7', 'after the rolled-back UPDATE');
    expect(onDisk('m7')).to.include({ phase: 'executing', report: null });
  });

  it('persists nothing and fails nothing when a crash counted meanwhile already wrote the moves in memory', async () => {
    await logged('m8');
    store.movePhaseLater('m8', 'reserved', { nonce_id: 'n-8' });
    const persisted = store.persist(store.getRequest('m8')!);
    // Before the grouped write runs (the next turn): the crash writes what memory holds.
    expect(store.countCrash('m8', 'kernel', 'killed', 5).quarantined).to.equal(false);
    expect((await persisted).phase).to.equal('reserved');
    agrees('m8', 'persisted after the crash wrote it');
  });

  it('does not remember a grouped write whose row was written again between its commit and its answer', async () => {
    await logged('m5');
    store.movePhaseLater('m5', 'reserved', { nonce_id: 'n-5' });
    store.movePhaseLater('m5', 'authorized', { authorization: 'auth-5', executor: 'e-1' });
    // Told of the commit before the write's promise resolves: a write here lands between the two.
    let once = true;
    const observer: StoreObserver = {
      incident: () => undefined,
      child: () => undefined,
      phase: () => undefined,
      committed: () => {
        if (!once) return;
        once = false;
        store.patchRequest('m5', { reason: 'written after the commit' });
      },
    };
    store.observer = observer;
    const started = await store.startAttemptGrouped('m5');
    expect(started.reason, 'the row the transaction left').to.equal(null);
    agrees('m5', 'written after the commit, before the answer');
    expect(store.getRequest('m5')!.reason).to.equal('written after the commit');
  });

  it('agrees when two grouped writes of one request share a transaction', async () => {
    await logged('m6');
    store.movePhase('m6', 'authorized', { authorization: 'auth-6', executor: 'e-1' });
    store.getRequest('m6');
    const started = store.startAttemptGrouped('m6');
    const reported = store.movePhaseGrouped('m6', 'reported', { report: 'report-6' });
    await Promise.all([started, reported]);
    agrees('m6', 'both committed');
    expect(store.getRequest('m6')).to.include({ phase: 'reported', report: 'report-6', attempts: 1 });
  });

  describe('bounded by the characters of the rows it holds', () => {
    /** The characters of a row as the store counts them: its text columns. */
    const charsOf = (row: RequestRow) => Object.values(row).reduce((sum: number, value) => sum + (typeof value === 'string' ? value.length : 0), 0);

    /** Three rows of one size remembered in turn under `bound(size)` characters; which of them the store still answers from memory. */
    async function rememberedUnder(bound: (size: number) => number): Promise<string[]> {
      await logged('r1');
      await logged('r2');
      await logged('r3');
      const size = charsOf(onDisk('r1'));
      store.close();
      store = SupervisorStore.open(path.join(dir, 'supervisor'), bound(size));
      for (const id of ['r1', 'r2', 'r3']) store.getRequest(id);
      for (const id of ['r1', 'r2', 'r3']) changedUnder(id, 'from the shell');
      // Newest first: reading a forgotten row remembers it again and would push out an older one.
      return ['r3', 'r2', 'r1'].filter((id) => store.getRequest(id)!.reason === null);
    }

    it('keeps rows up to the bound exactly', async () => {
      expect(await rememberedUnder((size) => 2 * size)).to.deep.equal(['r3', 'r2']);
    });
    it('forgets the longest remembered one character past it', async () => {
      expect(await rememberedUnder((size) => 2 * size - 1)).to.deep.equal(['r3']);
    });
    it('remembers a row exactly the size of the bound (alone)', async () => {
      expect(await rememberedUnder((size) => size)).to.deep.equal(['r3']);
    });
    it('never remembers a row larger than the bound', async () => {
      expect(await rememberedUnder((size) => size - 1)).to.deep.equal([]);
    });
  });
});
