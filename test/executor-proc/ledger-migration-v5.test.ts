// ledger.db version 5 (executor-proc/ledger/schema.ts): a ledger written at
// version 4 — reports with a stored report_digest and a unique claim_id — is
// migrated when this build opens it; every claim, refusal and report is
// still found and replayed as it was, archival still copies the digest, and
// the schema check accepts the migrated file.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { Signer } from '../../shared/crypto/ed25519.js';
import { applyMigrations } from '../../shared/store/migrations.js';
import { Archiver } from '../../executor-proc/ledger/archive.js';
import { type ClaimSubject, Ledger } from '../../executor-proc/ledger/ledger.js';
import type { OperationRecord } from '../../executor-proc/ledger/records.js';
import { LEDGER_MIGRATIONS } from '../../executor-proc/ledger/schema.js';
import { LEDGER_FILE, openStores, provisionStores } from '../../executor-proc/ledger/stores.js';
import { reportBoundOf, reportSigner } from '../../executor-proc/report.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { buildOlderStore } from '../helpers/older-store.js';
import { KERNEL } from './helpers.js';

const V4 = LEDGER_MIGRATIONS.slice(0, 4);
const EXECUTOR = Signer.fromSeed(Buffer.alloc(32, 5));
const held = { assertHeld: () => undefined };
const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');
const OPEN = { kernelPublicKey: KERNEL.publicKeyHex, executorId: 'unit', claimCapacity: undefined, refusalReserve: undefined };

function subject(n: number, expiresAt = Date.now() + 60_000): ClaimSubject {
  return {
    operationId: n.toString(16).padStart(64, '0'),
    tool: 'review-notes/append',
    authorizationDigest: 'a'.repeat(64),
    authorizationText: `{"fixture":${n}}`,
    notBefore: Date.now() - 1000,
    expiresAt,
  };
}

function signerFor(ledger: Ledger, status: 'completed' | 'never_claimed') {
  const content = { authorizationDigest: 'a'.repeat(64), status, output: status === 'completed' ? { ok: true, ratio: 0.1 } : null, costUnits: null };
  return reportSigner(EXECUTOR, ledger.config, content, reportBoundOf(DEFAULT_FRAME_LIMITS));
}

function schemaOf(db: Database.Database): string[] {
  return db.prepare<[], { sql: string }>("SELECT type || ' ' || name || ': ' || sql AS sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name").all().map((row) => row.sql);
}

describe('executor-proc: ledger.db migration to version 5', () => {
  let root: string;
  let dir: string;
  const done = subject(1);
  const unknown = subject(2);
  const refused = subject(3);
  const expiring = subject(4);
  const ids = [done, unknown, refused, expiring].map((s) => s.operationId);
  let before: { records: Array<OperationRecord | null>; head: number; live: number; schema: string[]; digests: Array<{ operation_id: string; report_digest: string }> };

  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-ledger-v5-'));
    dir = path.join(root, 'alpha');
    const stores = provisionStores({
      dir,
      now: Date.now(),
      config: { executorId: 'unit', publicKey: EXECUTOR.publicKeyHex, keyEpoch: 1, kernelPublicKey: KERNEL.publicKeyHex, claimCapacity: 100, refusalReserve: 10 },
    });
    const ledger = new Ledger(stores, held);
    ledger.claim(done);
    ledger.retainReport(done.operationId, 'completed', signerFor(ledger, 'completed'));
    ledger.claim(unknown);
    ledger.refuse(refused, signerFor(ledger, 'never_claimed'));
    ledger.claim(expiring);
    ledger.retainReport(expiring.operationId, 'completed', signerFor(ledger, 'completed'));
    // What this build reads from the ledger it wrote: the older store holds the same rows, and must read the same once migrated.
    const read = { records: ids.map((id) => ledger.records.find(id)), head: ledger.head(), live: ledger.liveCount() };
    const source = path.join(root, 'ledger-current.db');
    stores.ledger.prepare('VACUUM INTO ?').run(source);
    stores.ledger.close();
    stores.archive.close();

    const file = path.join(dir, LEDGER_FILE);
    for (const suffix of ['', '-wal', '-shm']) fs.rmSync(file + suffix, { force: true });
    buildOlderStore({
      target: file,
      source,
      migrations: V4,
      // The config row names the file it belongs to: the rebuilt one.
      functions: { sha256: (text: string) => sha256(text), file_dev: () => fs.statSync(file).dev, file_ino: () => fs.statSync(file).ino },
      rows: [
        ['config', 'SELECT *, file_dev() AS file_dev, file_ino() AS file_ino FROM (SELECT id, executor_id, public_key, key_epoch, kernel_public_key, claim_capacity, refusal_reserve, provisioned_at FROM src.config)'],
        ['clock', 'SELECT * FROM src.clock'],
        ['claims', 'SELECT * FROM src.claims ORDER BY seq'],
        // Since version 6 a report is keyed by its claim's seq; version 4 numbered reports on their own.
        ['reports', 'SELECT claim_seq AS seq, *, sha256(report) AS report_digest FROM src.reports ORDER BY claim_seq'],
        ['head', 'SELECT * FROM src.head'],
        ['claims_count', 'SELECT * FROM src.claims_count'],
        ['key_epochs', 'SELECT * FROM src.key_epochs'],
        ['kernel_epochs', 'SELECT * FROM src.kernel_epochs'],
      ],
    });
    fs.chmodSync(file, 0o600);
    const db = new Database(file, { readonly: true });
    try {
      before = {
        ...read,
        schema: schemaOf(db),
        digests: db.prepare<[], { operation_id: string; report_digest: string }>('SELECT operation_id, report_digest FROM reports ORDER BY seq').all(),
      };
    } finally {
      db.close();
    }
  });
  afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

  it('starts from a store with exactly the schema version 4 creates, its reports with their stored digests', () => {
    const pristine = new Database(':memory:');
    try {
      applyMigrations(pristine, 'pristine', V4, { provisioning: true });
      expect(before.schema).to.deep.equal(schemaOf(pristine));
    } finally {
      pristine.close();
    }
    expect(before.digests).to.have.length(3);
    expect(before.records.filter((record) => record?.report).length).to.equal(3);
  });

  it('migrates on open: the same records, head and count; reports keep their bytes without a stored digest', () => {
    const stores = openStores(dir, OPEN);
    try {
      expect(stores.ledger.pragma('user_version', { simple: true })).to.equal(LEDGER_MIGRATIONS.length);
      const ledger = new Ledger(stores, held);
      expect(ids.map((id) => ledger.records.find(id))).to.deep.equal(before.records);
      expect([ledger.head(), ledger.liveCount()]).to.deep.equal([before.head, before.live]);
      const columns = stores.ledger.prepare<[], { name: string }>("SELECT name FROM pragma_table_info('reports')").all().map((c) => c.name);
      expect(columns).to.not.include('report_digest');
      const reports = stores.ledger.prepare<[], { operation_id: string; report: string }>('SELECT operation_id, report FROM reports ORDER BY claim_seq').all();
      expect(reports.map((row) => ({ operation_id: row.operation_id, report_digest: sha256(row.report) }))).to.deep.equal(before.digests);
    } finally {
      stores.ledger.close();
      stores.archive.close();
    }
  });

  it('replays every report as it was, takes no second claim, and archives with the digest it recomputes', () => {
    const stores = openStores(dir, OPEN);
    try {
      const ledger = new Ledger(stores, held);
      const [doneBefore, unknownBefore, refusedBefore, expiringBefore] = before.records;
      const again = ledger.retainReport(done.operationId, 'completed', signerFor(ledger, 'completed'));
      expect(again).to.deep.equal({ kind: 'existing', record: doneBefore });
      expect(ledger.claim(unknown)).to.deep.equal({ kind: 'existing', record: unknownBefore });
      expect(ledger.refuse(refused, signerFor(ledger, 'never_claimed'))).to.deep.equal({ kind: 'existing', record: refusedBefore });
      // A report retained after the migration is kept the new way.
      const late = ledger.retainReport(unknown.operationId, 'reconciled_not_applied', signerFor(ledger, 'completed'));
      expect(late.kind).to.equal('retained');

      stores.ledger.prepare('UPDATE clock SET hwm_ms = ?').run(expiring.expiresAt + 1000);
      const archived = new Archiver(ledger, stores.archive).archive([expiring.operationId]);
      expect(archived.archived).to.equal(1);
      const copy = stores.archive.prepare('SELECT report, report_digest FROM archived_claims WHERE operation_id = ?').get(expiring.operationId) as { report: string; report_digest: string };
      expect(copy.report).to.equal(expiringBefore!.report!.text);
      expect(copy.report_digest).to.equal(before.digests.find((row) => row.operation_id === expiring.operationId)!.report_digest);
      expect(ledger.records.find(expiring.operationId)).to.deep.equal({ ...expiringBefore!, archived: true });
    } finally {
      stores.ledger.close();
      stores.archive.close();
    }
  });
});
