// Shared pieces of the store tests: private temp directories and a small
// two-step schema.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Migration, StoreSpec } from '../../../shared/store/sqlite-store.js';

export const CREATE_ITEMS: Migration = {
  version: 1,
  description: 'items',
  sql: 'CREATE TABLE items (id INTEGER PRIMARY KEY, body TEXT NOT NULL)',
};

export const CREATE_NOTES: Migration = {
  version: 2,
  description: 'notes on items',
  sql: 'CREATE TABLE notes (id INTEGER PRIMARY KEY, item_id INTEGER NOT NULL REFERENCES items(id), text TEXT NOT NULL)',
};

/** A fresh 0700 directory under the OS temp dir; remove it with removeTempRoot. */
export function makeTempRoot(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'custody-store-test-'));
}

export function removeTempRoot(root: string): void {
  fs.rmSync(root, { recursive: true, force: true });
}

export function specIn(dir: string, migrations: readonly Migration[] = [CREATE_ITEMS, CREATE_NOTES]): StoreSpec {
  return { label: 'test', dir, file: 'test.db', migrations };
}

export function modeOf(target: string): number {
  return fs.lstatSync(target).mode & 0o777;
}
