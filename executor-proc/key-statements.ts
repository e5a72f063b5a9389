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
import { syncDirectory } from '../shared/store/private-fs.js';
import { EpochBook } from './ledger/epochs.js';

export const STATEMENTS_FILE = 'executor.statements';

/** The statements in the file, oldest first; none when there is no file. */
export function readStatements(dir: string): string[] {
  let text: string;
  try {
    text = fs.readFileSync(path.join(dir, STATEMENTS_FILE), 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  return text.split('\n').filter((line) => line !== '');
}

/**
 * Make the file hold exactly the ledger's statements (written anew, synced,
 * then renamed over the old one), unless it already does. Called once the
 * ledger names the key in executor.key: its statements are then the whole
 * chain to that key.
 */
export function keepStatements(dir: string, ledger: Database.Database): void {
  const statements = new EpochBook(ledger).all('key_epochs').flatMap((row) => (row.statement === null ? [] : [row.statement]));
  const current = readStatements(dir);
  if (current.length === statements.length && current.every((text, i) => text === statements[i])) return;
  const file = path.join(dir, STATEMENTS_FILE);
  const pending = `${file}.next`;
  const fd = fs.openSync(pending, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_NOFOLLOW, 0o600);
  try {
    fs.writeSync(fd, statements.map((text) => `${text}\n`).join(''));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(pending, file);
  syncDirectory(dir);
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
  let chain: ReturnType<typeof verifyChain>;
  try {
    chain = verifyChain({ role: 'executor', id: executorId, epoch: current.epoch, publicKey: current.public_key }, readStatements(dir));
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
