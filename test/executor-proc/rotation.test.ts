// Key rotation in the executor (docs/PROTOCOL.md §12): the next key is made
// in the process and committed before the answer; a crash between the
// ledger's commit and the key file's promotion is finished at the next start;
// authorizations to the retired epoch are refused with an epoch_retired report
// signed by the new key, one claimed before the rotation still replays; the
// kernel key moves only through statements that verify from the pinned one.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { decodeArtifact } from '../../shared/artifacts/artifact.js';
import { signRotation } from '../../shared/artifacts/rotation.js';
import { Signer } from '../../shared/crypto/ed25519.js';
import { loadSigner } from '../../shared/crypto/key-files.js';
import type { CustodyError } from '../../shared/errors.js';
import { ROTATION_STATEMENTS_MAX } from '../../shared/protocol/rotation-messages.js';
import {
  type Executor,
  type Home,
  KERNEL,
  OTHER_KERNEL,
  authorize,
  executeBody,
  makeHome,
  provisioned,
  removeHome,
  sqlite,
  startExecutor,
  stopExecutor,
} from './helpers.js';

async function refusal(promise: Promise<unknown>): Promise<CustodyError> {
  try {
    await promise;
  } catch (error) {
    return error as CustodyError;
  }
  throw new Error('expected a refusal');
}

describe('executor-proc key rotation', function () {
  this.timeout(30_000);
  let home: Home;
  let executor: Executor;

  before(async () => {
    home = makeHome('rotor');
    await provisioned(home);
  });
  after(() => removeHome(home));

  it('finishes a rotation cut between the ledger commit and the key promotion at the next start', async () => {
    executor = await startExecutor(home, { faults: ['after_key_rotation_commit'] });
    const oldKey = executor.identity.public_key;
    await refusal(executor.channel.request('key.rotate', {}));
    await executor.exited;
    // The ledger names epoch 2; executor.key still holds epoch 1's key, the new pair waits beside it.
    expect(sqlite(home.ledgerFile, 'SELECT max(epoch) AS epoch FROM key_epochs').rows).to.deep.equal([{ epoch: 2 }]);
    expect(fs.readFileSync(path.join(home.dir, 'executor.pub'), 'utf8').trim()).to.equal(oldKey);
    expect(fs.existsSync(path.join(home.dir, 'executor.next.key'))).to.equal(true);
    executor = await startExecutor(home, {});
    const [epoch2] = sqlite(home.ledgerFile, 'SELECT public_key FROM key_epochs WHERE epoch = 2').rows;
    expect(executor.identity).to.deep.include({ key_epoch: 2, public_key: epoch2!.public_key });
    expect(fs.existsSync(path.join(home.dir, 'executor.next.key'))).to.equal(false);
    expect(fs.readFileSync(path.join(home.dir, 'executor.pub'), 'utf8').trim()).to.equal(epoch2!.public_key);
    expect(executor.stderr.some((line) => line.includes('key_rotation_finished'))).to.equal(true);
  });

  it('refuses an unclaimed authorization to the retired epoch with an epoch_retired report signed by the new key; a claimed one replays', async () => {
    const claimed = authorize(executor);
    const before = await executor.channel.request('execute', executeBody(claimed));
    const pending = authorize(executor);
    const retiredIdentity = executor.identity;
    const rotated = await executor.channel.request('key.rotate', {});
    expect(rotated.key_epoch).to.equal(3);
    expect(decodeArtifact('rotation', rotated.statement, { trustedSigners: [retiredIdentity.public_key] }).body).to.include({ old_epoch: 2, new_epoch: 3, new_public_key: rotated.public_key });

    const refused = await executor.channel.request('execute', executeBody(pending));
    const report = decodeArtifact('report', refused.report, { trustedSigners: [rotated.public_key] }).body;
    expect(report).to.deep.include({ status: 'never_claimed', key_epoch: 3, refusal: { code: 'epoch_retired', message: report.refusal!.message } });
    expect(report.refusal!.message).to.match(/epoch 2, which a rotation retired/);
    // Asked again: the same bytes.
    expect((await executor.channel.request('execute', executeBody(pending))).report).to.equal(refused.report);
    // Claimed and reported under epoch 2 before the rotation: replayed as signed then, still verifiable with the epoch-2 key.
    const replay = await executor.channel.request('execute', executeBody(claimed));
    expect(replay.report).to.equal(before.report);
    expect(decodeArtifact('report', replay.report, { trustedSigners: [retiredIdentity.public_key] }).body.key_epoch).to.equal(2);
    // A new authorization to epoch 3 runs.
    const fresh = authorize({ identity: { ...retiredIdentity, key_epoch: 3, public_key: rotated.public_key } });
    expect((await executor.channel.request('execute', executeBody(fresh))).status).to.equal('completed');
  });

  it('re-pins the kernel key only through statements that verify from the pinned one; refuses a forged or skipping chain and keeps its pin', async () => {
    const next = Signer.fromSeed(Buffer.alloc(32, 11));
    const later = Signer.fromSeed(Buffer.alloc(32, 12));
    const forged: Array<[string, string[]]> = [
      ['signed by another key', [signRotation(OTHER_KERNEL, { role: 'kernel', id: 'kernel', epoch: 1 }, next.publicKeyHex, Date.now()).text]],
      ['skipping an epoch', [signRotation(next, { role: 'kernel', id: 'kernel', epoch: 2 }, later.publicKeyHex, Date.now()).text]],
      ['naming an executor', [signRotation(KERNEL, { role: 'executor', id: 'kernel', epoch: 1 }, next.publicKeyHex, Date.now()).text]],
    ];
    for (const [what, statements] of forged) {
      expect((await refusal(executor.channel.request('kernel.rotated', { statements }))).code, what).to.equal('rotation_invalid');
    }
    expect(sqlite(home.ledgerFile, 'SELECT epoch FROM kernel_epochs').rows).to.deep.equal([{ epoch: 1 }]);
    const chain = [
      signRotation(KERNEL, { role: 'kernel', id: 'kernel', epoch: 1 }, next.publicKeyHex, Date.now()).text,
      signRotation(next, { role: 'kernel', id: 'kernel', epoch: 2 }, later.publicKeyHex, Date.now()).text,
    ];
    expect(await executor.channel.request('kernel.rotated', { statements: chain })).to.deep.equal({ kernel_epoch: 3, kernel_public_key: later.publicKeyHex });
    // Delivered again: nothing moves.
    expect(await executor.channel.request('kernel.rotated', { statements: chain })).to.deep.equal({ kernel_epoch: 3, kernel_public_key: later.publicKeyHex });
    // An authorization the retired kernel key signed is refused (epoch_retired); one the current key signed runs.
    const identity = { ...executor.identity, key_epoch: 3, public_key: sqlite(home.ledgerFile, 'SELECT public_key FROM key_epochs WHERE epoch = 3').rows[0]!.public_key as string };
    const old = await executor.channel.request('execute', executeBody(authorize({ identity }, { signer: KERNEL })));
    expect(old.status).to.equal('never_claimed');
    const current = await executor.channel.request('execute', executeBody(authorize({ identity }, { signer: later })));
    expect(current.status).to.equal('completed');
    expect((await stopExecutor(executor)).code).to.equal(0);
  });

  it('serves with a key_epoch setting that differs from its ledger, at the ledger\'s epoch, and says so', async () => {
    executor = await startExecutor(home, { settings: { key_epoch: 1 } });
    expect(executor.identity.key_epoch).to.equal(3);
    expect(executor.stderr.some((line) => line.includes('key_epoch_setting_differs'))).to.equal(true);
    expect((await stopExecutor(executor)).code).to.equal(0);
  });
});

describe('executor-proc ledger restored from before a key rotation', function () {
  this.timeout(60_000);
  let home: Home;

  before(async () => {
    home = makeHome('restored');
    await provisioned(home);
  });
  after(() => removeHome(home));

  it('catches the ledger up from executor.statements, and only through statements that verify from its own key', async () => {
    const backup = path.join(home.root, 'ledger.before-rotation');
    let executor = await startExecutor(home, {});
    expect((await stopExecutor(executor)).code).to.equal(0);
    fs.copyFileSync(home.ledgerFile, backup);
    executor = await startExecutor(home, {});
    const rotated = await executor.channel.request('key.rotate', {});
    expect((await stopExecutor(executor)).code).to.equal(0);
    const statements = path.join(home.dir, 'executor.statements');
    expect(fs.readFileSync(statements, 'utf8')).to.equal(`${rotated.statement}\n`);
    const restore = () => {
      fs.copyFileSync(backup, home.ledgerFile);
      for (const sidecar of ['-wal', '-shm']) fs.rmSync(`${home.ledgerFile}${sidecar}`, { force: true });
    };

    // A statement that does not verify from the ledger's key (signed by a key that is not the retired one) is refused.
    restore();
    const forged = signRotation(Signer.fromSeed(Buffer.alloc(32, 9)), { role: 'executor', id: 'restored', epoch: 1 }, rotated.public_key, Date.now());
    fs.writeFileSync(statements, `${forged.text}\n`);
    const refusedForged = await refusal(startExecutor(home, {}));
    expect(refusedForged.code).to.equal('ledger_identity');
    expect(refusedForged.message).to.contain('executor.statements does not lead');
    // None at all: refused, naming what is missing.
    fs.rmSync(statements);
    const refusedNone = await refusal(startExecutor(home, {}));
    expect(refusedNone.code).to.equal('ledger_identity');
    expect(refusedNone.message).to.contain('restored from a copy taken before a key rotation');
    expect(sqlite(home.ledgerFile, 'SELECT max(epoch) AS epoch FROM key_epochs').rows, 'nothing recorded').to.deep.equal([{ epoch: 1 }]);

    // Not a regular file (a FIFO would hang the start; a symlink is not followed): refused at once.
    execFileSync('mkfifo', [statements]);
    const refusedFifo = await refusal(startExecutor(home, {}));
    expect(refusedFifo.code).to.equal('ledger_identity');
    expect(refusedFifo.message).to.contain('is not a regular file');
    fs.rmSync(statements);

    // The genuine statement, and one past the key (a later rotation cut before its promotion): the ledger learns epoch 2
    // and stops there, at the key executor.key holds, and serves under it.
    const past = signRotation(loadSigner(path.join(home.dir, 'executor.key')), { role: 'executor', id: 'restored', epoch: 2 }, Signer.fromSeed(Buffer.alloc(32, 7)).publicKeyHex, Date.now());
    fs.writeFileSync(statements, `${rotated.statement}\n${past.text}\n`, { mode: 0o600 });
    executor = await startExecutor(home, {});
    expect(executor.identity).to.deep.include({ key_epoch: 2, public_key: rotated.public_key });
    expect(executor.stderr.some((line) => line.includes('ledger_key_epochs_caught_up'))).to.equal(true);
    expect(sqlite(home.ledgerFile, 'SELECT epoch, statement FROM key_epochs WHERE epoch >= 2').rows).to.deep.equal([{ epoch: 2, statement: rotated.statement }]);
    // The statement past the key stays (the file knows more than the ledger), and the start says so.
    expect(fs.readFileSync(statements, 'utf8'), 'the file is not cut back').to.equal(`${rotated.statement}\n${past.text}\n`);
    expect(executor.stderr.some((line) => line.includes('key_statements_ahead'))).to.equal(true);
    expect((await stopExecutor(executor)).code).to.equal(0);
  });

  it('rotates even when executor.statements cannot be written, saying so; the next start writes it', async () => {
    const statements = path.join(home.dir, 'executor.statements');
    fs.mkdirSync(`${statements}.next`); // where the file is written first: a directory there makes the write fail, as a full disk does
    let executor = await startExecutor(home, {});
    expect(executor.stderr.some((line) => line.includes('key_statements_not_kept')), 'a start that cannot write it still serves').to.equal(false);
    const rotated = await executor.channel.request('key.rotate', {});
    expect(rotated.key_epoch).to.equal(3);
    expect(executor.stderr.some((line) => line.includes('key_statements_not_kept'))).to.equal(true);
    expect(fs.readFileSync(path.join(home.dir, 'executor.pub'), 'utf8').trim(), 'the key was promoted all the same').to.equal(rotated.public_key);
    // Reports from here on are signed by the new key, not the retired one.
    const auth = authorize(executor, { executor: { ...executor.identity, key_epoch: 3, public_key: rotated.public_key } });
    const answer = await executor.channel.request('execute', executeBody(auth));
    const report = decodeArtifact('report', answer.report, { trustedSigners: [rotated.public_key] });
    expect(report.body.key_epoch).to.equal(3);
    expect((await stopExecutor(executor)).code).to.equal(0);
    fs.rmdirSync(`${statements}.next`);
    executor = await startExecutor(home, {});
    expect(fs.readFileSync(statements, 'utf8').trim().split('\n'), 'written at the next start').to.have.length(2);
    expect((await stopExecutor(executor)).code).to.equal(0);
  });
});

/** A distinct seed per index (two bytes of it, the rest fixed). */
function seedFor(index: number): Buffer {
  const seed = Buffer.alloc(32, 0xaa);
  seed.writeUInt16BE(index, 0);
  return seed;
}

describe('executor-proc kernel statements at the message bound', function () {
  this.timeout(60_000);
  let home: Home;

  before(async () => {
    home = makeHome('chain');
    await provisioned(home);
  });
  after(() => removeHome(home));

  it('takes ROTATION_STATEMENTS_MAX statements in one message and the rest of a longer chain in the next; one more in a message is refused before it is sent', async () => {
    const executor = await startExecutor(home, {});
    const signers = [KERNEL, ...Array.from({ length: ROTATION_STATEMENTS_MAX + 1 }, (_, i) => Signer.fromSeed(seedFor(i + 1)))];
    const chain = signers.slice(1).map((next, i) => signRotation(signers[i]!, { role: 'kernel', id: 'kernel', epoch: i + 1 }, next.publicKeyHex, Date.now()).text);
    expect(chain).to.have.length(ROTATION_STATEMENTS_MAX + 1);
    const tooMany = await refusal(executor.channel.request('kernel.rotated', { statements: chain }));
    expect(tooMany.code).to.equal('schema_violation');
    expect(sqlite(home.ledgerFile, 'SELECT max(epoch) AS epoch FROM kernel_epochs').rows).to.deep.equal([{ epoch: 1 }]);
    expect((await executor.channel.request('kernel.rotated', { statements: chain.slice(0, ROTATION_STATEMENTS_MAX) })).kernel_epoch).to.equal(ROTATION_STATEMENTS_MAX + 1);
    expect((await executor.channel.request('kernel.rotated', { statements: chain.slice(ROTATION_STATEMENTS_MAX) })).kernel_epoch).to.equal(ROTATION_STATEMENTS_MAX + 2);
    expect(sqlite(home.ledgerFile, 'SELECT count(*) AS n FROM kernel_epochs').rows).to.deep.equal([{ n: ROTATION_STATEMENTS_MAX + 2 }]);
    expect((await stopExecutor(executor)).code).to.equal(0);
  });
});

describe('executor-proc key and ledger put back from before a rotation', function () {
  this.timeout(60_000);
  let home: Home;

  before(async () => {
    home = makeHome('putback');
    await provisioned(home);
  });
  after(() => removeHome(home));

  it('keeps executor.statements when an older ledger and key are put back together, so the newest key leads the ledger forward again; a retired key alone is named as the stale file', async () => {
    const keyFile = path.join(home.dir, 'executor.key');
    const statements = path.join(home.dir, 'executor.statements');
    const saved = (from: string, name: string) => {
      const to = path.join(home.root, name);
      fs.copyFileSync(from, to);
      return to;
    };
    const putBack = (from: string, to: string) => {
      fs.writeFileSync(to, fs.readFileSync(from));
      if (to === home.ledgerFile) for (const sidecar of ['-wal', '-shm']) fs.rmSync(`${to}${sidecar}`, { force: true });
    };
    let executor = await startExecutor(home, {});
    expect((await stopExecutor(executor)).code).to.equal(0);
    const oldLedger = saved(home.ledgerFile, 'ledger.epoch1');
    const oldKey = saved(keyFile, 'key.epoch1');
    executor = await startExecutor(home, {});
    const rotated = await executor.channel.request('key.rotate', {});
    expect((await stopExecutor(executor)).code).to.equal(0);
    const newKey = saved(keyFile, 'key.epoch2');

    // The retired key alone put back: it is named as the stale file, and the way back is the newest key, not an older ledger.
    putBack(oldKey, keyFile);
    const stale = await refusal(startExecutor(home, {}));
    expect(stale.code).to.equal('ledger_identity');
    expect(stale.message).to.contain('the key this ledger retired at epoch 1').and.to.contain('Put back the newest executor.key (epoch 2)');

    // The older ledger with it as well: it opens at epoch 1, and the statements that lead past it stay.
    putBack(oldLedger, home.ledgerFile);
    executor = await startExecutor(home, {});
    expect(executor.identity.key_epoch).to.equal(1);
    expect(executor.stderr.some((line) => line.includes('key_statements_ahead'))).to.equal(true);
    expect((await stopExecutor(executor)).code).to.equal(0);
    expect(fs.readFileSync(statements, 'utf8'), 'the rotation statement is kept').to.equal(`${rotated.statement}\n`);

    // The newest key back: the ledger catches up from the statements and serves under it.
    putBack(newKey, keyFile);
    executor = await startExecutor(home, {});
    expect(executor.identity).to.deep.include({ key_epoch: 2, public_key: rotated.public_key });
    expect((await stopExecutor(executor)).code).to.equal(0);
  });
});
