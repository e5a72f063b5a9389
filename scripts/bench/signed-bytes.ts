// The bytes of signed artifacts the stores keep, by store: the part of
// "store bytes per operation" that no schema change can take away, since
// each copy is kept as its exact bytes for the readers named below
// (docs/PERFORMANCE.md "Stop 28: the signed bytes each store keeps").
import path from 'node:path';
import Database from 'better-sqlite3';
import { filesUnder } from './procfs.js';

/**
 * Each store's columns that hold a signed artifact as its exact bytes, and
 * what reads that copy (docs/PERFORMANCE.md has the whole list). Only what
 * an operation writes: key rotation statements and key epochs are a handful
 * of rows a store, not a cost per operation.
 */
export const SIGNED_COLUMNS: Readonly<Record<string, ReadonlyArray<readonly [table: string, column: string, readBy: string]>>> = {
  'supervisor.db': [
    ['requests', 'authorization', 'what execute, settle and reconciliation send; custody recover-rollback (docs/ROLLBACK.md)'],
    ['requests', 'report', "the answer's output; settling again; the check of a replay; custody receipt export"],
    ['requests', 'receipt', 'the answer to an invoke and its retries, without a kernel round trip'],
  ],
  'kernel.db': [
    ['operations', 'authorization', 'a repeated start answers the same bytes; a settle is checked by equality with them'],
    ['receipts', 'receipt', 'every decision, verifiable offline with the kernel key; a retry is answered byte for byte'],
    ['reports', 'report', "a completed operation's output, beside the receipt that names the report by digest"],
    ['grants', 'capability', 'the signed grant each reserve is decided under'],
  ],
  'ledger.db': [
    ['claims', 'authorization', 'the ledger alone shows, with the kernel key, that each claim was authorized'],
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
