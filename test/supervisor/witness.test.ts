// The supervisor's witness of store heads (docs/ROLLBACK.md): durable in
// supervisor.db, never lowered, executor heads group-committed per turn.
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
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

  it('writes the heads announced in one turn in one transaction, keeping the highest per child, and resolves after it', async () => {
    const witness = new HeadWitnessStore(store);
    let commits = 0;
    const raise = store.raiseWitness.bind(store);
    store.raiseWitness = (heads) => {
      commits++;
      raise(heads);
    };
    const pending = [witness.record('a', 3), witness.record('a', 5), witness.record('a', 4), witness.record('b', 1)];
    expect(witness.head('a'), 'nothing is durable before the batch commits').to.equal(0);
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
  });
});
