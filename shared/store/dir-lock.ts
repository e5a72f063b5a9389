// One process per store directory. proper-lockfile makes the lock (an atomic
// mkdir whose mtime the holder refreshes); it records no owner, so the holder
// writes its pid beside the lock for refusals and for the supervisor. The pid
// file lives beside the lock directory, not inside it: the library removes
// the lock with a plain rmdir, which a file inside would make fail.
import fs from 'node:fs';
import path from 'node:path';
import lockfile from 'proper-lockfile';
import { CustodyError } from '../errors.js';
import { ensurePrivateDir, isPathPresent } from './private-fs.js';

export const DIR_LOCK_NAME = 'store.lock';
export const DIR_LOCK_PID_NAME = 'store.lock.pid';

/*
 * Measured on proper-lockfile 4.1.2 (lib/lockfile.js clamps `stale` to at
 * least 2000 ms and `update` to between 1000 ms and stale/2). A holder killed
 * with -9 leaves a lock that a plain re-acquire gets once its mtime is older
 * than `stale`, i.e. between stale - update and stale after the kill:
 * measured 1.1–1.9 s at the 2000 ms minimum, 4.0–4.9 s with ours, 8.9–9.4 s
 * with the library's default 10000 ms. We take stale 5000 / update 1000: a
 * holder whose event loop stalls (a long synchronous SQLite write under
 * synchronous=FULL) keeps its lock through a stall of about 4 s, and a dead
 * holder blocks others for at most 5 s. The supervisor does not wait at all:
 * once it has reaped a child it calls clearDirLock.
 */
export const DIR_LOCK_STALE_MS = 5000;
export const DIR_LOCK_UPDATE_MS = 1000;

export interface DirLock {
  /** The lock directory proper-lockfile created (`<dir>/store.lock`). */
  readonly lockPath: string;
  /** Throws store_lock_lost once the lock was reported compromised: call it before each write transaction. */
  assertHeld(): void;
  /** Removes the pid file and the lock. After a compromise it removes nothing, since both may belong to another holder. */
  release(): Promise<void>;
}

export interface AcquireDirLockOptions {
  /**
   * Called once, with a store_lock_lost error, when the library finds the lock
   * gone or its mtime not ours: another process may own the store. The owner
   * must stop writing at once and exit. Without this callback the error is
   * thrown from the library's timer, an uncaught exception that ends the
   * process unless an `uncaughtException` handler keeps it alive (such a
   * handler must then exit itself).
   */
  readonly onCompromised?: (error: CustodyError) => void;
  /**
   * When the recorded holder is no longer running (killed with -9, nobody
   * reaped it for us), wait up to this long for its lock to go stale instead
   * of refusing at once. A live holder is always refused at once.
   */
  readonly waitForDeadHolderMs?: number;
  /** Told once when waiting for a dead holder's lock. */
  readonly onWaiting?: (pid: number | undefined) => void;
}

/** Lock a private store directory for this process; refuses at once with store_locked if held. */
export async function acquireDirLock(dir: string, options: AcquireDirLockOptions = {}): Promise<DirLock> {
  ensurePrivateDir(dir, { create: false });
  const lockPath = path.join(dir, DIR_LOCK_NAME);
  const pidPath = path.join(dir, DIR_LOCK_PID_NAME);
  let lost: CustodyError | undefined;
  let released = false;

  const handleCompromised = (cause: Error): void => {
    if (released || lost !== undefined) return;
    lost = new CustodyError(
      'store_lock_lost',
      `lock ${lockPath} was compromised (${cause.message}); another process may own the store, so this one stops writing and must exit`,
      { cause },
    );
    if (options.onCompromised === undefined) throw lost;
    options.onCompromised(lost);
  };

  let releaseLibraryLock: () => Promise<void>;
  const waitUntil = Date.now() + (options.waitForDeadHolderMs ?? 0);
  let told = false;
  for (;;) {
    try {
      releaseLibraryLock = await lockfile.lock(dir, {
        lockfilePath: lockPath,
        stale: DIR_LOCK_STALE_MS,
        update: DIR_LOCK_UPDATE_MS,
        retries: 0,
        onCompromised: handleCompromised,
      });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ELOCKED') throw error;
      const holder = readLockHolder(dir);
      if (holder === undefined || isRunning(holder) || Date.now() >= waitUntil) {
        throw new CustodyError('store_locked', describeHolder(dir), { cause: error });
      }
      if (!told) options.onWaiting?.(holder);
      told = true;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  try {
    writePidFile(dir, pidPath);
  } catch (error) {
    await releaseLibraryLock();
    throw error;
  }

  return {
    lockPath,
    assertHeld(): void {
      if (lost !== undefined) throw lost;
      if (released) throw new CustodyError('store_lock_lost', `lock ${lockPath} was released; nothing may write through it`);
    },
    async release(): Promise<void> {
      if (released) return;
      released = true;
      if (lost !== undefined) return;
      // A holder that stalled past `stale` may have been replaced before the library noticed; removing the lock then would make two holders.
      const holder = readPidFile(pidPath);
      if (holder !== undefined && holder !== process.pid) {
        lost = new CustodyError('store_lock_lost', `lock ${lockPath} was taken over by pid ${holder}; left in place`);
        throw lost;
      }
      removeIfPresent(pidPath, (target) => fs.unlinkSync(target));
      try {
        await releaseLibraryLock();
      } catch (error) {
        // The library found the lock compromised between our check and its unlock.
        if ((error as NodeJS.ErrnoException).code !== 'ERELEASED') throw error;
        throw lost ?? new CustodyError('store_lock_lost', `lock ${lockPath} was lost before it could be released`, { cause: error });
      }
    },
  };
}

/**
 * The pid recorded by the current holder, or undefined when the directory is
 * not locked or the pid is unknown. Right after a new holder takes a stale
 * lock, and before it writes its pid, this still names the previous holder;
 * callers that act on the pid check that it is running.
 */
export function readLockHolder(dir: string): number | undefined {
  if (!isPathPresent(path.join(dir, DIR_LOCK_NAME))) return undefined;
  return readPidFile(path.join(dir, DIR_LOCK_PID_NAME));
}

/**
 * Remove a dead holder's lock and pid file so a replacement can start at
 * once. Only for a caller with proof the holder is gone (the supervisor,
 * after the child's exit event): refuses with store_locked if the pid file
 * names a running process other than `reapedPid`.
 */
export function clearDirLock(dir: string, reapedPid?: number): void {
  const holder = readLockHolder(dir);
  if (holder !== undefined && holder !== reapedPid && isRunning(holder)) {
    throw new CustodyError('store_locked', `${describeHolder(dir)}; not clearing a lock whose holder is alive`);
  }
  // Pid file first: once the lock directory is gone a new holder may write its own pid file at any moment.
  removeIfPresent(path.join(dir, DIR_LOCK_PID_NAME), (target) => fs.unlinkSync(target));
  removeIfPresent(path.join(dir, DIR_LOCK_NAME), (target) => fs.rmdirSync(target));
}

function describeHolder(dir: string): string {
  const pid = readLockHolder(dir);
  if (pid === undefined) {
    return `store directory ${dir} is locked by an unknown process (no readable ${DIR_LOCK_PID_NAME}); another custody process may be starting`;
  }
  const note = isRunning(pid)
    ? 'another custody process is using it'
    : `that process is not running; its lock goes stale within ${DIR_LOCK_STALE_MS / 1000} s`;
  return `store directory ${dir} is locked by pid ${pid}; ${note}`;
}

/** Written by rename so a reader never sees a half-written pid. */
function writePidFile(dir: string, pidPath: string): void {
  const temp = path.join(dir, `${DIR_LOCK_PID_NAME}.${process.pid}.tmp`);
  removeIfPresent(temp, (target) => fs.unlinkSync(target));
  const fd = fs.openSync(temp, 'wx', 0o600);
  try {
    fs.fchmodSync(fd, 0o600);
    fs.writeSync(fd, `${process.pid}\n`);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temp, pidPath);
}

function readPidFile(pidPath: string): number | undefined {
  let text: string;
  try {
    const fd = fs.openSync(pidPath, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      text = fs.readFileSync(fd, 'utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP') return undefined;
    throw error;
  }
  const match = /^([1-9][0-9]{0,9})\n?$/.exec(text);
  return match?.[1] === undefined ? undefined : Number(match[1]);
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}


function removeIfPresent(target: string, remove: (target: string) => void): void {
  try {
    remove(target);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
