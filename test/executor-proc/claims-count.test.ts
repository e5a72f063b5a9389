// The live ledger's size as a counter (ledger schema version 2): a claim
// checks capacity against claims_count instead of counting every row. The
// counter equals the rows after claims, refusals and archival, refuses a
// jump from the sqlite3 shell, and is filled in when a version-1 ledger opens.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { Signer } from '../../shared/crypto/ed25519.js';
import { applyMigrations } from '../../shared/store/migrations.js';
import { type ClaimSubject, Ledger } from '../../executor-proc/ledger/ledger.js';
import { LEDGER_MIGRATIONS } from '../../executor-proc/ledger/schema.js';
import { LEDGER_FILE, provisionStores, type ExecutorStores } from '../../executor-proc/ledger/stores.js';
import { reportBoundOf, reportSigner } from '../../executor-proc/report.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { KERNEL, sqlite } from './helpers.js';

const EXECUTOR = Signer.fromSeed(Buffer.alloc(32, 5));
let counter = 0;

function subject(): ClaimSubject {
  counter += 1;
  return {
    operationId: counter.toString(16).padStart(64, 'c'),
    tool: 'review-notes/append',
    authorizationDigest: 'a'.repeat(64),
    authorizationText: `{"fixture":${counter}}`,
    notBefore: Date.now() - 1000,
    expiresAt: Date.now() + 60_000,
  };
}

describe('executor-proc: the live ledger size as a counter', () => {
  let root: string;
  let stores: ExecutorStores;
  let ledger: Ledger;
  let file: string;

  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-claims-count-'));
    const dir = path.join(root, 'alpha');
    stores = provisionStores({
      dir,
      now: Date.now(),
      config: { executorId: 'unit', publicKey: EXECUTOR.publicKeyHex, keyEpoch: 1, kernelPublicKey: KERNEL.publicKeyHex, claimCapacity: 100, refusalReserve: 10 },
    });
    ledger = new Ledger(stores, { assertHeld: () => undefined });
    file = path.join(dir, LEDGER_FILE);
  });
  afterEach(() => {
    if (stores.ledger.open) stores.ledger.close();
    if (stores.archive.open) stores.archive.close();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const counted = () => sqlite(file, 'SELECT (SELECT n FROM claims_count) AS n, (SELECT count(*) FROM claims) AS rows').rows[0];

  it('equals the rows after claims and refusals, and is what capacity reads', () => {
    for (let i = 0; i < 3; i++) expect(ledger.claim(subject()).kind).to.equal('claimed');
    const sign = reportSigner(EXECUTOR, ledger.config, { authorizationDigest: 'a'.repeat(64), status: 'never_claimed', output: null, costUnits: null }, reportBoundOf(DEFAULT_FRAME_LIMITS));
    expect(ledger.refuse(subject(), sign).kind).to.equal('refused');
    expect(counted()).to.deep.equal({ n: 4, rows: 4 });
    expect(ledger.liveCount()).to.equal(4);
  });

  it('refuses a counter set by hand in the sqlite3 shell, or removed', () => {
    for (let i = 0; i < 3; i++) ledger.claim(subject());
    stores.ledger.close();
    expect(sqlite(file, 'UPDATE claims_count SET n = 0').error).to.include('claims_count moves only with a claim inserted or archived');
    expect(sqlite(file, 'DELETE FROM claims_count').error).to.include('claims_count cannot be removed');
    expect(counted()).to.deep.equal({ n: 3, rows: 3 });
  });

  it('is filled from the claims when a version-1 ledger is migrated', () => {
    const db = new Database(':memory:');
    try {
      applyMigrations(db, 'test ledger', LEDGER_MIGRATIONS.slice(0, 1), { provisioning: true });
      const insert = db.prepare(`INSERT INTO claims (operation_id, claim_id, kind, tool, authorization_digest, authorization, not_before, expires_at, claimed_at, recorded_at)
                                 VALUES (?, ?, 'claim', 't', 'd', '{}', 0, 9, 1, 1)`);
      for (const id of ['a', 'b', 'c', 'd', 'e']) insert.run(id, `claim-${id}`);
      applyMigrations(db, 'test ledger', LEDGER_MIGRATIONS, { provisioning: false });
      expect(db.prepare('SELECT n FROM claims_count').get()).to.deep.equal({ n: 5 });
      insert.run('f', 'claim-f');
      expect(db.prepare('SELECT n FROM claims_count').get()).to.deep.equal({ n: 6 });
    } finally {
      db.close();
    }
  });
});
