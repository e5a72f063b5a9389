// Key files. A secret key is generated inside the process that owns it and
// never leaves it; only `.pub` files are meant to be copied. A `.key` file is
// refused unless it is a regular file, owned by this uid, private to it, and
// holds exactly 64 lowercase hex characters and a newline.
import {
  closeSync,
  constants,
  existsSync,
  fchmodSync,
  fstatSync,
  fsyncSync,
  openSync,
  readSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import path from 'node:path';
import { CustodyError, isCustodyError, isStorageFull } from '../errors.js';
import { syncDirectory } from '../store/private-fs.js';
import { generateSeed, publicKeyFromHex, Signer } from './ed25519.js';

const KEY_FILE_BYTES = 65; // 64 hex + newline, for both .key and .pub
const KEY_FILE_CONTENT = /^[0-9a-f]{64}\n$/;
const BASENAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const KEY_MODE = 0o600;
const PUBLIC_MODE = 0o644;

/**
 * Generates a key pair in this process and writes `<basename>.key` (0600) and
 * `<basename>.pub` (0644) in `dir`, refusing if either exists. Both files and
 * the directory are fsynced before the signer is returned.
 */
export function createKeyPair(dir: string, basename: string): Signer {
  if (!BASENAME.test(basename)) {
    throw new CustodyError('key_file_invalid', `key basename ${JSON.stringify(basename)} must be a plain file name`);
  }
  const keyPath = path.join(dir, `${basename}.key`);
  const publicPath = path.join(dir, `${basename}.pub`);
  const seed = generateSeed();
  try {
    const signer = Signer.fromSeed(seed);
    const keyFd = openExclusive(keyPath, KEY_MODE);
    let publicFd: number;
    try {
      publicFd = openExclusive(publicPath, PUBLIC_MODE);
    } catch (error) {
      closeSync(keyFd);
      unlinkSync(keyPath);
      throw error;
    }
    try {
      const keyContent = Buffer.from(`${Buffer.from(seed).toString('hex')}\n`);
      writeAndSync(keyFd, keyContent);
      keyContent.fill(0);
      writeAndSync(publicFd, Buffer.from(`${signer.publicKeyHex}\n`));
    } catch (error) {
      unlinkSync(keyPath);
      unlinkSync(publicPath);
      throw new CustodyError(writeFailureCode(error), `cannot write key pair ${keyPath}: ${describeError(error)}${fullHint(error)}`, {
        cause: error,
      });
    } finally {
      closeSync(keyFd);
      closeSync(publicFd);
    }
    syncDirectory(dir);
    return signer;
  } finally {
    seed.fill(0);
  }
}

/** Loads a `.key` file written by createKeyPair, refusing anything looser or malformed. */
export function loadSigner(keyPath: string): Signer {
  const fd = openForReading(keyPath, 'key file');
  let content: Buffer | undefined;
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) refuseKeyFile(keyPath, 'is not a regular file');
    const uid = process.getuid?.();
    if (uid !== undefined && stat.uid !== uid) {
      refuseKeyFile(keyPath, `is owned by uid ${stat.uid}, not by this process (uid ${uid})`);
    }
    if ((stat.mode & 0o077) !== 0) {
      const mode = (stat.mode & 0o777).toString(8).padStart(4, '0');
      refuseKeyFile(keyPath, `has mode ${mode}; a key file must have no group or world permissions (chmod 0600)`);
    }
    content = readBounded(fd, keyPath, stat.size);
    const seed = Buffer.from(content.toString('latin1', 0, 64), 'hex');
    try {
      return Signer.fromSeed(seed);
    } finally {
      seed.fill(0);
    }
  } finally {
    content?.fill(0);
    closeSync(fd);
  }
}

/** The hex of the public key in a `.pub` file, after validating the key. */
export function readPublicKeyFile(filePath: string): string {
  const fd = openForReading(filePath, 'public key file');
  let hex: string;
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) refuseKeyFile(filePath, 'is not a regular file');
    hex = readBounded(fd, filePath, stat.size).toString('latin1', 0, 64);
  } finally {
    closeSync(fd);
  }
  try {
    publicKeyFromHex(hex);
  } catch (error) {
    if (isCustodyError(error, 'key_invalid')) {
      throw new CustodyError('key_invalid', `${filePath}: ${error.message}`, { cause: error });
    }
    throw error;
  }
  return hex;
}

/** A key file that cannot be written for want of space is storage_full (docs/POISON-AND-DISK.md), not a bad key file. */
function writeFailureCode(error: unknown): 'storage_full' | 'key_file_invalid' {
  return isStorageFull(error) ? 'storage_full' : 'key_file_invalid';
}

function fullHint(error: unknown): string {
  return isStorageFull(error) ? '; its filesystem is full: free space there, then run it again' : '';
}

/** Writes a `.pub` file (0644), refusing an existing file or an invalid key. */
export function writePublicKeyFile(filePath: string, hex: string): void {
  publicKeyFromHex(hex);
  const fd = openExclusive(filePath, PUBLIC_MODE);
  try {
    writeAndSync(fd, Buffer.from(`${hex}\n`));
  } catch (error) {
    unlinkSync(filePath);
    throw new CustodyError(writeFailureCode(error), `cannot write ${filePath}: ${describeError(error)}${fullHint(error)}`, { cause: error });
  } finally {
    closeSync(fd);
  }
  syncDirectory(path.dirname(filePath));
}

function refuseKeyFile(filePath: string, fault: string): never {
  throw new CustodyError('key_file_invalid', `${filePath} ${fault}`);
}

function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function openExclusive(filePath: string, mode: number): number {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  let fd: number;
  try {
    fd = openSync(filePath, flags, mode);
  } catch (error) {
    const fault = errnoOf(error) === 'EEXIST' ? 'already exists; refusing to overwrite it' : 'cannot be created';
    throw new CustodyError('key_file_invalid', `${filePath} ${fault}: ${describeError(error)}`, { cause: error });
  }
  // The umask may have taken bits away from `mode`; the file gets exactly `mode`.
  fchmodSync(fd, mode);
  return fd;
}

// O_NOFOLLOW refuses a symlink at open, and every later check runs on the open
// descriptor, so the file cannot be swapped between the checks and the read.
// O_NONBLOCK keeps a FIFO planted at the path from blocking the open.
function openForReading(filePath: string, what: string): number {
  try {
    return openSync(filePath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    throw new CustodyError('key_file_invalid', `${filePath} ${describeOpenFailure(error, what)}`, { cause: error });
  }
}

function describeOpenFailure(error: unknown, what: string): string {
  switch (errnoOf(error)) {
    case 'ELOOP':
      return 'is a symbolic link; a key file must be a regular file';
    case 'ENOENT':
      return `does not exist (expected a ${what})`;
    default:
      return `cannot be opened: ${describeError(error)}`;
  }
}

/** Reads the whole file, which must be exactly 64 lowercase hex and a newline. */
function readBounded(fd: number, filePath: string, size: number): Buffer {
  if (size !== KEY_FILE_BYTES) {
    refuseKeyFile(filePath, `is ${size} bytes; expected 64 lowercase hex characters and a newline`);
  }
  const content = Buffer.alloc(KEY_FILE_BYTES + 1); // one spare byte catches a file that grew
  const length = readSync(fd, content, 0, content.length, 0);
  if (length !== KEY_FILE_BYTES || !KEY_FILE_CONTENT.test(content.toString('latin1', 0, length))) {
    content.fill(0);
    refuseKeyFile(filePath, 'does not hold exactly 64 lowercase hex characters and a newline');
  }
  return content;
}

function writeAndSync(fd: number, content: Buffer): void {
  let written = 0;
  while (written < content.length) written += writeSync(fd, content, written);
  fsyncSync(fd);
}


function errnoOf(error: unknown): string | undefined {
  return typeof error === 'object' && error !== null && 'code' in error && typeof error.code === 'string'
    ? error.code
    : undefined;
}

// ------------------------------------------------------------ key rotation
// A rotation makes the next key pair beside the current one
// (`<basename>.next.key`, `.next.pub`), commits the new epoch in the
// owner's store, and only then promotes the pair over the current files,
// which destroys the retired private key. A crash leaves one of two states,
// told apart by the store alone (settlePendingKey): the store names the
// pending key (committed: finish the promotion) or it does not (never
// committed: the pending pair is discarded).

const PENDING = (basename: string) => `${basename}.next`;

/** Whether a pending key (`<basename>.next.key`) is there: a rotation made it and has not promoted or discarded it yet. */
export function hasPendingKey(dir: string, basename: string): boolean {
  return existsSync(path.join(dir, `${PENDING(basename)}.key`));
}

/** Make the next key pair beside the current one, replacing any pending pair a crashed rotation left. */
export function createPendingKeyPair(dir: string, basename: string): Signer {
  discardPendingKey(dir, basename);
  return createKeyPair(dir, PENDING(basename));
}

/** Remove a pending pair that no store names (a rotation that never committed). */
export function discardPendingKey(dir: string, basename: string): void {
  for (const suffix of ['key', 'pub']) {
    try {
      unlinkSync(path.join(dir, `${PENDING(basename)}.${suffix}`));
    } catch (error) {
      if (errnoOf(error) !== 'ENOENT') throw error;
    }
  }
  syncDirectory(dir);
}

/**
 * The committed rotation's last step: the retired private key is
 * overwritten, then the pending pair is renamed over the current files.
 */
export function promotePendingKey(dir: string, basename: string): void {
  const keyPath = path.join(dir, `${basename}.key`);
  const pendingKey = path.join(dir, `${PENDING(basename)}.key`);
  try {
    const fd = openSync(keyPath, constants.O_WRONLY | constants.O_NOFOLLOW);
    try {
      writeAndSync(fd, Buffer.alloc(KEY_FILE_BYTES, 0x30));
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    if (errnoOf(error) !== 'ENOENT') throw error;
  }
  renameSync(pendingKey, keyPath);
  renameSync(path.join(dir, `${PENDING(basename)}.pub`), path.join(dir, `${basename}.pub`));
  syncDirectory(dir);
}

/**
 * At open, before the current key is loaded: finish or discard what a
 * rotation left. `committedPublicKey` is the current key the store records.
 * Returns whether a committed rotation was finished here.
 */
export function settlePendingKey(dir: string, basename: string, committedPublicKey: string): boolean {
  const pendingKey = path.join(dir, `${PENDING(basename)}.key`);
  let pending: Signer;
  try {
    pending = loadSigner(pendingKey);
  } catch (error) {
    if (isCustodyError(error, 'key_file_invalid') && errnoOf((error as Error).cause) === 'ENOENT') return finishPublicRename(dir, basename, committedPublicKey);
    // A pending key that cannot be read was never committed (it is written and synced before the store names it).
    discardPendingKey(dir, basename);
    return false;
  }
  if (pending.publicKeyHex === committedPublicKey) {
    promotePendingKey(dir, basename);
    return true;
  }
  discardPendingKey(dir, basename);
  return false;
}

/**
 * A promotion cut between its two renames: the private key is already the
 * committed one and only `<basename>.next.pub` is left. Finished by renaming
 * it when it names the committed key (the start then finds the files and the
 * store agreeing); any other leftover was never committed and is removed.
 */
function finishPublicRename(dir: string, basename: string, committedPublicKey: string): boolean {
  const pendingPub = path.join(dir, `${PENDING(basename)}.pub`);
  let named: string;
  try {
    named = readPublicKeyFile(pendingPub);
  } catch (error) {
    if (errnoOf((error as Error).cause) === 'ENOENT') return false;
    discardPendingKey(dir, basename);
    return false;
  }
  if (named !== committedPublicKey || loadSigner(path.join(dir, `${basename}.key`)).publicKeyHex !== committedPublicKey) {
    discardPendingKey(dir, basename);
    return false;
  }
  renameSync(pendingPub, path.join(dir, `${basename}.pub`));
  syncDirectory(dir);
  return true;
}
