// The store directory lock is an OS lock (shared/store/dir-lock.ts): a live
// holder keeps it however long it is stopped, a dead one frees it at once.
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'chai';
import { type CustodyError, isCustodyError } from '../../../shared/errors.js';
import { acquireDirLock, DIR_LOCK_NAME, DIR_LOCK_PID_NAME, type DirLock, readLockHolder } from '../../../shared/store/dir-lock.js';
import { makeTempRoot, modeOf, removeTempRoot } from './helpers.js';
import { LockHolderProcess, startHolder } from './lock-holder.js';

async function expectLocked(dir: string): Promise<CustodyError> {
  try {
    const lock = await acquireDirLock(dir);
    await lock.release();
  } catch (error) {
    if (isCustodyError(error, 'store_locked')) return error;
    throw error;
  }
  expect.fail(`expected ${dir} to be refused as locked`);
}

/** Another process's attempt, so the answer is the OS's and not this process's bookkeeping. */
async function tryElsewhere(dir: string): Promise<Record<string, unknown>> {
  const contender = new LockHolderProcess('try', dir);
  const event = await contender.nextEvent();
  await contender.exited;
  return event;
}

describe('store directory lock', function () {
  this.timeout(20_000);
  let dir: string;
  const holders: LockHolderProcess[] = [];
  const locks: DirLock[] = [];

  beforeEach(() => {
    dir = makeTempRoot();
  });

  afterEach(async () => {
    for (const holder of holders.splice(0)) {
      if (holder.child.exitCode === null && holder.child.signalCode === null) {
        holder.child.kill('SIGCONT');
        await holder.killHard();
      }
    }
    for (const lock of locks.splice(0)) await lock.release().catch(() => undefined);
    removeTempRoot(dir);
  });

  async function hold(): Promise<LockHolderProcess> {
    const holder = await startHolder(dir);
    holders.push(holder);
    return holder;
  }

  async function acquire(): Promise<DirLock> {
    const lock = await acquireDirLock(dir);
    locks.push(lock);
    return lock;
  }

  it('refuses a second process with store_locked and names the holder pid', async () => {
    const holder = await hold();
    const refusal = await expectLocked(dir);
    expect(refusal.message).to.include(`is locked by pid ${holder.pid}`).and.include(dir);
  });

  it('refuses another process while this one holds the lock, naming this pid', async () => {
    await acquire();
    const event = await tryElsewhere(dir);
    expect(event.error).to.deep.include({ code: 'store_locked' });
    expect((event.error as { message: string }).message).to.include(`is locked by pid ${process.pid}`);
  });

  it('keeps the lock when this process probes it or is refused a second time (no descriptor of the lock file is closed under it)', async () => {
    await acquire();
    expect(readLockHolder(dir)).to.equal(process.pid);
    await expectLocked(dir);
    expect(readLockHolder(dir)).to.equal(process.pid);
    const event = await tryElsewhere(dir);
    expect(event.error, 'still held after the probe and the refused attempt').to.deep.include({ code: 'store_locked' });
  });

  it('records the holder pid in a 0600 file beside a 0600 lock file, which readLockHolder returns', async () => {
    const holder = await hold();
    expect(readLockHolder(dir)).to.equal(holder.pid);
    expect(modeOf(path.join(dir, DIR_LOCK_PID_NAME))).to.equal(0o600);
    expect(modeOf(path.join(dir, DIR_LOCK_NAME))).to.equal(0o600);
  });

  it('can be acquired again once the holder releases it, and leaves only the lock file behind', async () => {
    const holder = await hold();
    holder.child.stdin.end();
    expect(await holder.nextEvent()).to.deep.equal({ released: true });
    expect(fs.readdirSync(dir)).to.deep.equal([DIR_LOCK_NAME]);
    expect(readLockHolder(dir)).to.equal(undefined);
    const lock = await acquire();
    expect(lock.lockPath).to.equal(path.join(dir, DIR_LOCK_NAME));
    expect(readLockHolder(dir)).to.equal(process.pid);
    await lock.release();
    expect(() => lock.assertHeld()).to.throw().with.property('code', 'store_lock_lost');
  });

  it('is taken at once after the holder is killed with -9, with nothing cleared by anyone', async () => {
    const holder = await hold();
    await holder.killHard();
    const started = process.hrtime.bigint();
    await acquire();
    const tookMs = Number(process.hrtime.bigint() - started) / 1e6;
    expect(readLockHolder(dir)).to.equal(process.pid);
    // Generous for a loaded machine; measured 0.4–2 ms (shared/store/dir-lock.ts).
    expect(tookMs).to.be.below(1000);
    process.stderr.write(`      (acquired ${tookMs.toFixed(1)} ms after the holder's kill -9 was reaped)\n`);
  });

  it('is never taken from a stopped holder: refused while it is stopped, still held after SIGCONT', async () => {
    const holder = await hold();
    holder.child.kill('SIGSTOP');
    // A stop is not a death: no timer of ours or the holder's decides anything, so a short stop shows it.
    await sleep(1500);
    expect((await expectLocked(dir)).message).to.include(`is locked by pid ${holder.pid}`);
    holder.child.kill('SIGCONT');
    holder.child.stdin.end();
    // The fixture checks assertHeld before releasing.
    expect(await holder.nextEvent()).to.deep.equal({ released: true });
  });

  it('names no pid, and says the holder is starting, when the recorded pid is not the live holder', async () => {
    const holder = await hold();
    const gone = new LockHolderProcess('try', dir);
    await gone.exited;
    fs.writeFileSync(path.join(dir, DIR_LOCK_PID_NAME), `${gone.pid}\n`);
    const refusal = await expectLocked(dir);
    expect(refusal.message).to.include('locked by a process that is starting').and.include(`pid ${gone.pid}, is gone`);
    expect(refusal.message).to.not.include(`pid ${holder.pid}`);
  });

  it('replaces an empty mkdir lock directory left by an earlier version', async () => {
    fs.mkdirSync(path.join(dir, DIR_LOCK_NAME));
    await acquire();
    expect(fs.statSync(path.join(dir, DIR_LOCK_NAME)).isFile()).to.equal(true);
    expect((await tryElsewhere(dir)).error).to.deep.include({ code: 'store_locked' });
  });
});
