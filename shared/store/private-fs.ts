// Privacy checks for store directories and files. A store holds a process's
// authority (claims, budgets, pins), so anything another user could read,
// replace or point elsewhere is refused outright; nothing here repairs modes,
// because a loose store may already have been tampered with and only the
// operator can judge that.
import fs from 'node:fs';
import path from 'node:path';
import { CustodyError } from '../errors.js';

/** Which file a path named when it was checked: compared later to catch swaps and copies. */
export interface FileIdentity {
  readonly dev: number;
  readonly ino: number;
}

export interface EnsurePrivateDirOptions {
  /** Create the directory (0700; missing parents with default modes) when it does not exist. */
  readonly create: boolean;
}

/**
 * A store directory must be a real directory (not a symlink), owned by this
 * uid, mode exactly 0700. With `create`, a missing directory is made 0700
 * regardless of umask; an existing one is checked, never chmod'ed.
 */
export function ensurePrivateDir(dir: string, options: EnsurePrivateDirOptions): void {
  let stat = lstatOrUndefined(dir);
  if (stat === undefined) {
    if (!options.create) {
      throw new CustodyError('store_missing', `store directory ${dir} does not exist; provision the store first (custody init)`);
    }
    createPrivateDir(dir);
    stat = fs.lstatSync(dir);
  }
  if (stat.isSymbolicLink()) {
    throw new CustodyError('store_permissions', `store directory ${dir} is a symbolic link; use the real directory path`);
  }
  if (!stat.isDirectory()) {
    throw new CustodyError('store_permissions', `store directory ${dir} is ${describeKind(stat)}, not a directory`);
  }
  checkOwner(dir, 'store directory', stat);
  const perms = stat.mode & 0o777;
  if (perms !== 0o700) {
    throw new CustodyError(
      'store_permissions',
      `store directory ${dir} has mode ${formatMode(perms)}, must be 0700; check who could have used it, then run: chmod 700 ${dir}`,
    );
  }
}

/**
 * A store file (database, -wal, -shm, lock pid) must be a regular file, not a
 * symlink, owned by this uid, with no group or world bits.
 */
export function checkPrivateFile(file: string): FileIdentity {
  const identity = checkPrivateFileIfPresent(file);
  if (identity === undefined) {
    throw new CustodyError('store_missing', `store file ${file} does not exist`);
  }
  return identity;
}

/** As checkPrivateFile, for files SQLite creates and removes on its own (-wal, -shm). */
export function checkPrivateFileIfPresent(file: string): FileIdentity | undefined {
  const stat = lstatOrUndefined(file);
  if (stat === undefined) return undefined;
  if (stat.isSymbolicLink()) {
    throw new CustodyError('store_permissions', `store file ${file} is a symbolic link; a store file must be the file itself`);
  }
  if (!stat.isFile()) {
    throw new CustodyError('store_permissions', `store file ${file} is ${describeKind(stat)}, not a regular file`);
  }
  checkOwner(file, 'store file', stat);
  if ((stat.mode & 0o077) !== 0) {
    throw new CustodyError(
      'store_permissions',
      `store file ${file} has mode ${formatMode(stat.mode & 0o777)}, must allow no group or world access; check who could have read it, then run: chmod 600 ${file}`,
    );
  }
  return { dev: stat.dev, ino: stat.ino };
}

/** Whether anything is at the path, a dangling symlink included. */
export function isPathPresent(target: string): boolean {
  return lstatOrUndefined(target) !== undefined;
}

function createPrivateDir(dir: string): void {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    // Someone created it between our lstat and mkdir: fall through to the checks, which judge it.
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw error;
  }
  // mkdir's mode is filtered by the umask; a umask like 0277 would leave us a directory we cannot write.
  fs.chmodSync(dir, 0o700);
}

function checkOwner(target: string, what: string, stat: fs.Stats): void {
  const uid = currentUid();
  if (stat.uid !== uid) {
    throw new CustodyError(
      'store_permissions',
      `${what} ${target} is owned by uid ${stat.uid}, not by this process (uid ${uid}); run custody as uid ${stat.uid} or, if the store is yours, chown ${uid} ${target}`,
    );
  }
}

function currentUid(): number {
  // custody runs on POSIX only; getuid is absent on Windows.
  const uid = process.getuid?.();
  if (uid === undefined) throw new CustodyError('internal', 'store privacy checks need a POSIX uid (process.getuid)');
  return uid;
}

function lstatOrUndefined(target: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(target);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

function describeKind(stat: fs.Stats): string {
  if (stat.isDirectory()) return 'a directory';
  if (stat.isFile()) return 'a regular file';
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isSocket()) return 'a socket';
  return 'a device';
}

function formatMode(mode: number): string {
  return `0${(mode & 0o7777).toString(8).padStart(3, '0')}`;
}

export interface ReplaceFileOptions {
  /** Also sync the directory, so the rename itself survives a power loss (not only the bytes). */
  readonly durable: boolean;
}

/** Where replacePrivateFile writes `file`'s next bytes before the rename: what a write killed before it leaves. */
export function replacementOf(file: string): string {
  return `${file}.next`;
}

/**
 * Replace `file` with `content`, private (0600), so that a reader sees the
 * old bytes or the new ones, never a part: written to `<file>.next` beside
 * it (O_EXCL, O_NOFOLLOW, whatever a killed earlier write left there removed
 * first), synced, then renamed over it. The one way every small file custody
 * rewrites (service.json, a lock's pid file, executor.statements) is
 * written; each has one writer, the holder of its directory's lock, so one
 * temporary name serves.
 */
export function replacePrivateFile(file: string, content: string, options: ReplaceFileOptions): void {
  const temporary = replacementOf(file);
  fs.rmSync(temporary, { force: true });
  const fd = fs.openSync(temporary, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
  try {
    // The umask may have taken bits away; the file gets exactly 0600.
    fs.fchmodSync(fd, 0o600);
    const bytes = Buffer.from(content, 'utf8');
    let written = 0;
    while (written < bytes.length) written += fs.writeSync(fd, bytes, written);
    fs.fsyncSync(fd);
  } catch (error) {
    fs.closeSync(fd);
    fs.rmSync(temporary, { force: true });
    throw error;
  }
  fs.closeSync(fd);
  try {
    fs.renameSync(temporary, file);
  } catch (error) {
    fs.rmSync(temporary, { force: true });
    throw error;
  }
  if (options.durable) syncDirectory(path.dirname(file));
}

/** Make new directory entries durable (a created file, a rename), not only the files' contents. */
export function syncDirectory(dir: string): void {
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
