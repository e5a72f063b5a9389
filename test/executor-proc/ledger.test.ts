// The ledger's own guards, in process and from the sqlite3 shell: insert-once
// claims, refusals and reports, an immutable config row, a clock that never
// goes back, capacity with room kept for refusals, and archival that moves
// rows without ever dropping one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { artifactDigest, signArtifact } from '../../shared/artifacts/artifact.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import { isCustodyError } from '../../shared/errors.js';
import { Archiver } from '../../executor-proc/ledger/archive.js';
import { type ClaimSubject, Ledger } from '../../executor-proc/ledger/ledger.js';
import { LEDGER_FILE, openStores, provisionStores, type ExecutorStores } from '../../executor-proc/ledger/stores.js';
import { reportBoundOf, reportSigner } from '../../executor-proc/report.js';
import { DEFAULT_FRAME_LIMITS } from '../../shared/wire/frame-reader.js';
import { KERNEL, sqlite } from './helpers.js';

const EXECUTOR = Signer.fromSeed(Buffer.alloc(32, 3));
const held = { assertHeld: () => undefined };
let counter = 0;

function subject(window: { notBefore?: number; expiresAt?: number } = {}): ClaimSubject {
  counter += 1;
  const operationId = counter.toString(16).padStart(64, '0');
  return {
    operationId,
    tool: 'review-notes/append',
    authorizationDigest: 'a'.repeat(64),
    authorizationText: `{"fixture":${counter}}`,
    notBefore: window.notBefore ?? Date.now() - 1000,
    expiresAt: window.expiresAt ?? Date.now() + 60_000,
  };
}

function provision(dir: string, capacity = 100, reserve = 10): ExecutorStores {
  return provisionStores({
    dir,
    now: Date.now(),
    config: { executorId: 'unit', publicKey: EXECUTOR.publicKeyHex, keyEpoch: 1, kernelPublicKey: KERNEL.publicKeyHex, claimCapacity: capacity, refusalReserve: reserve },
  });
}

function signerFor(ledger: Ledger, status: 'completed' | 'never_claimed') {
  const content = { authorizationDigest: 'a'.repeat(64), status, output: status === 'completed' ? { ok: true } : null, costUnits: null };
  return reportSigner(EXECUTOR, ledger.config, content, reportBoundOf(DEFAULT_FRAME_LIMITS));
}

describe('executor-proc ledger', () => {
  let root: string;
  let dir: string;
  let stores: ExecutorStores;
  let ledger: Ledger;

  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-ledger-test-'));
    dir = path.join(root, 'alpha');
    stores = provision(dir);
    ledger = new Ledger(stores, held);
  });

  afterEach(() => {
    if (stores.ledger.open) stores.ledger.close();
    if (stores.archive.open) stores.archive.close();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('refuses UPDATE and DELETE on claims, refusals, reports and config from the sqlite3 shell', () => {
    const claimed = subject();
    expect(ledger.claim(claimed).kind).to.equal('claimed');
    ledger.retainReport(claimed.operationId, 'completed', signerFor(ledger, 'completed'));
    ledger.refuse(subject(), signerFor(ledger, 'never_claimed'));
    const file = path.join(dir, LEDGER_FILE);
    // Each refusal is the guard's own: a trigger's RAISE message, or — for a
    // delete — the archive permit function the delete triggers call, which
    // exists on custody's own connection only, so no shell can prepare one.
    const permitMissing = 'no such function: custody_archive_permit';
    const statements: Array<readonly [string, string]> = [
      ["UPDATE claims SET claimed_at = 1 WHERE kind = 'claim'", 'claims are insert-once: a claim or refusal is never changed'],
      ["DELETE FROM claims WHERE kind = 'claim'", permitMissing],
      ["DELETE FROM claims WHERE kind = 'refusal'", permitMissing],
      ["UPDATE reports SET status = 'reconciled_not_applied'", 'reports are insert-once: a signed report is kept as signed'],
      ['DELETE FROM reports', permitMissing],
      ["UPDATE config SET executor_id = 'mallory'", 'ledger config is immutable: it fixes the executor identity, the kernel pin and the capacity'],
      ['DELETE FROM config', 'ledger config is immutable: it fixes the executor identity, the kernel pin and the capacity'],
      ['UPDATE clock SET hwm_ms = 1', 'the clock high-water mark never goes back'],
      ['DELETE FROM clock', 'the clock high-water mark cannot be removed'],
      [
        'INSERT INTO config SELECT 2, executor_id, public_key, key_epoch, kernel_public_key, claim_capacity, refusal_reserve, file_dev, file_ino, provisioned_at FROM config',
        'ledger config has exactly one row',
      ],
    ];
    stores.ledger.close();
    stores.archive.close();
    for (const [sql, message] of statements) {
      expect(sqlite(file, sql).error, sql).to.be.a('string').that.includes(message);
    }
    // A connection that defines the permit function (denying) meets the delete triggers' own messages.
    const raw = new Database(file);
    raw.function('custody_archive_permit', (_operationId: unknown) => 0);
    for (const [sql, message] of [
      ["DELETE FROM claims WHERE kind = 'claim'", 'claims are insert-once: only archival removes a claim, after copying it'],
      ['DELETE FROM reports', 'reports are insert-once: only archival removes a report, after copying it'],
    ] as const) {
      expect(() => raw.prepare(sql).run(), sql).to.throw(message);
    }
    raw.close();
    const counts = sqlite(file, 'SELECT (SELECT count(*) FROM claims) AS claims, (SELECT count(*) FROM reports) AS reports, (SELECT count(*) FROM refusals) AS refusals').rows;
    expect(counts).to.deep.equal([{ claims: 2, reports: 2, refusals: 1 }]);
  });

  it('lets the clock high-water mark only move forward', () => {
    const mark = ledger.highWaterMark();
    stores.ledger.prepare('UPDATE clock SET hwm_ms = ?').run(mark + 10);
    expect(() => stores.ledger.prepare('UPDATE clock SET hwm_ms = ?').run(mark)).to.throw(/never goes back/);
    expect(ledger.highWaterMark()).to.equal(mark + 10);
  });

  it('judges the window by max(clock, high-water mark), not by the clock alone', () => {
    const late = Date.now() + 3_600_000;
    stores.ledger.prepare('UPDATE clock SET hwm_ms = ?').run(late);
    const window = subject({ expiresAt: Date.now() + 60_000 });
    const outcome = ledger.claim(window);
    expect(outcome).to.deep.equal({ kind: 'window_closed', now: late });
  });

  it('tells a window that has not opened from one that has closed, storing the mark for both', () => {
    const notYet = subject({ notBefore: Date.now() + 60_000, expiresAt: Date.now() + 120_000 });
    const early = ledger.claim(notYet);
    expect(early.kind).to.equal('window_not_open');
    expect(ledger.highWaterMark()).to.equal(early.kind === 'window_not_open' ? early.now : NaN);
    const closed = ledger.claim(subject({ notBefore: Date.now() - 120_000, expiresAt: Date.now() - 60_000 }));
    expect(closed.kind).to.equal('window_closed');
    expect(ledger.highWaterMark()).to.equal(closed.kind === 'window_closed' ? closed.now : NaN);
  });

  it('claims once when two connections race for one operation', () => {
    const other = new Ledger(openStores(dir, { publicKey: EXECUTOR.publicKeyHex, kernelPublicKey: KERNEL.publicKeyHex, executorId: undefined, keyEpoch: undefined, claimCapacity: undefined, refusalReserve: undefined }), held);
    const claimed = subject();
    const outcomes = [ledger.claim(claimed).kind, other.claim(claimed).kind];
    expect(outcomes).to.deep.equal(['claimed', 'existing']);
    other.db.close();
  });

  it('never claims after a refusal for the same operation', () => {
    const refused = subject();
    expect(ledger.refuse(refused, signerFor(ledger, 'never_claimed')).kind).to.equal('refused');
    const again = ledger.claim(refused);
    expect(again.kind).to.equal('existing');
    expect(again.kind === 'existing' && again.record.kind).to.equal('refusal');
  });

  it('keeps the refusal reserve free of claims, and refuses past the whole capacity', () => {
    stores.ledger.close();
    stores.archive.close();
    fs.rmSync(dir, { recursive: true });
    stores = provision(dir, 3, 1);
    ledger = new Ledger(stores, held);
    expect(ledger.claim(subject()).kind).to.equal('claimed');
    expect(ledger.claim(subject()).kind).to.equal('claimed');
    expect(ledger.claim(subject())).to.deep.equal({ kind: 'full', live: 2 });
    expect(ledger.refuse(subject(), signerFor(ledger, 'never_claimed')).kind).to.equal('refused');
    expect(ledger.refuse(subject(), signerFor(ledger, 'never_claimed'))).to.deep.equal({ kind: 'full', live: 3 });
  });

  it('refuses a second report for one claim (insert-once, the claim machine)', () => {
    const claimed = subject();
    ledger.claim(claimed);
    expect(ledger.retainReport(claimed.operationId, 'completed', signerFor(ledger, 'completed')).kind).to.equal('retained');
    const second = ledger.retainReport(claimed.operationId, 'reconciled_not_applied', signerFor(ledger, 'completed'));
    expect(second.kind).to.equal('existing');
    expect(second.record.report?.status).to.equal('completed');
  });

  it('refuses a never_claimed report for a claim', () => {
    const claimed = subject();
    ledger.claim(claimed);
    const refused = subject();
    ledger.refuse(refused, signerFor(ledger, 'never_claimed'));
    const unclaimed = subject();
    ledger.claim(unclaimed);
    // A report names its operation and claim and is keyed by a claim's seq (version 6).
    const insert = stores.ledger.prepare(
      `INSERT INTO reports (claim_seq, operation_id, claim_id, status, report, finished_at, recorded_at)
       SELECT (SELECT seq FROM claims WHERE operation_id = @key), operation_id, CASE WHEN @claim IS NULL THEN claim_id ELSE @claim END, @status, 'x', 1, 1
       FROM claims WHERE operation_id = @named`,
    );
    const named = claimed.operationId;
    expect(() => insert.run({ key: named, claim: null, status: 'never_claimed', named })).to.throw(/must match its claim/);
    // The claim_id is held to the operation's claim by the same trigger (no index of its own since version 5)…
    expect(() => insert.run({ key: named, claim: 'c-not-its-claim', status: 'completed', named })).to.throw(/must match its claim/);
    // …and so is the key: a report under another claim's seq than the claim its bytes and claim id name (version 6).
    expect(() => insert.run({ key: unclaimed.operationId, claim: null, status: 'completed', named })).to.throw(/must match its claim/);
    expect(ledger.records.live(claimed.operationId)?.report).to.equal(null);
    expect(ledger.records.live(unclaimed.operationId)?.report).to.equal(null);
  });

  it('archives only expired, reported, listed operations, and still finds them afterwards', () => {
    const archiver = new Archiver(ledger, stores.archive);
    const past = { notBefore: Date.now() - 120_000, expiresAt: Date.now() - 1 };
    const expired = subject(past);
    const open = subject();
    const unknown = subject(past);
    stores.ledger.prepare('INSERT INTO claims (operation_id, claim_id, kind, tool, authorization_digest, authorization, not_before, expires_at, claimed_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
      .run(expired.operationId, 'c-expired', 'claim', expired.tool, expired.authorizationDigest, expired.authorizationText, past.notBefore, past.expiresAt, past.notBefore, past.notBefore);
    const report = signArtifact('report', {
      authorization_digest: 'a'.repeat(64), operation_id: expired.operationId, executor_id: 'unit', key_epoch: 1, claim_id: 'c-expired',
      claimed_at: past.notBefore, finished_at: past.notBefore + 1, status: 'completed', output: null, output_digest: null, realized_cost_units: null,
    }, EXECUTOR);
    stores.ledger.prepare('INSERT INTO reports (claim_seq, operation_id, claim_id, status, report, finished_at, recorded_at) VALUES ((SELECT seq FROM claims WHERE operation_id = ?), ?, ?, ?, ?, ?, ?)')
      .run(expired.operationId, expired.operationId, 'c-expired', 'completed', report.text, past.notBefore + 1, past.notBefore + 1);
    ledger.claim(open);
    ledger.retainReport(open.operationId, 'completed', signerFor(ledger, 'completed'));
    stores.ledger.prepare('INSERT INTO claims (operation_id, claim_id, kind, tool, authorization_digest, authorization, not_before, expires_at, claimed_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
      .run(unknown.operationId, 'c-unknown', 'claim', unknown.tool, unknown.authorizationDigest, unknown.authorizationText, past.notBefore, past.expiresAt, past.notBefore, past.notBefore);

    const result = archiver.archive([expired.operationId, open.operationId, unknown.operationId, 'e'.repeat(64)]);
    expect(result.archived).to.equal(1);
    expect(result.live).to.equal(2);
    expect(result.notArchived).to.deep.equal([
      { operation_id: open.operationId, reason: 'window_open' },
      { operation_id: unknown.operationId, reason: 'no_report' },
      { operation_id: 'e'.repeat(64), reason: 'unknown_operation' },
    ]);
    const found = ledger.records.find(expired.operationId);
    expect(found?.archived).to.equal(true);
    expect(found?.report?.text).to.equal(report.text);
    expect(ledger.claim({ ...expired, expiresAt: Date.now() + 60_000 }).kind).to.equal('existing');
    expect(archiver.archive([expired.operationId]).notArchived).to.deep.equal([{ operation_id: expired.operationId, reason: 'already_archived' }]);

    // The archive is append-only, from the shell as from custody.
    stores.archive.close();
    const archiveFile = path.join(dir, 'archive.db');
    expect(sqlite(archiveFile, 'DELETE FROM archived_claims').error).to.be.a('string').that.includes('the archive is append-only');
    expect(sqlite(archiveFile, "UPDATE archived_claims SET status = 'x'").error).to.be.a('string').that.includes('the archive is append-only');
    expect(sqlite(archiveFile, 'SELECT operation_id, report_status FROM archived_claims_view').rows).to.deep.equal([
      { operation_id: expired.operationId, report_status: 'completed' },
    ]);
  });

  it('lists the live ledger a page at a time with why each entry waits, and archived entries leave the pages without moving the rest', () => {
    const archiver = new Archiver(ledger, stores.archive);
    const past = { notBefore: Date.now() - 120_000, expiresAt: Date.now() - 1 };
    const insertClaim = stores.ledger.prepare('INSERT INTO claims (operation_id, claim_id, kind, tool, authorization_digest, authorization, not_before, expires_at, claimed_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
    const insertReport = stores.ledger.prepare('INSERT INTO reports (claim_seq, operation_id, claim_id, status, report, finished_at, recorded_at) VALUES ((SELECT seq FROM claims WHERE operation_id = ?), ?, ?, ?, ?, ?, ?)');
    const entry = (window: 'passed' | 'open', reported: boolean): string => {
      const claimed = subject(window === 'passed' ? past : {});
      const claimId = `c-${claimed.operationId.slice(-6)}`;
      insertClaim.run(claimed.operationId, claimId, 'claim', claimed.tool, claimed.authorizationDigest, claimed.authorizationText, claimed.notBefore, claimed.expiresAt, claimed.notBefore, claimed.notBefore);
      if (reported) {
        const report = signArtifact('report', {
          authorization_digest: 'a'.repeat(64), operation_id: claimed.operationId, executor_id: 'unit', key_epoch: 1, claim_id: claimId,
          claimed_at: claimed.notBefore, finished_at: claimed.notBefore + 1, status: 'completed', output: null, output_digest: null, realized_cost_units: null,
        }, EXECUTOR);
        insertReport.run(claimed.operationId, claimed.operationId, claimId, 'completed', report.text, claimed.notBefore + 1, claimed.notBefore + 1);
      }
      return claimed.operationId;
    };
    const ready1 = entry('passed', true);
    const open = entry('open', true);
    const unreported = entry('passed', false);
    const ready2 = entry('passed', true);
    const openUnreported = entry('open', false);
    const pages = (limit: number) => {
      const seen: Array<Array<{ operation_id: string; waiting: string | null }>> = [];
      for (let after: number | null = 0; after !== null; ) {
        const page = archiver.live(after, limit);
        seen.push(page.claims);
        after = page.next;
      }
      return seen;
    };
    expect(pages(2)).to.deep.equal([
      [{ operation_id: ready1, waiting: null }, { operation_id: open, waiting: 'window_open' }],
      [{ operation_id: unreported, waiting: 'no_report' }, { operation_id: ready2, waiting: null }],
      [{ operation_id: openUnreported, waiting: 'no_report' }],
    ]);
    expect(pages(5), 'a page exactly as long as the ledger is the last').to.have.length(1);
    expect(pages(4).map((page) => page.length)).to.deep.equal([4, 1]);
    expect(archiver.archive([ready1]).archived).to.equal(1);
    const first = archiver.live(0, 2);
    expect(first.claims.map((claim) => claim.operation_id)).to.deep.equal([open, unreported]);
    expect(archiver.live(first.next!, 2).claims.map((claim) => claim.operation_id)).to.deep.equal([ready2, openUnreported]);

    // The window is judged by the high-water mark too: a clock behind it does not hold a passed window open.
    stores.ledger.prepare('UPDATE clock SET hwm_ms = ?').run(Date.now() + 3_600_000);
    expect(archiver.live(0, 5).claims.find((claim) => claim.operation_id === open)?.waiting).to.equal(null);
  });

  it('finishes a move that died between the archive copy and the live removal', () => {
    const archiver = new Archiver(ledger, stores.archive);
    const past = subject({ notBefore: Date.now() - 60_000, expiresAt: Date.now() + 50 });
    ledger.claim(past);
    ledger.retainReport(past.operationId, 'completed', signerFor(ledger, 'completed'));
    stores.ledger.prepare('UPDATE clock SET hwm_ms = ?').run(Date.now() + 1000);
    const live = stores.ledger.prepare('SELECT c.*, r.status, r.report, r.finished_at FROM claims c JOIN reports r USING (operation_id)').get() as Record<string, unknown>;
    delete live.seq;
    live.report_digest = artifactDigest(String(live.report));
    stores.archive.prepare(`INSERT INTO archived_claims (${Object.keys(live).join(', ')}, archived_at) VALUES (${Object.keys(live).map(() => '?').join(', ')}, 1)`).run(...Object.values(live));
    expect(archiver.archive([past.operationId]).archived).to.equal(1);
    expect(ledger.records.live(past.operationId)).to.equal(null);
    expect(ledger.records.archived(past.operationId)?.report?.status).to.equal('completed');
  });

  it('opens only the schema it created: a changed trigger is store_schema', () => {
    stores.ledger.close();
    stores.archive.close();
    const db = new Database(path.join(dir, LEDGER_FILE));
    db.exec('DROP TRIGGER reports_no_update');
    db.close();
    try {
      openStores(dir, { publicKey: EXECUTOR.publicKeyHex, kernelPublicKey: KERNEL.publicKeyHex, executorId: undefined, keyEpoch: undefined, claimCapacity: undefined, refusalReserve: undefined });
      expect.fail('opened a ledger without its guards');
    } catch (error) {
      expect(isCustodyError(error, 'store_schema')).to.equal(true);
    }
  });
});
