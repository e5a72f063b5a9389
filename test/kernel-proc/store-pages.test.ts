// Pages kernel.db writes per operation (kernel-proc/store/schema.ts, version
// 10; docs/PERFORMANCE.md "Rows keyed by the operation's rowid"). A commit
// writes every page it dirtied to the WAL, and the checkpoint writes it
// again. Keyed by the operation's id, a digest, each of an operation's rows
// dirtied a random leaf of its own index that no other operation of the
// commit shared; keyed by the operation's rowid they share the newest
// leaves. The count is read from the WAL itself (its frames), over a store
// with a history long enough that its indexes have many leaves.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { KernelStore } from '../../kernel-proc/store/kernel-store.js';
import { holdIdFor } from '../../kernel-proc/store/holds-table.js';
import { operationIdFor } from '../../shared/protocol/binding.js';

const HISTORY = 10_000;
const IN_ONE_COMMIT = 64;
const GRANT = 'cap-pages';

/** A receipt's bytes as the store's checks read them (the signature is not the store's business); ~1.2 KB like a real one. */
function receiptText(operationId: string, seq: number): string {
  const body = {
    decision: 'reserve',
    hold: { disposition: 'reserved' },
    issued_at: 1,
    operation_id: operationId,
    reason: 'ok',
    receipt_id: `r:${operationId}:${seq}`,
    state: 'reserved',
    verdict: 'allow',
    padding: 'p'.repeat(900),
  };
  return JSON.stringify({ body, schema: 'custody.receipt.v1', signature: 's'.repeat(128), signer: 'k'.repeat(64) });
}

/** Reserve `name` as the kernel's reserve writes it: the operation, its hold, its nonce and its first receipt. */
function reserve(store: KernelStore, name: string, now: number): void {
  const operationId = operationIdFor(name);
  store.operations.insert({
    operation_id: operationId,
    request_id: name,
    request_binding_hash: operationId,
    subject: 'agent',
    tool: 'review-notes/append',
    parameters_digest: operationId,
    cost_units: 0,
    capability_id: GRANT,
    capability_digest: 'd'.repeat(64),
    executor_id: 'executor-1',
    state: 'reserved',
    created_at: now,
  });
  store.holds.place(operationId, GRANT, 0, now);
  store.nonces.mint(`nonce-${operationIdFor(`nonce ${name}`)}`, operationId, now, now + 60_000);
  store.receipts.insert({
    receipt_id: `r:${operationId}:1`,
    operation_id: operationId,
    seq: 1,
    decision: 'reserve',
    verdict: 'allow',
    reason: 'ok',
    state: 'reserved',
    hold_disposition: 'reserved',
    request_digest: operationIdFor(`request ${name}`),
    issued_at: now,
    receipt: receiptText(operationId, 1),
  });
}

describe('kernel-proc: kernel.db pages written per operation', function () {
  this.timeout(60_000);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-kernel-pages-'));
  let store: KernelStore;

  before(() => {
    store = KernelStore.provision(path.join(dir, 'kernel'));
    store.grants.insert({
      capability_id: GRANT,
      tool: 'review-notes/*',
      subject: 'agent',
      max_invocations: 10_000_000,
      max_cost_units: null,
      not_before: 0,
      expires_at: Number.MAX_SAFE_INTEGER,
      issued_at: 0,
      capability: '{}',
      capability_digest: 'd'.repeat(64),
    });
    store.db.transaction(() => {
      for (let i = 0; i < HISTORY; i++) reserve(store, `history-${i}`, i);
    })();
  });
  after(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** WAL frames (pages) one commit of `count` reserves writes, from an empty WAL. */
  function framesOfOneCommit(count: number, prefix: string): number {
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    store.db.transaction(() => {
      for (let i = 0; i < count; i++) reserve(store, `${prefix}-${i}`, HISTORY + i);
    })();
    const [result] = store.db.pragma('wal_checkpoint(PASSIVE)') as Array<{ log: number }>;
    return result!.log;
  }

  it('shares leaves among the operations of one commit: ~3 pages an operation, of which ~2 are its id\'s and its request id\'s', () => {
    const frames = framesOfOneCommit(IN_ONE_COMMIT, 'batch');
    // 154 frames here, 2.4 an operation (version 9, keyed by random ids: 544, 8.5). The operation id's and the request
    // id's indexes are the only random keys left: each operation lands on a leaf of each (~180 leaves an index here,
    // so ~60 distinct of 64). Everything else is appended to the tables' newest leaves.
    expect(frames / IN_ONE_COMMIT).to.be.at.most(3.5);
    expect(store.holds.forOperation(operationIdFor('batch-0'))).to.include({ hold_id: holdIdFor(operationIdFor('batch-0')), state: 'reserved' });
  });

  it('refuses a hold, a nonce or a receipt for an operation the store does not hold: no row is keyed by a rowid it was not given', () => {
    const stranger = operationIdFor('never reserved');
    const named = /operation_rowid and operation_id name different operations/;
    const rows = () => store.db.prepare('SELECT (SELECT count(*) FROM holds) + (SELECT count(*) FROM nonces) + (SELECT count(*) FROM receipts) AS n').pluck().get();
    const before = rows();
    expect(() => store.holds.place(stranger, GRANT, 0, 1)).to.throw(named);
    expect(() => store.nonces.mint('nonce-stranger', stranger, 1, 2)).to.throw(named);
    expect(() =>
      store.receipts.insert({
        receipt_id: `r:${stranger}:1`, operation_id: stranger, seq: 1, decision: 'reserve', verdict: 'allow', reason: 'ok', state: 'reserved',
        hold_disposition: 'reserved', request_digest: null, issued_at: 1, receipt: receiptText(stranger, 1),
      }),
    ).to.throw(named);
    // Nothing was written under a rowid SQLite would have assigned in the key's place.
    expect(rows()).to.equal(before);
  });

  it('costs a single operation the pages of the tables and indexes it enters, not one more index per row', () => {
    const frames = framesOfOneCommit(1, 'single');
    // 16 here: operations and its four indexes, holds, nonces and nonces_live, receipts and its key, the grant's
    // counters, and the b-trees' interior pages. Keyed by random ids (version 9) a single reserve wrote 26: the
    // hold's, the nonce's and the receipt's own indexes, each a leaf and its path.
    expect(frames).to.be.at.most(18);
  });
});
