import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'chai';
import lockfile from 'proper-lockfile';
import { type CustodyError, isCustodyError } from '../../../shared/errors.js';
import {
  acquireDirLock,
  clearDirLock,
  DIR_LOCK_NAME,
  DIR_LOCK_PID_NAME,
  DIR_LOCK_STALE_MS,
  DIR_LOCK_UPDATE_MS,
  type DirLock,
  readLockHolder,
} from '../../../shared/store/dir-lock.js';
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

describe('store directory lock', function () {
  this.slow(DIR_LOCK_STALE_MS + 2000);
  let dir: string;
  const holders: LockHolderProcess[] = [];
  const locks: DirLock[] = [];

  beforeEach(() => {
    dir = makeTempRoot();
  });

  afterEach(async () => {
    for (const holder of holders.splice(0)) if (holder.child.exitCode === null && holder.child.signalCode === null) await holder.killHard();
    for (const lock of locks.splice(0)) await lock.release().catch(() => undefined);
    removeTempRoot(dir);
  });

  async function hold(mode: 'hold' | 'hold-default' = 'hold'): Promise<LockHolderProcess> {
    const holder = await startHolder(dir, mode);
    holders.push(holder);
    return holder;
  }

  async function acquire(options?: Parameters<typeof acquireDirLock>[1]): Promise<DirLock> {
    const lock = await acquireDirLock(dir, options);
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
    const contender = new LockHolderProcess('try', dir);
    holders.push(contender);
    const event = await contender.nextEvent();
    expect(event.error).to.deep.include({ code: 'store_locked' });
    expect((event.error as { message: string }).message).to.include(`is locked by pid ${process.pid}`);
  });

  it('records the holder pid in a 0600 file beside the lock, which readLockHolder returns', async () => {
    const holder = await hold();
    expect(readLockHolder(dir)).to.equal(holder.pid);
    expect(modeOf(path.join(dir, DIR_LOCK_PID_NAME))).to.equal(0o600);
    expect(fs.readdirSync(path.join(dir, DIR_LOCK_NAME))).to.deep.equal([]);
  });

  it('can be acquired again once the holder releases it, and leaves no files behind', async () => {
    const holder = await hold();
    holder.child.stdin.end();
    expect(await holder.nextEvent()).to.deep.equal({ released: true });
    expect(fs.readdirSync(dir)).to.deep.equal([]);
    expect(readLockHolder(dir)).to.equal(undefined);
    const lock = await acquire();
    expect(lock.lockPath).to.equal(path.join(dir, DIR_LOCK_NAME));
    expect(readLockHolder(dir)).to.equal(process.pid);
  });

  it('says an unknown process holds it when the pid file is missing', async () => {
    await hold();
    fs.unlinkSync(path.join(dir, DIR_LOCK_PID_NAME));
    expect((await expectLocked(dir)).message).to.include('locked by an unknown process');
  });

  it('after the holder is killed with -9, clearDirLock lets a new holder in at once', async () => {
    const holder = await hold();
    await holder.killHard();
    expect((await expectLocked(dir)).message).to.include(`pid ${holder.pid}; that process is not running`);
    const started = Date.now();
    clearDirLock(dir, holder.pid);
    await acquire();
    expect(Date.now() - started).to.be.below(500);
    expect(readLockHolder(dir)).to.equal(process.pid);
  });

  it('after the holder is killed with -9, a plain re-acquire waits for the lock to go stale', async () => {
    const holder = await hold();
    await sleep(DIR_LOCK_UPDATE_MS * 1.5);
    const killed = Date.now();
    await holder.killHard();
    for (;;) {
      try {
        await acquire();
        break;
      } catch (error) {
        if (!isCustodyError(error, 'store_locked')) throw error;
        await sleep(25);
      }
    }
    const waited = Date.now() - killed;
    // The last mtime refresh was at most one update interval before the kill.
    expect(waited).to.be.within(DIR_LOCK_STALE_MS - DIR_LOCK_UPDATE_MS - 250, DIR_LOCK_STALE_MS + 1000);
    process.stderr.write(`      (re-acquire after kill -9 without clearDirLock waited ${waited} ms)\n`);
  });

  it('clearDirLock refuses while the recorded holder is still running', async () => {
    const holder = await hold();
    expect(() => clearDirLock(dir)).to.throw(`locked by pid ${holder.pid}`).with.property('code', 'store_locked');
    expect(() => clearDirLock(dir, holder.pid + 1)).to.throw().with.property('code', 'store_locked');
    expect(readLockHolder(dir)).to.equal(holder.pid);
  });

  it('reports a compromised lock once as store_lock_lost, stops assertHeld, and release leaves the new holder alone', async () => {
    const reported: CustodyError[] = [];
    const lock = await acquire({ onCompromised: (error) => reported.push(error) });
    lock.assertHeld();
    clearDirLock(dir, process.pid);
    const newHolder = await hold();
    await sleep(DIR_LOCK_UPDATE_MS * 2 + 200);
    expect(reported.map((error) => error.code)).to.deep.equal(['store_lock_lost']);
    expect(() => lock.assertHeld()).to.throw().with.property('code', 'store_lock_lost');
    await lock.release();
    expect(readLockHolder(dir)).to.equal(newHolder.pid);
  });

  it('without an onCompromised callback, a compromised lock ends the holder process with store_lock_lost', async () => {
    const holder = await hold('hold-default');
    fs.rmdirSync(path.join(dir, DIR_LOCK_NAME));
    expect(await holder.exited).to.equal(1);
    expect(holder.stderr).to.include('store_lock_lost');
  });

  it('release refuses to remove a lock another process took over before the compromise was noticed', async () => {
    const lock = await acquire();
    fs.writeFileSync(path.join(dir, DIR_LOCK_PID_NAME), `${process.ppid}\n`);
    try {
      await lock.release();
      expect.fail('release should refuse');
    } catch (error) {
      expect(isCustodyError(error, 'store_lock_lost'), String(error)).to.equal(true);
    }
    expect(fs.existsSync(path.join(dir, DIR_LOCK_NAME))).to.equal(true);
    await lockfile.unlock(dir, { lockfilePath: path.join(dir, DIR_LOCK_NAME) });
  });
});
