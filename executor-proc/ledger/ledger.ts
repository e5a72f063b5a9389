// The ledger's transactions (ARCHITECTURE.md §6.2 steps 3 and 5, the refusal of
// reconcile_operation). Each write runs in one BEGIN IMMEDIATE transaction
// that re-reads what it depends on, so nothing decided outside it is acted
// on inside it. Claims and reports of the execute path are grouped
// (shared/store/group-commit.ts): those asked for within one turn of the
// event loop share one transaction, each in its own savepoint, and each
// caller hears its outcome only once that transaction is durable — so an
// effect still starts only after its own claim is on disk, and a report
// leaves only after it is. Time comes from max(clock, high-water mark), and the mark is
// stored before any answer that depends on time, refusals included.
import { randomHex } from '../../shared/random-hex.js';
import { statSync } from 'node:fs';
import type Database from 'better-sqlite3';
import type { SignedArtifact } from '../../shared/artifacts/artifact.js';
import { nowMs } from '../../shared/clock.js';
import { CustodyError, toCustodyError } from '../../shared/errors.js';
import { HeadFloor } from '../../shared/store/head-floor.js';
import type { ReportStatus } from '../../shared/protocol/artifacts.js';
import { BatchSizes, type StatsResult } from '../../shared/protocol/stats.js';
import { GroupCommit } from '../../shared/store/group-commit.js';
import { CLAIM_MACHINE } from '../claim-machine.js';
import { type OperationRecord, RecordReader, stateOf } from './records.js';
import { EpochBook } from './epochs.js';
import type { ExecutorStores, LedgerConfig } from './stores.js';

/** What a claim or a refusal binds: the operation and its authorization. */
export interface ClaimSubject {
  readonly operationId: string;
  readonly tool: string;
  readonly authorizationDigest: string;
  readonly authorizationText: string;
  readonly notBefore: number;
  readonly expiresAt: number;
  /**
   * The executor key epoch the authorization is addressed to and the kernel
   * key that signed it: a claim checks, inside its transaction, that no
   * rotation retired either (epoch_retired).
   */
  readonly signedUnder?: { readonly executorEpoch: number; readonly kernelKey: string };
}

export type ClaimOutcome =
  | { readonly kind: 'claimed'; readonly record: OperationRecord }
  | { readonly kind: 'existing'; readonly record: OperationRecord }
  // Two answers, not one: the supervisor retries a window that has not opened
  // and reconciles one that has closed (never_claimed).
  | { readonly kind: 'window_not_open'; readonly now: number }
  | { readonly kind: 'window_closed'; readonly now: number }
  | { readonly kind: 'full'; readonly live: number }
  // A rotation retired the epoch the authorization was addressed to, or the kernel key that signed it.
  | { readonly kind: 'epoch_retired'; readonly why: string };

export type RefuseOutcome =
  | { readonly kind: 'refused'; readonly record: OperationRecord }
  | { readonly kind: 'existing'; readonly record: OperationRecord }
  | { readonly kind: 'full'; readonly live: number };

export type RetainOutcome =
  | { readonly kind: 'retained'; readonly record: OperationRecord }
  | { readonly kind: 'existing'; readonly record: OperationRecord };

/** Signs a report once the transaction knows its claim and its finish time. */
export type ReportSigner = (claim: OperationRecord, finishedAt: number) => SignedArtifact<'report'>;

export interface WriteGuard {
  /** Throws once the directory lock is lost: nothing may be written then. */
  assertHeld(): void;
}

/** Called once when the ledger's path no longer names the open file: the process must stop and be replaced. */
export type OnReplaced = (error: CustodyError) => void;

export function newClaimId(kind: 'claim' | 'refusal'): string {
  return `${kind === 'claim' ? 'c' : 'r'}${randomHex(12)}`;
}

/**
 * Claims and reports per grouped transaction. A size, not a behaviour: more
 * waiting writes take the next transaction in the same turn (and an
 * executor's operations in flight are bounded by max_in_flight anyway).
 */
const GROUP_COMMIT_MAX_WRITES = 256;

export class Ledger {
  /** What provisioning fixed: the first identity and the kernel's first key. */
  readonly provisioned: LedgerConfig;
  readonly epochs: EpochBook;
  #current: LedgerConfig | null = null;
  readonly records: RecordReader;
  readonly #db: Database.Database;
  readonly #guard: WriteGuard;
  readonly #readHwm: Database.Statement<[], { hwm_ms: number }>;
  readonly #raiseHwm: Database.Statement<[number, number]>;
  readonly #batches = new BatchSizes('ledger');
  readonly #group: GroupCommit;
  readonly #countLive: Database.Statement<[], { n: number }>;
  readonly #insertClaim: Database.Statement;
  readonly #insertReport: Database.Statement<[{ operationId: string; claimId: string; status: ReportStatus; report: string; finishedAt: number }]>;
  readonly #readHead: Database.Statement<[], { seq: number }>;
  readonly #raiseHead: Database.Statement<[]>;
  readonly #file: ExecutorStores['ledgerFile'];
  readonly #onReplaced: OnReplaced;
  #replaced: CustodyError | null = null;
  /** The highest head this process has read after a commit (#advanceHead). */
  readonly #floor = new HeadFloor();
  /** Told the new head after a report or a refusal commits (docs/ROLLBACK.md); claims are witnessed by their caller. */
  onAdvanced: (head: number, event: 'report' | 'refusal') => void = () => undefined;

  constructor(stores: ExecutorStores, guard: WriteGuard, onReplaced: OnReplaced = () => undefined) {
    this.provisioned = stores.config;
    this.#db = stores.ledger;
    this.epochs = new EpochBook(stores.ledger);
    this.#guard = guard;
    this.#file = stores.ledgerFile;
    this.#onReplaced = onReplaced;
    this.#readHead = this.#db.prepare('SELECT seq FROM head WHERE id = 1');
    this.#raiseHead = this.#db.prepare('UPDATE head SET seq = seq + 1 WHERE id = 1');
    this.records = new RecordReader(stores.ledger, stores.archive);
    this.#group = new GroupCommit(this.#db, GROUP_COMMIT_MAX_WRITES, 'executor', undefined, (writes) => this.#batches.record(writes));
    this.#readHwm = this.#db.prepare('SELECT hwm_ms FROM clock WHERE id = 1');
    this.#raiseHwm = this.#db.prepare('UPDATE clock SET hwm_ms = ? WHERE id = 1 AND hwm_ms < ?');
    // Kept by the claims triggers (schema.ts, version 2): O(1) however full the ledger is.
    this.#countLive = this.#db.prepare('SELECT n FROM claims_count WHERE id = 1');
    this.#insertClaim = this.#db.prepare(
      `INSERT INTO claims (operation_id, claim_id, kind, tool, authorization_digest, authorization, not_before, expires_at, claimed_at, recorded_at)
       VALUES (@operationId, @claimId, @kind, @tool, @authorizationDigest, @authorizationText, @notBefore, @expiresAt, @claimedAt, @recordedAt)`,
    );
    this.#insertReport = this.#db.prepare(
      // Keyed by its claim's seq (schema.ts, version 6), found by the operation it names.
      `INSERT INTO reports (claim_seq, operation_id, claim_id, status, report, finished_at, recorded_at)
       VALUES ((SELECT seq FROM claims WHERE operation_id = @operationId), @operationId, @claimId, @status, @report, @finishedAt, @finishedAt)`,
    );
  }

  get db(): Database.Database {
    return this.#db;
  }

  /**
   * The identity in force: the provisioned id and capacity with the current
   * key epoch (key_epochs) and the current kernel key (kernel_epochs).
   */
  get config(): LedgerConfig {
    if (!this.#current) {
      const key = this.epochs.current('key_epochs');
      const kernel = this.epochs.current('kernel_epochs');
      this.#current = { ...this.provisioned, keyEpoch: key.epoch, publicKey: key.public_key, kernelPublicKey: kernel.public_key };
    }
    return this.#current;
  }

  /**
   * Record a new key epoch of this executor, or a new kernel key epoch, with
   * the statement that introduced it, in one transaction. The caller has
   * verified the statement; the table's trigger refuses any epoch but the next.
   */
  recordEpoch(table: 'key_epochs' | 'kernel_epochs', epoch: number, publicKey: string, statement: string): void {
    this.#assertWritable();
    this.#db
      .transaction(() => {
        const now = this.#advanceClock();
        this.epochs.insert(table, { epoch, public_key: publicKey, statement, created_at: now });
      })
      .immediate();
    this.#current = null;
    this.#batches.record(1);
  }

  /** Why the epochs an authorization was made under are retired, or null when both are current. */
  retiredReason(signedUnder: ClaimSubject['signedUnder']): string | null {
    if (!signedUnder) return null;
    const { keyEpoch, kernelPublicKey } = this.config;
    if (signedUnder.executorEpoch < keyEpoch) return `it is addressed to executor key epoch ${signedUnder.executorEpoch}, which a rotation retired (current: ${keyEpoch})`;
    if (signedUnder.kernelKey !== kernelPublicKey) {
      const epoch = this.epochs.epochOf('kernel_epochs', signedUnder.kernelKey);
      return `it is signed by kernel key epoch ${epoch ?? '?'}, which a rotation retired (current: ${this.epochs.current('kernel_epochs').epoch})`;
    }
    return null;
  }

  /** The clock high-water mark: the latest time any answer was based on. */
  highWaterMark(): number {
    const row = this.#readHwm.get();
    if (!row) throw new CustodyError('store_corrupt', 'ledger clock row is missing');
    return row.hwm_ms;
  }

  /** The head (docs/ROLLBACK.md): how many claims, refusals and reports this ledger has ever recorded. Read after a commit. */
  head(): number {
    return this.#floor.saw(this.#headNow());
  }

  #headNow(): number {
    const row = this.#readHead.get();
    if (!row) throw new CustodyError('store_corrupt', 'ledger head row is missing');
    return row.seq;
  }

  /**
   * The checks every write makes, made without a write: the path still names
   * the file this process opened, and its head is not below one it read.
   * Before the executor asks a tool about an operation this ledger holds no
   * claim of, so a ledger restored under it is refused (and the process
   * replaced) rather than taken at its word.
   */
  assertCurrent(): void {
    this.#assertWritable();
    this.#checkHeadFloor();
  }

  #checkHeadFloor(): void {
    try {
      this.#floor.check(this.#headNow(), `ledger ${this.#file.path}`, 'executor', 'the newest copy is back or `custody recover-rollback` is run');
    } catch (error) {
      if (!this.#replaced) {
        this.#replaced = toCustodyError(error);
        this.#onReplaced(this.#replaced);
      }
      throw this.#replaced;
    }
  }

  /**
   * Inside the transaction of every claim, report and refusal, before it is
   * written: a head below one this process read means the ledger was
   * restored under it (shared/store/head-floor.ts). It would otherwise find
   * no claim for an operation it ran and sign `never_claimed` for it, or
   * claim and run it again.
   */
  #advanceHead(): void {
    this.#checkHeadFloor();
    this.#raiseHead.run();
  }

  /**
   * Every write first checks that the ledger's path still names the file this
   * process opened (one stat): a ledger renamed away or replaced while running
   * takes no claim, refusal or report, and the process is replaced so that the
   * next one opens what the path names (and presents its head).
   */
  #assertWritable(): void {
    this.#guard.assertHeld();
    if (!this.#replaced) {
      let found: { dev: number; ino: number } | null;
      try {
        const stat = statSync(this.#file.path);
        found = { dev: stat.dev, ino: stat.ino };
      } catch {
        found = null;
      }
      if (found && found.dev === this.#file.dev && found.ino === this.#file.ino) return;
      const where = found ? `device ${found.dev} inode ${found.ino}` : 'nothing';
      this.#replaced = new CustodyError(
        'store_replaced',
        `ledger ${this.#file.path} now names ${where}, not the file this process opened (device ${this.#file.dev} inode ${this.#file.ino}): ` +
          'it was renamed or replaced while running; nothing was written, and this executor restarts on whatever the path names — put the original file back',
      );
      this.#onReplaced(this.#replaced);
    }
    throw this.#replaced;
  }

  /** Write transactions this process committed, by how many claims or reports each carried (the `stats` message). */
  commitBatches(): StatsResult['commit_batches'] {
    return this.#batches.entries();
  }

  liveCount(): number {
    return this.#countLive.get()?.n ?? 0;
  }

  /**
   * now = max(clock, high-water mark), stored as the new mark. Must run inside
   * a write transaction: the stored mark is what makes the answer stick (H6, ARCHITECTURE.md §6.5).
   */
  #advanceClock(atLeast = 0): number {
    const now = Math.max(nowMs(), this.highWaterMark(), atLeast);
    this.#raiseHwm.run(now, now);
    return now;
  }

  /** A time-based answer given outside claim/report/refusal (archival): store the mark first. */
  stampClock(): number {
    this.#assertWritable();
    return this.#db.transaction(() => this.#advanceClock()).immediate();
  }

  /**
   * Step 3 of execute_once. H2: the report, refusal and claim
   * are re-read and the window checked against max(clock, HWM) inside this
   * BEGIN IMMEDIATE transaction; a lookup or a window check made before it and
   * acted on here would let a claim follow a never_claimed refusal or an
   * expired reading. H6: the mark is committed even when the answer
   * is window_not_open or window_closed, so a clock stepped back cannot reopen
   * a closed window.
   */
  claim(subject: ClaimSubject): ClaimOutcome {
    this.#assertWritable();
    const outcome = this.#db.transaction(() => this.#claimWrite(subject)).immediate();
    this.#batches.record(1);
    return outcome;
  }

  /**
   * The claim of step 3 in the next grouped transaction: resolves once that
   * transaction is durable, after the `after_claim` cutpoint (when this write
   * claimed) has had its chance to fire — so a crash there leaves every claim
   * of the batch on disk and no effect started.
   */
  claimDurable(subject: ClaimSubject): Promise<ClaimOutcome> {
    return this.#group.submit(() => {
      this.#assertWritable();
      const value = this.#claimWrite(subject);
      return { value, cutpoints: value.kind === 'claimed' ? ['after_claim'] : [] };
    });
  }

  #claimWrite(subject: ClaimSubject): ClaimOutcome {
    const existing = this.records.find(subject.operationId);
    if (existing) return { kind: 'existing', record: existing };
    // Re-read here, as the window is: a rotation committed since step 1 retires it now.
    const retired = this.retiredReason(subject.signedUnder);
    if (retired) return { kind: 'epoch_retired', why: retired };
    const now = this.#advanceClock();
    if (now < subject.notBefore) return { kind: 'window_not_open', now };
    if (now >= subject.expiresAt) return { kind: 'window_closed', now };
    // Claims leave the refusal reserve free, so a full ledger can still close authorizations as never_claimed.
    const live = this.liveCount();
    if (live >= this.config.claimCapacity - this.config.refusalReserve) return { kind: 'full', live };
    CLAIM_MACHINE.assertMove('unclaimed', 'claimed', subject.operationId);
    this.#insertClaim.run({ ...subject, claimId: newClaimId('claim'), kind: 'claim', claimedAt: now, recordedAt: now });
    this.#advanceHead();
    return { kind: 'claimed', record: this.#mustFind(subject.operationId) };
  }

  /**
   * Step 5 (and a reconciled observation): retain the signed report of a
   * claim. Insert-once: when a report is already there, it stands and is
   * returned; the claim machine refuses a second terminal move.
   */
  retainReport(operationId: string, status: ReportStatus, sign: ReportSigner): RetainOutcome {
    this.#assertWritable();
    const outcome = this.#announced(this.#db.transaction(() => this.#retainWrite(operationId, status, sign)).immediate(), 'retained');
    this.#batches.record(1);
    return outcome;
  }

  /**
   * `retainReport` in the next grouped transaction: resolves once that
   * transaction is durable, after `cutpoints` (when this write retained)
   * have had their chance to fire, so no answer carries a report that is not
   * on disk.
   */
  async retainReportDurable(operationId: string, status: ReportStatus, sign: ReportSigner, cutpoints: readonly string[]): Promise<RetainOutcome> {
    const outcome = await this.#group.submit(() => {
      this.#assertWritable();
      const value = this.#retainWrite(operationId, status, sign);
      return { value, cutpoints: value.kind === 'retained' ? cutpoints : [] };
    });
    return this.#announced(outcome, 'retained');
  }

  #retainWrite(operationId: string, status: ReportStatus, sign: ReportSigner): RetainOutcome {
    const claim = this.records.live(operationId);
    if (!claim) throw new CustodyError('never_claimed', `operation ${operationId} has no claim in the live ledger to report on`);
    if (claim.report) return { kind: 'existing', record: claim };
    CLAIM_MACHINE.assertMove(stateOf(claim), status, operationId);
    // finished_at ≥ claimed_at even when the clock was stepped back meanwhile.
    const finishedAt = this.#advanceClock(claim.claimedAt ?? 0);
    const report = sign(claim, finishedAt);
    this.#insertReport.run({ operationId, claimId: claim.claimId, status, report: report.text, finishedAt });
    this.#advanceHead();
    return { kind: 'retained', record: this.#mustFind(operationId) };
  }

  /**
   * reconcile_operation on an operation with no claim (H4b, ARCHITECTURE.md §6.5): record
   * a refusal under the claims' unique key and its never_claimed report in
   * one transaction, window open or not, so no claim can ever follow and the
   * kernel can release the hold. Refusals may use the reserved capacity.
   */
  refuse(subject: ClaimSubject, sign: ReportSigner): RefuseOutcome {
    this.#assertWritable();
    const outcome = this.#announced(this.#db
      .transaction((): RefuseOutcome => {
        const existing = this.records.find(subject.operationId);
        if (existing) return { kind: 'existing', record: existing };
        const now = this.#advanceClock();
        const live = this.liveCount();
        if (live >= this.config.claimCapacity) return { kind: 'full', live };
        CLAIM_MACHINE.assertMove('unclaimed', 'never_claimed', subject.operationId);
        const claimId = newClaimId('refusal');
        this.#insertClaim.run({ ...subject, claimId, kind: 'refusal', claimedAt: null, recordedAt: now });
        const refusal = this.#mustFind(subject.operationId);
        const report = sign(refusal, now);
        this.#insertReport.run({ operationId: subject.operationId, claimId, status: 'never_claimed', report: report.text, finishedAt: now });
        // A refusal and its report: one event each, as for a claim and its report.
        this.#advanceHead();
        this.#advanceHead();
        return { kind: 'refused', record: this.#mustFind(subject.operationId) };
      })
      .immediate(), 'refused');
    this.#batches.record(1);
    return outcome;
  }

  /**
   * The way back after a restore (docs/ROLLBACK.md): record a claim the
   * supervisor witnessed and this ledger lost. It has no report, so it is
   * outcome_unknown: never run again, settled by reconciliation. Its
   * claimed_at is the window's opening: the real time was lost with the
   * ledger, and the witness proves the claim was made inside the window.
   * It leaves the head where it is: only raiseHeadTo, once the last lost
   * claim is recorded, lifts it to the witness. Were each recovered claim to
   * raise it, the entries the lost copy never held (operations authorized and
   * never run) would lift it past the witness before the lost claims came,
   * and a way back cut short there would pass the next hello with those
   * claims still missing: an `execute` replay would run them again.
   */
  recoverClaim(subject: ClaimSubject): boolean {
    this.#assertWritable();
    return this.#db
      .transaction((): boolean => {
        if (this.records.find(subject.operationId)) return false;
        this.#checkHeadFloor();
        const now = this.#advanceClock();
        CLAIM_MACHINE.assertMove('unclaimed', 'claimed', subject.operationId);
        this.#insertClaim.run({ ...subject, claimId: newClaimId('claim'), kind: 'claim', claimedAt: subject.notBefore, recordedAt: now });
        return true;
      })
      .immediate();
  }

  /** Raise the head to at least `to` (the supervisor's witness), once the lost claims are recorded again. */
  raiseHeadTo(to: number): number {
    this.#assertWritable();
    const head = this.#db
      .transaction((): number => {
        this.#db.prepare('UPDATE head SET seq = ? WHERE id = 1 AND seq < ?').run(to, to);
        return this.#headNow();
      })
      .immediate();
    // Committed: a second restore in place right after the way back is caught too.
    return this.#floor.saw(head);
  }

  #announced<T extends { kind: string }>(outcome: T, advancedKind: 'retained' | 'refused'): T {
    if (outcome.kind === advancedKind) this.onAdvanced(this.head(), advancedKind === 'retained' ? 'report' : 'refusal');
    return outcome;
  }

  #mustFind(operationId: string): OperationRecord {
    const record = this.records.live(operationId);
    if (!record) throw new CustodyError('store_corrupt', `operation ${operationId} vanished inside its own transaction`);
    return record;
  }
}
