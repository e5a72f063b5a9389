// A store's write-ahead log while another connection holds an old snapshot
// (shared/store/wal-watch.ts): it grows, the watch says which store and what
// holds it, once a minute at most, and once the reader ends the log is copied
// back and its file cut to WAL_KEEP_BYTES (journal_size_limit).
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { WAL_KEEP_BYTES, provisionStore } from '../../../shared/store/sqlite-store.js';
import { WalWatch } from '../../../shared/store/wal-watch.js';
import { collectingLogger } from '../../helpers/children.js';
import { makeTempRoot, removeTempRoot, specIn } from './helpers.js';

const MIB = 1024 * 1024;

describe('shared/store: the write-ahead log held open by a reader', function () {
  this.timeout(60_000);
  let root: string;
  let db: Database.Database;
  let file: string;
  const walBytes = () => fs.statSync(`${file}-wal`).size;
  /** Commit `mib` MiB of rows, a MiB a transaction. */
  const write = (mib: number) => {
    const insert = db.prepare('INSERT INTO items (body) VALUES (?)');
    const body = 'x'.repeat(64 * 1024);
    for (let i = 0; i < mib; i++) db.transaction(() => { for (let j = 0; j < 16; j++) insert.run(body); })();
  };

  beforeEach(() => {
    root = makeTempRoot();
    const dir = path.join(root, 'store');
    db = provisionStore(specIn(dir));
    file = path.join(dir, 'test.db');
  });
  afterEach(() => {
    db.close();
    removeTempRoot(root);
  });

  it('cuts a log that outgrew WAL_KEEP_BYTES back to it once a checkpoint has copied it all', () => {
    expect(db.pragma('journal_size_limit', { simple: true })).to.equal(WAL_KEEP_BYTES);
    // One transaction larger than the limit: the log must hold it whole.
    const insert = db.prepare('INSERT INTO items (body) VALUES (?)');
    const body = 'y'.repeat(64 * 1024);
    db.transaction(() => { for (let i = 0; i < 24 * 16; i++) insert.run(body); })();
    expect(walBytes()).to.be.above(WAL_KEEP_BYTES + 4 * MIB);
    // The commit's checkpoint copied it back; the next two writes start the log over and cut its file.
    write(1);
    write(1);
    expect(walBytes()).to.be.at.most(WAL_KEEP_BYTES);
  });

  it('names the store whose log a reader holds, at most once a minute, then says it drained once the reader ended', () => {
    const { log, lines } = collectingLogger();
    const events = () => lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const warnBytes = WAL_KEEP_BYTES + 4 * MIB;
    const watch = new WalWatch(log, () => [{ label: 'test', file }], warnBytes);
    // An operator's shell: a read transaction left open on its own connection.
    const reader = new Database(file, { readonly: true });
    reader.prepare('BEGIN').run();
    reader.prepare('SELECT count(*) AS n FROM items').get();
    write(24);
    expect(walBytes(), 'the log cannot be copied back past the reader').to.be.above(warnBytes);
    watch.check(1_000);
    const warned = events().filter((e) => e.event === 'store_wal_growing');
    expect(warned).to.have.length(1);
    expect(warned[0]).to.include({ level: 'warn', store: 'test', file });
    expect(warned[0]!.wal_bytes).to.be.above(warnBytes);
    expect(String(warned[0]!.message)).to.contain('another connection holds an old snapshot open').and.to.contain('sqlite3 shell inside BEGIN');
    // Not again within the minute, again after it.
    watch.check(30_000);
    expect(events().filter((e) => e.event === 'store_wal_growing')).to.have.length(1);
    watch.check(61_001);
    expect(events().filter((e) => e.event === 'store_wal_growing')).to.have.length(2);
    // The reader ends: the log is copied back and its file cut down, and the watch says so once.
    reader.prepare('COMMIT').run();
    reader.close();
    write(1);
    write(1);
    expect(walBytes()).to.be.at.most(WAL_KEEP_BYTES);
    watch.check(70_000);
    watch.check(200_000);
    expect(events().filter((e) => e.event === 'store_wal_drained')).to.have.length(1);
    expect(events().filter((e) => e.event === 'store_wal_growing')).to.have.length(2);
  });
});
