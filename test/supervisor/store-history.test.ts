// supervisor.db against a long history (docs/PERFORMANCE.md "History on the
// start path"): no statement the store prepares reads the request log row by
// row — a start resumes the requests in flight through the phase index —
// and recover-rollback reads the rows dispatched to an executor a slice of
// the table at a time, missing none at a slice's edge.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { operationIdFor } from '../../shared/protocol/binding.js';
import { OPEN_PHASES } from '../../supervisor/operations/phases.js';
import { type RequestRow, SupervisorStore } from '../../supervisor/store/supervisor-store.js';
import { preparedWhile, queryPlan, rowByRow } from '../helpers/query-plans.js';

/** Statements that read a whole table on purpose, and why. */
const WHOLE_TABLE: ReadonlyArray<readonly [RegExp, string]> = [
  [/FROM incidents ORDER BY id DESC LIMIT/, 'the newest incidents: read backwards by rowid, stopping at the limit'],
  [/FROM children ORDER BY name/, 'one row per configured child'],
];

describe('supervisor: supervisor.db against a long history', () => {
  let dir: string;
  let store: SupervisorStore;
  let prepared: string[] = [];

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-history-'));
    prepared = preparedWhile(() => (store = SupervisorStore.provision(path.join(dir, 'supervisor'))));
  });
  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const plan = (sql: string): string[] => queryPlan(store.db, sql);

  it('finds requests by a key or an index in every statement it prepares, never by reading the request log', () => {
    const statements = prepared.filter((sql) => /^\s*(SELECT|UPDATE|DELETE|INSERT|WITH)/i.test(sql));
    expect(statements.length).to.be.greaterThan(20);
    expect(statements.some((sql) => /FROM requests WHERE phase IN/.test(sql)), 'the open requests are read by phase').to.equal(true);
    const scans = statements
      .filter((sql) => !WHOLE_TABLE.some(([pattern]) => pattern.test(sql)))
      .flatMap((sql) => rowByRow(plan(sql)).map((detail) => `${detail}: ${sql.trim()}`));
    expect(scans).to.deep.equal([]);
    const open = statements.find((sql) => /FROM requests WHERE phase IN/.test(sql))!;
    expect(plan(open).join('; ')).to.include('SEARCH requests USING INDEX requests_by_phase (phase=?)');
  });

  const insert = (id: string, phase: string, executor: string | null) =>
    store.db
      .prepare(
        `INSERT INTO requests (request_id, operation_id, kind, tool, subject, arguments, cost_units, binding_hash, phase, executor, authorization, created_at, updated_at)
         VALUES (?, ?, 'invoke', 't/x', 'agent', '{}', 1, ?, ?, ?, ?, ?, ?)`,
      )
      .run(id, operationIdFor(id), 'b'.repeat(64), phase, executor, executor === null ? null : `{"a":"${id}"}`, 1000, 1000);

  it('resumes exactly the requests in an open phase, none settled, refused or parked, oldest first and in the order logged within a millisecond', () => {
    // Logged in this order, all in one millisecond, phases against the index's order.
    const phases = ['reported', 'received', 'settled', 'executing', 'reserved', 'refused', 'reconciling', 'quarantined', 'authorized'];
    for (const [index, phase] of phases.entries()) insert(`r-${index}`, phase, null);
    expect([...OPEN_PHASES].sort()).to.deep.equal(['authorized', 'executing', 'received', 'reconciling', 'reported', 'reserved']);
    expect(store.openRequests().map((row) => row.phase)).to.deep.equal(['reported', 'received', 'executing', 'reserved', 'reconciling', 'authorized']);
  });

  it('reads the rows dispatched to one executor a slice at a time, the rows on either side of every slice edge included', async () => {
    // 23 rows, every third one this executor's, one with no authorization: slices of 4 rows put matches on both sides of the edges.
    const mine: string[] = [];
    for (let index = 1; index <= 23; index++) {
      const executor = index % 3 === 0 ? 'exec-a' : 'exec-b';
      insert(`d-${index}`, index % 2 === 0 ? 'settled' : 'executing', executor);
      if (executor === 'exec-a') mine.push(`d-${index}`);
    }
    insert('d-24', 'received', null);
    const slices: RequestRow[][] = [];
    for await (const slice of store.requestsDispatchedTo('exec-a', 4)) slices.push(slice);
    expect(slices.flat().map((row) => row.request_id)).to.deep.equal(mine);
    expect(Math.max(...slices.map((slice) => slice.length)), 'no slice holds more than its rows').to.be.at.most(2);
    expect(slices.length).to.be.greaterThan(3);
  });
});
