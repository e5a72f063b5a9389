// The bytes of signed artifacts the stores keep, by store: the part of
// "store bytes per operation" that no schema change can take away, because
// each copy is what one of the service's guarantees is made of
// (docs/PERFORMANCE.md "Stop 28: the bytes the guarantees keep").
import path from 'node:path';
import Database from 'better-sqlite3';
import { filesUnder } from './procfs.js';

/**
 * Each store's columns that hold a signed artifact as its exact bytes, and
 * what that copy is kept for. Only what an operation writes: key rotation
 * statements and key epochs are a handful of rows a store, not a cost per
 * operation.
 */
export const SIGNED_COLUMNS: Readonly<Record<string, ReadonlyArray<readonly [table: string, column: string, keptFor: string]>>> = {
  'supervisor.db': [
    ['requests', 'authorization', 'custody recover-rollback gives a restored ledger the authorizations it lost (docs/ROLLBACK.md)'],
    ['requests', 'report', 'settling again after a kernel restart, and `custody report` once a ledger lost or archived it'],
    ['requests', 'receipt', 'the answer to GET /v1/requests/:id and `custody trace` without asking the kernel'],
  ],
  'kernel.db': [
    ['operations', 'authorization', 'a repeated start answers the same authorization; a settle is checked by equality with it'],
    ['receipts', 'receipt', 'every decision, verifiable offline with the kernel key; a retry is answered byte for byte'],
    ['reports', 'report', 'the report a completion receipt names by digest, kept where the receipt is'],
    ['grants', 'capability', 'the signed grant each reserve is decided under'],
  ],
  'ledger.db': [
    ['claims', 'authorization', 'the ledger alone proves each claim was authorized (offline, with the kernel key)'],
    ['reports', 'report', 'the byte-identical replay of an operation already run'],
  ],
  'archive.db': [
    ['archived_claims', 'authorization', 'an archived claim, as the ledger kept it'],
    ['archived_claims', 'report', 'an archived report, as the ledger kept it'],
  ],
};

/** UTF-8 bytes of the signed artifacts each store under `root` keeps, by file relative to the root (as storeBytes names them). */
export function signedBytes(root: string): Record<string, number> {
  const files = filesUnder(root, (name) => name in SIGNED_COLUMNS);
  return Object.fromEntries(files.map((file) => [file, signedBytesOf(path.join(root, file), SIGNED_COLUMNS[path.basename(file)]!)]));
}

function signedBytesOf(file: string, columns: ReadonlyArray<readonly [string, string, string]>): number {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    // length() of TEXT counts characters; of a BLOB, bytes: an artifact's size is its UTF-8 bytes.
    return columns.reduce(
      (total, [table, column]) => total + (db.prepare(`SELECT coalesce(sum(length(CAST(${column} AS BLOB))), 0) AS n FROM ${table}`).get() as { n: number }).n,
      0,
    );
  } finally {
    db.close();
  }
}
