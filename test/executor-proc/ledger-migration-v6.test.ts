// ledger.db version 6 (executor-proc/ledger/schema.ts): a report is keyed by
// its claim's seq, not by its operation id. A ledger written at version 5 is
// migrated when this build opens it — every record read as before, each
// report under its own claim, the schema check satisfied — and the reports
// of one group commit share the leaves they write (WAL frames counted).
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { Signer } from '../../shared/crypto/ed25519.js';
import { isCustodyError } from '../../shared/errors.js';
import { applyMigrations } from '../../shared/store/migrations.js';
import { type ClaimSubject, Ledger } from '../../executor-proc/ledger/ledger.js';
import { LEDGER_MIGRATIONS } from '../../executor-proc/ledger/schema.js';
import { LEDGER_FILE, openStores, provisionStores, type ExecutorStores } from '../../executor-proc/ledger/stores.js';
import { reportBoundOf, reportSigner } from '../../executor-proc/report.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { downgradeLedgerToV5 } from '../helpers/ledger-v5.js';
import { copyPlans } from '../helpers/query-plans.js';
import { KERNEL } from './helpers.js';

const V5 = LEDGER_MIGRATIONS.slice(0, 5);
const EXECUTOR = Signer.fromSeed(Buffer.alloc(32, 6));
const held = { assertHeld: () => undefined };
const OPEN = { kernelPublicKey: KERNEL.publicKeyHex, executorId: 'unit', claimCapacity: undefined, refusalReserve: undefined };

/** An operation id is a digest (shared/protocol/binding.ts): random-looking, as the index on it sees it. */
function subject(n: number): ClaimSubject {
  return {
    operationId: createHash('sha256').update(`operation ${n}`).digest('hex'),
    tool: 'review-notes/append',
    authorizationDigest: 'a'.repeat(64),
    authorizationText: `{"fixture":${n},"padding":"${'p'.repeat(1000)}"}`,
    notBefore: Date.now() - 1000,
    expiresAt: Date.now() + 60_000,
  };
}

function signerFor(ledger: Ledger, status: 'completed' | 'never_claimed') {
  const content = { authorizationDigest: 'a'.repeat(64), status, output: status === 'completed' ? { ok: true } : null, costUnits: null };
  return reportSigner(EXECUTOR, ledger.config, content, reportBoundOf(DEFAULT_FRAME_LIMITS));
}

function provision(dir: string): ExecutorStores {
  return provisionStores({
    dir,
    now: Date.now(),
    config: { executorId: 'unit', publicKey: EXECUTOR.publicKeyHex, keyEpoch: 1, kernelPublicKey: KERNEL.publicKeyHex, claimCapacity: 100_000, refusalReserve: 10 },
  });
}

describe('executor-proc: ledger.db migration to version 6', () => {
  let root: string;
  let dir: string;
  // Claimed in this order; their ids sort otherwise, and the older store numbers its reports in id order.
  const subjects = [7, 3, 9, 1, 5].map(subject);
  const ids = subjects.map((s) => s.operationId);
  let before: { records: unknown[]; head: number; live: number; reportSeqs: Record<string, number>; claimSeqs: Record<string, number> };

  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-ledger-v6-'));
    dir = path.join(root, 'alpha');
    const stores = provision(dir);
    const ledger = new Ledger(stores, held);
    const [done, unknown, refused, other, last] = subjects as [ClaimSubject, ClaimSubject, ClaimSubject, ClaimSubject, ClaimSubject];
    ledger.claim(done);
    ledger.claim(unknown);
    ledger.refuse(refused, signerFor(ledger, 'never_claimed'));
    ledger.claim(other);
    ledger.claim(last);
    ledger.retainReport(last.operationId, 'completed', signerFor(ledger, 'completed'));
    ledger.retainReport(done.operationId, 'completed', signerFor(ledger, 'completed'));
    ledger.retainReport(other.operationId, 'completed', signerFor(ledger, 'completed'));
    const read = { records: ids.map((id) => ledger.records.find(id)), head: ledger.head(), live: ledger.liveCount() };
    const file = path.join(dir, LEDGER_FILE);
    stores.ledger.close();
    stores.archive.close();
    downgradeLedgerToV5(dir, root);
    const db = new Database(file, { readonly: true });
    try {
      const seqs = (sql: string) => Object.fromEntries(db.prepare<[], { operation_id: string; seq: number }>(sql).all().map((row) => [row.operation_id, row.seq]));
      before = { ...read, reportSeqs: seqs('SELECT operation_id, seq FROM reports'), claimSeqs: seqs('SELECT operation_id, seq FROM claims') };
      expect(db.pragma('user_version', { simple: true })).to.equal(5);
    } finally {
      db.close();
    }
  });
  afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

  it('starts from a version-5 store whose reports are numbered apart from their claims', () => {
    expect(Object.keys(before.reportSeqs)).to.have.length(4);
    expect(Object.entries(before.reportSeqs).some(([id, seq]) => before.claimSeqs[id] !== seq)).to.equal(true);
  });

  it('migrates on open: the same records, head and count, each report under its own claim\'s seq', () => {
    const stores = openStores(dir, OPEN);
    try {
      expect(stores.ledger.pragma('user_version', { simple: true })).to.equal(LEDGER_MIGRATIONS.length);
      const ledger = new Ledger(stores, held);
      expect(ids.map((id) => ledger.records.find(id))).to.deep.equal(before.records);
      expect([ledger.head(), ledger.liveCount()]).to.deep.equal([before.head, before.live]);
      const keyed = stores.ledger.prepare<[], { operation_id: string; claim_seq: number }>('SELECT operation_id, claim_seq FROM reports').all();
      expect(Object.fromEntries(keyed.map((row) => [row.operation_id, row.claim_seq]))).to.deep.equal(
        Object.fromEntries(Object.keys(before.reportSeqs).map((id) => [id, before.claimSeqs[id]])),
      );
      // A report retained after the migration is kept under its claim too, and replays.
      const late = ledger.retainReport(ids[1]!, 'reconciled_not_applied', signerFor(ledger, 'completed'));
      expect(late.kind).to.equal('retained');
      expect(ledger.retainReport(ids[1]!, 'completed', signerFor(ledger, 'completed'))).to.deep.equal({ kind: 'existing', record: late.record });
    } finally {
      stores.ledger.close();
      stores.archive.close();
    }
  });
});

describe('executor-proc: ledger.db migration to version 6 refused', () => {
  it('rolls back with store_schema naming the check when a report has no claim to be keyed by, the store still at version 5', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test ledger', V5, { provisioning: true });
      db.exec(`PRAGMA foreign_keys = OFF; DROP TRIGGER reports_match_kind;
               INSERT INTO reports (seq, operation_id, claim_id, status, report, finished_at, recorded_at)
               VALUES (1, 'o1', 'c1', 'completed', '{"body":{"operation_id":"o1"}}', 1, 1);`);
      let error: unknown;
      try {
        applyMigrations(db, 'test ledger', LEDGER_MIGRATIONS, { provisioning: false });
      } catch (caught) {
        error = caught;
      }
      expect(isCustodyError(error) && error.code).to.equal('store_schema');
      expect(String((error as Error).message)).to.include('v6_every_report_copied_under_its_claim');
      expect(db.pragma('user_version', { simple: true })).to.equal(5);
      expect(db.prepare('SELECT operation_id FROM reports').pluck().all()).to.deep.equal(['o1']);
    } finally {
      db.close();
    }
  });

  it('copies the reports walking the claims in seq order, each found by the old index: nothing sorted in memory', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test ledger', V5, { provisioning: true });
      const { plans, indexedAfterACopy } = copyPlans(db, LEDGER_MIGRATIONS[5]!.sql, 'CREATE TEMP TABLE ledger_v6_check');
      expect(indexedAfterACopy).to.deep.equal([]);
      const plan = plans.get('reports');
      expect(plan).to.match(/^SCAN c; SEARCH r USING INDEX sqlite_autoindex_reports_v5_1 \(operation_id=\?\)$/);
    } finally {
      db.close();
    }
  });
});

describe('executor-proc: ledger.db pages written per report', function () {
  this.timeout(60_000);
  const HISTORY = 20_000;
  const IN_ONE_COMMIT = 64;

  it('shares leaves among the reports of one commit: no random leaf of a report index per report', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-ledger-pages-'));
    const stores = provision(path.join(root, 'alpha'));
    try {
      const ledger = new Ledger(stores, held);
      const sign = signerFor(ledger, 'completed');
      const claimAndReport = (from: number, count: number) => {
        for (let n = from; n < from + count; n++) ledger.claim(subject(1_000_000 + n));
        for (let n = from; n < from + count; n++) ledger.retainReport(subject(1_000_000 + n).operationId, 'completed', sign);
      };
      stores.ledger.transaction(() => claimAndReport(0, HISTORY))();
      // The claims of the next commit first, then their reports alone in one commit, from an empty WAL.
      stores.ledger.transaction(() => {
        for (let n = HISTORY; n < HISTORY + IN_ONE_COMMIT; n++) ledger.claim(subject(1_000_000 + n));
      })();
      stores.ledger.pragma('wal_checkpoint(TRUNCATE)');
      stores.ledger.transaction(() => {
        for (let n = HISTORY; n < HISTORY + IN_ONE_COMMIT; n++) ledger.retainReport(subject(1_000_000 + n).operationId, 'completed', sign);
      })();
      const [result] = stores.ledger.pragma('wal_checkpoint(PASSIVE)') as Array<{ log: number }>;
      // 17 here: ~1 KB a report, four to a page, so 64 reports fill ~16 leaves of reports, and the head. Keyed by
      // operation id (version 5) each report also entered a random leaf of that id's index: 106.
      expect(result!.log).to.be.at.most(40);
    } finally {
      stores.ledger.close();
      stores.archive.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
