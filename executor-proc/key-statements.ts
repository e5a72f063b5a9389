// This executor's own rotation statements, kept beside its key as well as in
// the ledger: executor.statements, one statement per line (0600), oldest
// first. The key file lives outside the ledger, so a ledger restored from a
// copy taken before `custody executor rotate` names an older key than
// executor.key, whose private half the rotation destroyed. The statements
// here lead from that older key to the current one, each signed by the key
// before it, and the executor records the missing epochs in the restored
// ledger when it opens it (docs/ROLLBACK.md "After a key rotation"). Nothing
// in the file is trusted: a statement counts only when it verifies from the
// ledger's own current key, which no one holding the file alone can forge.
// Recording epochs does not move the ledger's head, so the restore is still
// refused as store_rolled_back until `custody recover-rollback`.
import fs from 'node:fs';
import path from 'node:path';
import type Database from 'better-sqlite3';
import { verifyChain } from '../shared/artifacts/rotation.js';
import { nowMs } from '../shared/clock.js';
import { CustodyError, toCustodyError } from '../shared/errors.js';
import { errorFields } from '../shared/log.js';
import { replacePrivateFile } from '../shared/store/private-fs.js';
import { EpochBook } from './ledger/epochs.js';

export const STATEMENTS_FILE = 'executor.statements';

/** At most this many bytes are read: ROTATION_STATEMENTS_MAX statements of the largest size many times over. */
export const STATEMENTS_MAX_BYTES = 4 * 1024 * 1024;

/**
 * The statements in the file, oldest first; none when there is no file.
 * Read as the key files are: not through a symlink, a regular file only, and
 * bounded (a FIFO would hang every start, /dev/zero fill the memory).
 */
export function readStatements(dir: string): string[] {
  const file = path.join(dir, STATEMENTS_FILE);
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return [];
    throw new CustodyError('key_file_invalid', `${file} cannot be read (${code ?? String(error)}): it must be a regular file, not a symlink`, { cause: error });
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new CustodyError('key_file_invalid', `${file} is not a regular file`);
    if (stat.size > STATEMENTS_MAX_BYTES) throw new CustodyError('key_file_invalid', `${file} is ${stat.size} bytes, more than the ${STATEMENTS_MAX_BYTES} it may be`);
    const bytes = Buffer.alloc(stat.size);
    const read = fs.readSync(fd, bytes, 0, stat.size, 0);
    return bytes.toString('utf8', 0, read).split('\n').filter((line) => line !== '');
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * keepStatements, as a step that must not fail what it follows (a rotation
 * committed, a start): a file that cannot be written (the disk full) is said
 * in the log and written at the next start or rotation. Only a ledger
 * restored from before a rotation needs it, and then the operator is told.
 */
export function keepStatementsIfPossible(dir: string, ledger: Database.Database, warn: (event: string, fields: Record<string, unknown>) => void): void {
  try {
    const kept = keepStatements(dir, ledger);
    if (kept.kind === 'ahead') {
      warn('key_statements_ahead', {
        file: path.join(dir, STATEMENTS_FILE),
        message: `${STATEMENTS_FILE} holds rotations past this ledger's key: kept, not cut back to the ledger's; if executor.key was put back from a copy older than the newest key, put the newest one back (docs/ROLLBACK.md)`,
      });
    }
    if (kept.kind === 'moved_aside') {
      warn('key_statements_moved_aside', {
        file: kept.file,
        message: `${STATEMENTS_FILE} held rotations this ledger does not (another branch of its key chain): moved to ${kept.file}, never deleted, and the ledger's written in its place (docs/ROLLBACK.md)`,
      });
    }
  } catch (error) {
    warn('key_statements_not_kept', { file: path.join(dir, STATEMENTS_FILE), ...errorFields(error), why: 'written again at the next start or rotation; a ledger restored from before a rotation needs it' });
  }
}

const isPrefix = (shorter: readonly string[], longer: readonly string[]) => shorter.length <= longer.length && shorter.every((text, i) => text === longer[i]);

/**
 * Make the file hold the ledger's statements (written anew, synced, then
 * renamed over the old one), unless it already does. Never destroy one it
 * does not: a file that leads past the ledger (an older ledger and its older
 * key put back together) is the only way forward to the newest key, so it
 * is kept as it is ('ahead'); one that parts from the ledger's chain (a
 * rotation made from such an older ledger) is moved aside first
 * ('moved_aside'). Called once the ledger names the key in executor.key.
 */
export function keepStatements(dir: string, ledger: Database.Database): { kind: 'same' | 'written' | 'ahead' } | { kind: 'moved_aside'; file: string } {
  const statements = new EpochBook(ledger).all('key_epochs').flatMap((row) => (row.statement === null ? [] : [row.statement]));
  const current = readStatements(dir);
  if (current.length === statements.length && isPrefix(current, statements)) return { kind: 'same' };
  if (isPrefix(statements, current)) return { kind: 'ahead' };
  const file = path.join(dir, STATEMENTS_FILE);
  let aside: string | null = null;
  if (!isPrefix(current, statements)) {
    aside = `${file}.aside-${nowMs()}`;
    fs.renameSync(file, aside);
  }
  replacePrivateFile(file, statements.map((text) => `${text}\n`).join(''), { durable: true });
  return aside === null ? { kind: 'written' } : { kind: 'moved_aside', file: aside };
}

/**
 * A ledger whose current key is not executor.key's: record the epochs the
 * statements file leads through, when it leads from the ledger's key to
 * exactly `keyFilePublicKey`. Returns the epochs recorded; throws
 * `ledger_identity` when the file cannot lead there (another executor's
 * ledger, or statements missing).
 */
export function catchUpKeyEpochs(dir: string, ledger: Database.Database, executorId: string, keyFilePublicKey: string, ledgerPath: string): number[] {
  const book = new EpochBook(ledger);
  const current = book.current('key_epochs');
  const mismatch = `ledger ${ledgerPath} names key ${current.public_key.slice(0, 16)}… (epoch ${current.epoch}), executor.key holds ${keyFilePublicKey.slice(0, 16)}…`;
  // The key file is the stale one: a retired key of this very ledger, put back from an older copy.
  const retiredEpoch = book.epochOf('key_epochs', keyFilePublicKey);
  if (retiredEpoch !== undefined) {
    throw new CustodyError(
      'ledger_identity',
      `${mismatch}, the key this ledger retired at epoch ${retiredEpoch}: executor.key was put back from a copy older than the ledger. Put back the newest executor.key (epoch ${current.epoch}); do not put back an older ledger (docs/ROLLBACK.md)`,
    );
  }
  let chain: ReturnType<typeof verifyChain>;
  try {
    // Up to the key in executor.key and no further: a rotation cut before its promotion can leave one statement past it.
    const statements = readStatements(dir);
    chain = { end: { role: 'executor', id: executorId, epoch: current.epoch, publicKey: current.public_key }, applied: [] };
    for (const text of statements) {
      if (chain.end.publicKey === keyFilePublicKey) break;
      const step = verifyChain(chain.end, [text]);
      chain = { end: step.end, applied: [...chain.applied, ...step.applied] };
    }
  } catch (error) {
    throw new CustodyError('ledger_identity', `${mismatch}, and ${STATEMENTS_FILE} does not lead from the one to the other: ${toCustodyError(error).message}`, { cause: error });
  }
  if (chain.end.publicKey !== keyFilePublicKey) {
    throw new CustodyError(
      'ledger_identity',
      `${mismatch}: it belongs to another identity, or was restored from a copy taken before a key rotation whose statement ${STATEMENTS_FILE} lacks ` +
        `(it leads only to epoch ${chain.end.epoch}). Put back the ledger that belongs with this key (docs/ROLLBACK.md)`,
    );
  }
  const recorded: number[] = [];
  ledger
    .transaction(() => {
      for (const statement of chain.applied) {
        book.insert('key_epochs', { epoch: statement.body.new_epoch, public_key: statement.body.new_public_key, statement: statement.text, created_at: nowMs() });
        recorded.push(statement.body.new_epoch);
      }
    })
    .immediate();
  return recorded;
}
