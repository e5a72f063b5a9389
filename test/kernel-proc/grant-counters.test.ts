// A grant's usage counters (kernel.db schema version 4) and hold counters
// (version 7) against its holds: equal after every decision that moves a
// hold, refused by the store when edited by hand in the sqlite3 shell, and
// filled in from the holds when an older store is opened.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { applyMigrations } from '../../shared/store/migrations.js';
import { KERNEL_MIGRATIONS } from '../../kernel-proc/store/schema.js';
import { KernelProcess, KernelRoot, TOOL, grantBody, pinBody, reserveBody, signReport, testExecutor, ALL_GRANTS } from './helpers.js';

interface GrantUsageRow {
  readonly invocations_used: number;
  readonly invocations_held: number;
  readonly cost_units_used: number;
  readonly cost_units_held: number;
  readonly holds_invocations_used: number;
  readonly holds_invocations_held: number;
  readonly holds_cost_units_used: number;
  readonly holds_cost_units_held: number;
  readonly holds_reserved: number;
  readonly holds_consumed: number;
  readonly holds_released: number;
  readonly usage_agrees: number;
}

type Counters = [invocationsUsed: number, invocationsHeld: number, costUsed: number, costHeld: number];
type HoldCounts = [reserved: number, consumed: number, released: number];

describe('kernel-proc: grant usage counters', function () {
  this.timeout(30_000);
  const root = new KernelRoot();
  const executor = testExecutor(71);
  let kernel: KernelProcess;
  let capabilityId: string;

  /** The counters and the hold sums as the operator's sqlite3 shell shows them in grants_view. */
  const usage = (): GrantUsageRow => root.shell<GrantUsageRow>(`SELECT * FROM grants_view WHERE capability_id = '${capabilityId}'`)[0]!;

  before(async () => {
    kernel = await KernelProcess.start(root, { mode: 'provision' });
    await kernel.request('executor.pin', pinBody(executor));
    capabilityId = (await kernel.request('grant.add', grantBody(TOOL, { max_cost_units: 1000 }))).capability_id;
  });
  after(async () => {
    await kernel.stop();
    root.remove();
  });

  const nonces = new Map<string, string>();
  const reserve = async (id: string, cost: number) => {
    const reserved = await kernel.request('reserve', reserveBody(id, { capability_id: capabilityId, cost_units: cost }));
    expect(reserved.verdict).to.equal('allow');
    nonces.set(id, reserved.nonce!.id);
  };
  const start = (id: string, nonce: string) => kernel.request('start', { request_id: id, nonce_id: nonce, arguments: reserveBody(id).arguments });

  // Each step moves holds through one kind of decision; the counters after it are data.
  const steps: Array<{ what: string; run: () => Promise<unknown>; after: Counters; holds: HoldCounts }> = [
    { what: 'a reserve holds one invocation and its cost', run: () => reserve('u-a', 7), after: [0, 1, 0, 7], holds: [1, 0, 0] },
    { what: 'a second reserve adds to what is held', run: () => reserve('u-b', 5), after: [0, 2, 0, 12], holds: [2, 0, 0] },
    {
      what: 'a committed start leaves the hold as it is',
      run: () => start('u-a', nonces.get('u-a')!),
      after: [0, 2, 0, 12],
      holds: [2, 0, 0],
    },
    {
      what: 'a completion report consumes the hold at its realized cost',
      run: async () => {
        const view = await kernel.request('operation.get', { operation_id: null, request_id: 'u-a' });
        const authorization = view.operation!.authorization!;
        await kernel.request('settle', { authorization, report: signReport(executor, authorization, root.publicKey, { realized_cost_units: 3 }) });
      },
      after: [1, 1, 3, 5],
      holds: [1, 1, 0],
    },
    {
      what: 'the expiry sweep releases the held reservation',
      run: async () => {
        root.advance(120_001);
        await kernel.request('operation.get', { operation_id: null, request_id: 'u-b' });
      },
      after: [1, 0, 3, 0],
      holds: [0, 1, 1],
    },
    {
      what: 'a start refused after revocation releases its hold',
      run: async () => {
        await reserve('u-c', 11);
        await kernel.request('grant.revoke', { capability_id: capabilityId });
        const denied = await start('u-c', nonces.get('u-c')!);
        expect(denied).to.include({ verdict: 'deny', reason: 'capability_revoked' });
      },
      after: [1, 0, 3, 0],
      holds: [0, 1, 2],
    },
  ];

  for (const step of steps) {
    it(`${step.what}, and the counters equal the holds`, async () => {
      await step.run();
      const row = usage();
      expect([row.invocations_used, row.invocations_held, row.cost_units_used, row.cost_units_held]).to.deep.equal(step.after);
      expect([row.holds_invocations_used, row.holds_invocations_held, row.holds_cost_units_used, row.holds_cost_units_held]).to.deep.equal(step.after);
      expect([row.holds_reserved, row.holds_consumed, row.holds_released]).to.deep.equal(step.holds);
      const counted = root.shell<{ state: string; n: number }>(`SELECT state, count(*) AS n FROM holds WHERE capability_id = '${capabilityId}' GROUP BY state`);
      const count = (state: string) => counted.find((row) => row.state === state)?.n ?? 0;
      expect([count('reserved'), count('consumed'), count('released')]).to.deep.equal(step.holds);
      expect(row.usage_agrees).to.equal(1);
    });
  }

  it('answers the holds-by-state gauge from the counters', async () => {
    const stats = (await kernel.request('stats', {})) as { holds: Array<{ state: string; count: number }> };
    expect(stats.holds).to.deep.include.members([
      { state: 'reserved', count: 0 },
      { state: 'consumed', count: 1 },
      { state: 'released', count: 2 },
    ]);
  });

  it('reports the counters in grant.list as the kernel uses them', async () => {
    const { grants } = (await kernel.request('grant.list', ALL_GRANTS)) as { grants: Array<Record<string, unknown>> };
    expect(grants.find((grant) => grant.capability_id === capabilityId)).to.include({ invocations_used: 1, invocations_held: 0, cost_units_used: 3, cost_units_held: 0 });
  });

  describe('edited by hand in the sqlite3 shell', () => {
    before(() => kernel.stop());
    after(async () => {
      kernel = await KernelProcess.start(root);
    });
    const shellRefusal = (sql: string): string => {
      try {
        execFileSync('sqlite3', [path.join(root.dir, 'kernel.db'), sql], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
      } catch (error) {
        return String((error as { stderr: string }).stderr);
      }
      return expect.fail(`the store accepted: ${sql}`);
    };
    const GUARD = 'store_corrupt: grants: usage counters move only with a hold, by exactly that hold';

    it('refuses a counter changed on its own, or one that names a hold but not its move', () => {
      expect(shellRefusal(`UPDATE grants SET invocations_used = invocations_used + 1`)).to.include(GUARD);
      expect(shellRefusal(`UPDATE grants SET cost_units_held = 0, invocations_held = 0`)).to.include(GUARD);
      const [consumed] = root.shell<{ hold_id: string }>(`SELECT hold_id FROM holds WHERE state = 'consumed' LIMIT 1`);
      expect(shellRefusal(`UPDATE grants SET invocations_used = invocations_used + 2, usage_hold = '${consumed!.hold_id}', usage_state = 'consumed'`)).to.include(GUARD);
      expect(shellRefusal(`UPDATE grants SET holds_released = holds_released + 1`)).to.include(GUARD);
      expect(shellRefusal(`UPDATE grants SET holds_consumed = 0, holds_reserved = 1`)).to.include(GUARD);
      expect(usage().usage_agrees).to.equal(1);
    });

    it('refuses a hold created in any state but reserved, and a changed charge on a disposed hold', () => {
      expect(shellRefusal(`UPDATE holds SET cost_units_charged = 0 WHERE state = 'consumed'`)).to.include('store_corrupt: holds: the charge of a disposed hold never changes');
      // The BEFORE INSERT guard speaks before the key's uniqueness is checked.
      expect(shellRefusal(`INSERT INTO holds (operation_rowid, operation_id, capability_id, invocations, cost_units_held, state, created_at)
        SELECT operation_rowid, operation_id, '${capabilityId}', 1, 0, 'consumed', 1 FROM operations LIMIT 1`)).to.include('illegal_transition: holds: a hold starts as reserved');
    });
  });
});

/**
 * A store at its first `versions` migrations holding grants g1 (100 cost
 * units) and g2 (no cost bound), and a way to place a reserved hold of one
 * invocation on either, for an operation of the same name.
 */
function olderStore(versions: number): { db: Database.Database; hold: (id: string, grant: string, cost: number) => void } {
  const db = new Database(':memory:');
  applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS.slice(0, versions), { provisioning: true });
  db.exec(`
    INSERT INTO grants (capability_id, tool, subject, max_invocations, max_cost_units, not_before, expires_at, issued_at, capability, capability_digest)
    VALUES ('g1', 't', '*', 10, 100, 0, 9, 0, '{}', 'd'), ('g2', 't', '*', 10, NULL, 0, 9, 0, '{}', 'd');`);
  const insertOperation = db.prepare(`INSERT INTO operations (operation_id, request_id, request_binding_hash, subject, tool, parameters_digest, cost_units, capability_id, state, created_at, updated_at)
    VALUES (?, ?, 'h', 's', 't', 'p', 0, ?, 'reserved', 0, 0)`);
  // Before version 10 a hold is keyed by its id; from it on by its operation's rowid, its id read from the operation's.
  const hold = (id: string, grant: string, cost: number) => {
    const row = Number(insertOperation.run(id, id, grant).lastInsertRowid);
    if (db.pragma('user_version', { simple: true }) as number >= 10) {
      db.prepare(`INSERT INTO holds (operation_rowid, operation_id, capability_id, invocations, cost_units_held, created_at) VALUES (?, ?, ?, 1, ?, 0)`).run(row, id, grant, cost);
    } else {
      db.prepare(`INSERT INTO holds (hold_id, operation_id, capability_id, invocations, cost_units_held, created_at) VALUES (?, ?, ?, 1, ?, 0)`).run(`hold:${id}`, id, grant, cost);
    }
  };
  return { db, hold };
}

describe('kernel-proc: kernel.db migration to grant usage counters', () => {
  it('fills the counters of a version-1 store from its holds, and the guard holds them from then on', () => {
    const { db, hold } = olderStore(1);
    try {
      for (const [id, cost] of [['o1', 4], ['o2', 6], ['o3', 9]] as const) hold(id, 'g1', cost);
      db.exec(`UPDATE holds SET state = 'consumed', cost_units_charged = 2 WHERE hold_id = 'hold:o1';
               UPDATE holds SET state = 'released' WHERE hold_id = 'hold:o2';`);
      applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      expect(db.pragma('user_version', { simple: true })).to.equal(KERNEL_MIGRATIONS.length);
      const rows = db.prepare(`SELECT capability_id, invocations_used, invocations_held, cost_units_used, cost_units_held, usage_agrees FROM grants_view ORDER BY capability_id`).all();
      expect(rows).to.deep.equal([
        { capability_id: 'g1', invocations_used: 1, invocations_held: 1, cost_units_used: 2, cost_units_held: 9, usage_agrees: 1 },
        { capability_id: 'g2', invocations_used: 0, invocations_held: 0, cost_units_used: 0, cost_units_held: 0, usage_agrees: 1 },
      ]);
      db.exec(`UPDATE holds SET state = 'consumed', cost_units_charged = 9 WHERE hold_id = 'hold:o3'`);
      expect(db.prepare(`SELECT invocations_used, invocations_held, cost_units_used, cost_units_held, usage_agrees FROM grants_view WHERE capability_id = 'g1'`).get()).to.deep.equal({
        invocations_used: 2,
        invocations_held: 0,
        cost_units_used: 11,
        cost_units_held: 0,
        usage_agrees: 1,
      });
    } finally {
      db.close();
    }
  });
});

describe('kernel-proc: kernel.db migration to hold counters (version 7)', () => {
  it('counts the holds of a version-6 store by state onto each grant, and the triggers keep counting', () => {
    const { db, hold } = olderStore(6);
    try {
      for (const [id, grant] of [['o1', 'g1'], ['o2', 'g1'], ['o3', 'g1'], ['o4', 'g1'], ['o5', 'g2']] as const) hold(id, grant, 1);
      db.exec(`UPDATE holds SET state = 'consumed', cost_units_charged = 1 WHERE hold_id IN ('hold:o1', 'hold:o2');
               UPDATE holds SET state = 'released' WHERE hold_id IN ('hold:o3', 'hold:o5');`);
      applyMigrations(db, 'test kernel', KERNEL_MIGRATIONS, { provisioning: false });
      const counters = db.prepare(`SELECT capability_id, holds_reserved, holds_consumed, holds_released, usage_agrees FROM grants_view ORDER BY capability_id`);
      expect(counters.all()).to.deep.equal([
        { capability_id: 'g1', holds_reserved: 1, holds_consumed: 2, holds_released: 1, usage_agrees: 1 },
        { capability_id: 'g2', holds_reserved: 0, holds_consumed: 0, holds_released: 1, usage_agrees: 1 },
      ]);
      hold('o6', 'g2', 1);
      db.exec(`UPDATE holds SET state = 'released' WHERE hold_id = 'hold:o4'`);
      expect(counters.all()).to.deep.equal([
        { capability_id: 'g1', holds_reserved: 0, holds_consumed: 2, holds_released: 2, usage_agrees: 1 },
        { capability_id: 'g2', holds_reserved: 1, holds_consumed: 0, holds_released: 1, usage_agrees: 1 },
      ]);
      expect(db.prepare(`SELECT name FROM sqlite_master WHERE name IN ('holds_by_grant', 'operations_by_creation')`).pluck().all()).to.deep.equal(['operations_by_creation']);
    } finally {
      db.close();
    }
  });
});
