// The supervisor's witness of store heads (docs/ROLLBACK.md): durable in
// supervisor.db, never lowered, executor heads group-committed per turn,
// kernel heads carried by the next request write or written alone after
// timing.kernel_head_linger_ms.
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { HeadWitnessStore } from '../../supervisor/children/witness.js';
import { SupervisorStore } from '../../supervisor/store/supervisor-store.js';

describe('the head witness in supervisor.db', () => {
  let dir: string;
  let store: SupervisorStore;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-witness-'));
    store = SupervisorStore.provision(path.join(dir, 'supervisor'));
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** What supervisor.db holds, as the sqlite3 shell would read it. */
  const durable = (name: string) => (store.db.prepare('SELECT head FROM witness WHERE name = ?').get(name) as { head: number } | undefined)?.head ?? 0;

  it('writes the heads announced in one turn in one transaction, keeping the highest per child, and resolves after it', async () => {
    const witness = new HeadWitnessStore(store);
    let commits = 0;
    const raise = store.raiseWitness.bind(store);
    store.raiseWitness = (heads) => {
      commits++;
      raise(heads);
    };
    const pending = [witness.record('a', 3), witness.record('a', 5), witness.record('a', 4), witness.record('b', 1)];
    expect(durable('a'), 'nothing is durable before the batch commits').to.equal(0);
    expect(witness.head('a'), 'a head seen counts for this process at once').to.equal(5);
    await Promise.all(pending);
    expect(commits).to.equal(1);
    expect([witness.head('a'), witness.head('b')]).to.deep.equal([5, 1]);
  });

  it('never lowers a head, from custody or from the sqlite3 shell', () => {
    const witness = new HeadWitnessStore(store);
    witness.recordNow('kernel', 7);
    witness.recordNow('kernel', 2);
    store.raiseWitness(new Map([['kernel', 1]]));
    expect(witness.head('kernel')).to.equal(7);
    expect(() => store.db.prepare("UPDATE witness SET head = 1 WHERE name = 'kernel'").run()).to.throw(/never goes back/);
    // Nor by the shell's other ways of writing a row: before version 5 these took the witness to 0 and 1.
    expect(() => store.db.prepare("DELETE FROM witness WHERE name = 'kernel'").run()).to.throw(/never deleted/);
    expect(() => store.db.prepare("UPDATE witness SET name = 'elsewhere' WHERE name = 'kernel'").run()).to.throw(/never moved/);
    expect(() => store.db.prepare("INSERT OR REPLACE INTO witness (name, head, updated_at) VALUES ('kernel', 1, 0)").run()).to.throw(/never goes back/);
    expect(durable('kernel')).to.equal(7);
    // A higher head still goes in by any of them, and a new child's first.
    store.db.prepare("INSERT OR REPLACE INTO witness (name, head, updated_at) VALUES ('kernel', 8, 0)").run();
    witness.recordNow('fresh', 3);
    expect([durable('kernel'), durable('fresh')]).to.deep.equal([8, 3]);
  });

  it('lets a kernel head wait for the next request write, which carries it in its own transaction', async () => {
    const witness = new HeadWitnessStore(store);
    const recorded = witness.record('kernel', 9, 1_000);
    await sleep(30);
    expect(durable('kernel'), 'not written alone at the end of its turn').to.equal(0);
    expect(witness.head('kernel'), 'yet a hello below it would be refused').to.equal(9);
    await store.logRequestGrouped({ request_id: 'r-1', operation_id: operationIdFor('r-1'), kind: 'invoke', tool: 't/x', subject: 'agent', arguments: '{}', cost_units: 1, binding_hash: 'b'.repeat(64) });
    expect(durable('kernel')).to.equal(9);
    await recorded;
  });

  it('writes a lingering kernel head alone once its linger passes with no request write', async () => {
    const witness = new HeadWitnessStore(store);
    let settled = false;
    const recorded = witness.record('kernel', 4, 60).then(() => (settled = true));
    await sleep(20);
    expect([durable('kernel'), settled]).to.deep.equal([0, false]);
    await recorded;
    expect(durable('kernel')).to.equal(4);
  });

  it('writes a head still lingering when the store closes', () => {
    const witness = new HeadWitnessStore(store);
    void witness.record('kernel', 12, 1_000);
    store.close();
    store = SupervisorStore.open(path.join(dir, 'supervisor'));
    expect(durable('kernel')).to.equal(12);
  });
});
