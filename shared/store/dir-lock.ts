// One process per store directory, held by the operating system.
//
// The lock is a POSIX fcntl lock, taken through SQLite: BEGIN EXCLUSIVE on a
// small lock database (`store.lock`) that this process keeps open, inside an
// open transaction, for as long as it owns the directory (the journal guard
// in executor-proc/adapters/journal-lock.ts is the same lock, held per
// section). The kernel of the host that runs the holder owns the lock, so:
//   - a live holder is never displaced, however long it is stopped
//     (SIGSTOP, a debugger, a VM pause, a long GC): nothing goes stale;
//   - a dead holder's lock is gone the instant the process is (kill -9
//     included): the next acquire succeeds at once, nobody has to clear it;
//   - a remote executor's lock is judged on its own host, by the kernel that
//     runs the executor process which took it.
//
// Measured both candidates (a holder killed with -9, then acquire in a loop;
// a holder stopped with SIGSTOP for 8 s, then one acquire; 5 trials each):
//   fcntl through SQLite        takeover 0.4–2.0 ms   stopped holder kept
//   proper-lockfile with its    takeover 0.9–3.0 ms   stopped holder kept
//   staleness replaced by a check of the recorded pid and /proc start time
// Both are fast and both keep a stopped holder. We keep the fcntl lock: it
// needs no refresh timer, no /proc (pid reuse, pid namespaces), and no
// "remove the dead holder's lock, then take it" step, which two contenders
// can interleave so that the second removes the first's fresh lock and both
// hold it. proper-lockfile is no longer used.
//
// fcntl semantics to respect: closing ANY descriptor of the lock file in
// this process drops the process's lock on it. Only the one SQLite connection
// opened here may open `store.lock` (SQLite itself defers closing its own
// extra descriptors while a lock is held, so a probe through SQLite is safe;
// fs.open/close of that file is not). The holder's pid, for refusals, lives
// in a separate file beside it.
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { CustodyError, isStorageFull } from '../errors.js';
import { ensurePrivateDir, replacePrivateFile } from './private-fs.js';

export const DIR_LOCK_NAME = 'store.lock';
export const DIR_LOCK_PID_NAME = 'store.lock.pid';

export interface DirLock {
  /** The lock file (`<dir>/store.lock`). */
  readonly lockPath: string;
  /** Throws store_lock_lost once released (or if the lock transaction ended): call it before each write transaction. */
  assertHeld(): void;
  /** Removes the pid file and drops the lock. */
  release(): Promise<void>;
}

/** Connections holding a lock, kept reachable so nothing can collect (and close) one early. */
const HELD = new Set<Database.Database>();

/** Lock a private store directory for this process; refuses at once with store_locked, naming the holder's pid, if held. */
// eslint-disable-next-line @typescript-eslint/require-await -- async for callers that await it; the lock itself is taken synchronously
export async function acquireDirLock(dir: string): Promise<DirLock> {
  ensurePrivateDir(dir, { create: false });
  const lockPath = path.join(dir, DIR_LOCK_NAME);
  const pidPath = path.join(dir, DIR_LOCK_PID_NAME);
  const db = tryLock(lockPath);
  if (db === null) throw new CustodyError('store_locked', describeHolder(dir));
  HELD.add(db);
  try {
    // By rename, so a reader never sees a half-written pid.
    replacePrivateFile(pidPath, `${process.pid}\n`, { durable: false });
  } catch (error) {
    HELD.delete(db);
    db.close();
    throw error;
  }
  return heldLock(db, lockPath, pidPath);
}

/** The lock as its owner sees it: held while `db` stays inside its transaction and is not released. */
function heldLock(db: Database.Database, lockPath: string, pidPath: string): DirLock {
  let released = false;
  return {
    lockPath,
    assertHeld(): void {
      if (released) throw new CustodyError('store_lock_lost', `lock ${lockPath} was released; nothing may write through it`);
      if (!db.inTransaction) throw new CustodyError('store_lock_lost', `lock ${lockPath} is no longer held (its transaction ended); this process must stop writing and exit`);
    },
    // eslint-disable-next-line @typescript-eslint/require-await -- kept async: a release is awaited by every owner
    async release(): Promise<void> {
      if (released) return;
      released = true;
      // The pid file goes while the lock is still ours: a later holder's file is never removed.
      removeIfPresent(pidPath);
      HELD.delete(db);
      db.close();
    },
  };
}

/**
 * The pid recorded by the current holder, or undefined when the directory is
 * not locked (or the holder has not written its pid yet). Probes the lock
 * through SQLite, so it is safe in the holding process too.
 */
export function readLockHolder(dir: string): number | undefined {
  const lockPath = path.join(dir, DIR_LOCK_NAME);
  if (!fs.existsSync(lockPath)) return undefined;
  const probe = tryLock(lockPath);
  if (probe !== null) {
    probe.close();
    return undefined;
  }
  return readPidFile(path.join(dir, DIR_LOCK_PID_NAME));
}

/** A connection inside BEGIN EXCLUSIVE on the lock file, or null when another connection holds it. */
function tryLock(lockPath: string): Database.Database | null {
  createLockFile(lockPath);
  const db = new Database(lockPath, { timeout: 0 });
  try {
    db.exec('BEGIN EXCLUSIVE');
    return db;
  } catch (error) {
    db.close();
    if ((error as { code?: string }).code === 'SQLITE_BUSY') return null;
    // Taking the lock writes its journal: on a full disk, say which file, and not "a store of this process".
    if (isStorageFull(error)) {
      throw new CustodyError('storage_full', `the disk is full: the lock ${lockPath} cannot be taken (${(error as Error).message}); free space on its filesystem, then start again`, { cause: error });
    }
    throw error;
  }
}

/**
 * Create the lock file private (SQLite would use the umask). Only a file that
 * did not exist is opened here, so no lock anyone in this process holds on
 * it can be dropped by the close. A directory of that name is the mkdir lock
 * of an earlier version; it guards nothing any more.
 */
function createLockFile(lockPath: string): void {
  let fd: number;
  try {
    fd = fs.openSync(lockPath, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    if (fs.lstatSync(lockPath).isDirectory()) {
      fs.rmdirSync(lockPath);
      createLockFile(lockPath);
    }
    return;
  }
  fs.closeSync(fd);
}

function describeHolder(dir: string): string {
  const pid = readPidFile(path.join(dir, DIR_LOCK_PID_NAME));
  if (pid === undefined || !isRunning(pid)) {
    // The pid file is written right after the lock is taken: a holder that just started has not written it yet.
    const last = pid === undefined ? '' : ` (the last recorded holder, pid ${pid}, is gone)`;
    return `store directory ${dir} is locked by a process that is starting${last}; another custody process is using it, retry in a moment or stop that process`;
  }
  return `store directory ${dir} is locked by pid ${pid}; another custody process is using it (a stopped process keeps its lock): stop that process first`;
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

function removeIfPresent(target: string): void {
  try {
    fs.unlinkSync(target);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
