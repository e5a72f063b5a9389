// A full disk is a named condition (docs/POISON-AND-DISK.md). SQLite is made
// to answer SQLITE_FULL for real with `PRAGMA max_page_count` (the same code
// path as a full filesystem), and a file write's ENOSPC is given its path.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import type Database from 'better-sqlite3';
import { expect } from 'chai';
import { CustodyError, classOf, isStorageFull, toCustodyError } from '../../../shared/errors.js';
import { fromStore } from '../../../kernel-proc/commit-queue.js';
import { provisionStore } from '../../../shared/store/sqlite-store.js';
import { SupervisorStore } from '../../../supervisor/store/supervisor-store.js';
import { makeTempRoot, removeTempRoot, specIn } from './helpers.js';

/** Cap the database at its current size: the next write that needs a page fails with SQLITE_FULL. */
function capAtCurrentSize(db: Database.Database): void {
  const pages = db.pragma('page_count', { simple: true }) as number;
  db.pragma(`max_page_count = ${pages}`);
}

function thrownBy(action: () => unknown): unknown {
  try {
    action();
  } catch (error) {
    return error;
  }
  return expect.fail('expected the write to fail');
}

describe('storage_full', () => {
  let root: string;

  beforeEach(() => {
    root = makeTempRoot();
  });

  afterEach(() => removeTempRoot(root));

  it('is what a SQLITE_FULL of a store becomes, naming the store, its size and the room it needs', () => {
    const dir = path.join(root, 'kernel');
    const db = provisionStore(specIn(dir));
    try {
      capAtCurrentSize(db);
      const raw = thrownBy(() => db.prepare('INSERT INTO items (body) VALUES (?)').run('x'.repeat(64 * 1024)));
      expect((raw as { code?: string }).code).to.match(/^SQLITE_FULL/);
      for (const failure of [toCustodyError(raw), fromStore(raw)]) {
        expect(failure.code).to.equal('storage_full');
        expect(failure.message).to.include(`test store ${path.join(dir, 'test.db')}`);
        expect(failure.message).to.match(/\(\d+\.\d MiB, WAL \d+\.\d MiB; [\d.]+ MiB free\) needs at least [\d.]+ MiB more/);
        expect(failure.message).to.include('free space');
      }
    } finally {
      db.close();
    }
  });

  it('is what ENOSPC and EDQUOT of a file write become, naming the file', () => {
    for (const code of ['ENOSPC', 'EDQUOT']) {
      const raw = Object.assign(new Error(`${code}: no space left on device, write`), { code, path: '/state/resources/review-notes.jsonl' });
      const failure = toCustodyError(raw);
      expect(failure.code).to.equal('storage_full');
      expect(failure.message).to.include('/state/resources/review-notes.jsonl').and.include('free space');
    }
    expect(isStorageFull(Object.assign(new Error('x'), { code: 'EACCES' }))).to.equal(false);
  });

  it('is of the class "not complete": CLI exit 4; the caller asks again with the same name', () => {
    expect(classOf('storage_full')).to.equal('unknown');
    expect(new CustodyError('storage_full').errorClass).to.equal('unknown');
  });

  it('skips supervisor bookkeeping (children, sessions, incidents) with a report, while a request write still fails', () => {
    const store = SupervisorStore.provision(path.join(root, 'supervisor'));
    try {
      const skipped: string[] = [];
      store.onBookkeepingFailed = (what, error) => skipped.push(`${what}: ${error.code}`);
      capAtCurrentSize(store.db);
      // Large enough to need new pages whatever free space the pages hold.
      const big = 'y'.repeat(256 * 1024);
      store.recordChild({ name: 'kernel', role: 'kernel', state: 'stopping', pid: 1, pid_start_ticks: 1, sid: null, restarts: 0, started_at: null, last_exit: big });
      store.openSession('s'.repeat(8), 'kernel', 1);
      store.closeSession('s'.repeat(8), big);
      store.recordIncident({ child: 'kernel', kind: 'child_exit', code: null, message: big });
      expect(skipped.some((line) => line.startsWith('children row of kernel: storage_full'))).to.equal(true);
      expect(skipped.some((line) => line.startsWith('incident child_exit: storage_full'))).to.equal(true);
      const refused = thrownBy(() =>
        store.logRequest({ request_id: 'r1', operation_id: 'o'.repeat(64), kind: 'invoke', tool: 't/x', subject: 'a', arguments: big, cost_units: 1, binding_hash: 'b'.repeat(64) }),
      );
      expect(toCustodyError(refused).code).to.equal('storage_full');
    } finally {
      store.close();
    }
  });
});

describe('store_corrupt from SQLite', () => {
  it('is what a file SQLite cannot read as a database becomes (SQLITE_NOTADB, SQLITE_CORRUPT), saying how to check and what to put back', async () => {
    const { default: Sqlite } = await import('better-sqlite3');
    const dir = makeTempRoot();
    try {
      const file = path.join(dir, 'junk.db');
      writeFileSync(file, Buffer.alloc(8192, 7));
      const db = new Sqlite(file);
      const raw = thrownBy(() => db.prepare('SELECT 1 FROM sqlite_master').get());
      db.close();
      expect((raw as { code?: string }).code).to.match(/^SQLITE_(NOTADB|CORRUPT)/);
      const failure = toCustodyError(raw);
      expect(failure.code).to.equal('store_corrupt');
      expect(failure.message).to.include("PRAGMA integrity_check").and.include('put back the newest good copy');
      expect(toCustodyError(Object.assign(new Error('database disk image is malformed'), { code: 'SQLITE_CORRUPT_INDEX' })).code).to.equal('store_corrupt');
    } finally {
      removeTempRoot(dir);
    }
  });
});
