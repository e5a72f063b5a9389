import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { CustodyError } from '../../shared/errors.js';
import { createLogger } from '../../shared/log.js';
import { CommitQueue, type UnitContext, fromStore } from '../../kernel-proc/commit-queue.js';

describe('kernel-proc: the group-commit write path', () => {
  let dir: string;
  let db: Database.Database;
  let reader: Database.Database;
  let batches: number;
  let writable: boolean;
  const quiet = createLogger({}, { write: () => undefined });

  const queue = (maxBatch: number) =>
    new CommitQueue({
      db,
      maxBatch,
      clock: () => 1234,
      assertWritable: () => {
        if (!writable) throw new CustodyError('store_lock_lost', 'lock lost');
      },
      beforeEachBatch: () => void (batches += 1),
      log: quiet,
    });
  /** A queue that raises a store head: `advanceHead` inside each batch that wrote, `headAdvanced` after its commit. */
  const headQueue = (advanceHead: () => void, headAdvanced: () => void) =>
    new CommitQueue({ db, maxBatch: 32, clock: () => 1234, assertWritable: () => undefined, advanceHead, headAdvanced, log: quiet });
  const insert = (value: string) => db.prepare('INSERT INTO items (value) VALUES (?)').run(value);
  const committed = () => reader.prepare('SELECT value FROM items ORDER BY value').pluck().all();

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-queue-test-'));
    db = new Database(path.join(dir, 'q.db'));
    db.pragma('journal_mode = WAL');
    db.exec(`CREATE TABLE items (value TEXT PRIMARY KEY);
             CREATE TRIGGER no_x BEFORE INSERT ON items WHEN NEW.value = 'x' BEGIN SELECT RAISE(ABORT, 'illegal_transition: items: no x'); END;`);
    reader = new Database(path.join(dir, 'q.db'), { readonly: true });
    batches = 0;
    writable = true;
  });
  afterEach(() => {
    reader.close();
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('runs the units queued in one turn in one transaction and answers each only after it committed', async () => {
    const q = queue(32);
    const seen: unknown[][] = [];
    const answers = ['a', 'b', 'c'].map((value) =>
      q.submit(() => {
        insert(value);
        return value;
      }).then((answer) => {
        seen.push(committed());
        return answer;
      }),
    );
    expect(await Promise.all(answers)).to.deep.equal(['a', 'b', 'c']);
    expect(batches).to.equal(1);
    for (const view of seen) expect(view).to.deep.equal(['a', 'b', 'c']);
  });

  it('rolls back only the unit that failed; the others in its batch commit', async () => {
    const q = queue(32);
    const good = q.submit(() => insert('a'));
    const bad = q.submit(() => {
      insert('b');
      throw new CustodyError('request_conflict', 'no');
    });
    const after = q.submit(() => insert('c'));
    await good;
    await after;
    const failure = await bad.catch((error: unknown) => error);
    expect(failure).to.be.instanceOf(CustodyError).with.property('code', 'request_conflict');
    expect(committed()).to.deep.equal(['a', 'c']);
  });

  it('ends a batch whose transaction SQLite rolled back on its own (a full disk, an I/O error): no later unit commits alone', async () => {
    const q = queue(32);
    const before = q.submit(() => insert('a'));
    // What SQLite does on SQLITE_FULL or SQLITE_IOERR inside a statement: the whole transaction is gone.
    const failing = q.submit(() => {
      db.exec('ROLLBACK');
      throw new Error('disk I/O error');
    });
    const after = q.submit(() => insert('c'));
    const answers = await Promise.allSettled([before, failing, after]);
    expect(answers.map((a) => a.status)).to.deep.equal(['rejected', 'rejected', 'rejected']);
    expect(committed(), 'the unit after the rollback did not commit on its own').to.deep.equal([]);
  });

  it('turns a store guard into its typed error', async () => {
    const failure = await queue(32).submit(() => insert('x')).catch((error: unknown) => error);
    expect(failure).to.be.instanceOf(CustodyError).with.property('code', 'illegal_transition');
    expect(fromStore(new Error('store_corrupt: receipts are insert-once')).code).to.equal('store_corrupt');
    expect(fromStore(new Error('disk I/O error')).code).to.equal('internal');
  });

  it('caps a batch at its bound: five units, batches of two, three transactions', async () => {
    const q = queue(2);
    await Promise.all(['a', 'b', 'c', 'd', 'e'].map((value) => q.submit(() => insert(value))));
    expect(batches).to.equal(3);
    expect(committed()).to.have.length(5);
  });

  it('writes nothing once the store lock is lost, and says so to every unit', async () => {
    writable = false;
    const q = queue(32);
    const failures = await Promise.all(['a', 'b'].map((value) => q.submit(() => insert(value)).catch((error: unknown) => error)));
    for (const failure of failures) expect(failure).to.have.property('code', 'store_lock_lost');
    expect(committed()).to.deep.equal([]);
  });

  it('drains: resolves after every unit queued before it was answered, and at once when nothing is queued', async () => {
    const q = queue(32);
    await q.drain();
    expect(batches).to.equal(0);
    const pending = q.submit(() => insert('a'));
    await q.drain();
    expect(committed()).to.deep.equal(['a']);
    await pending;
  });

  it('gives every unit of a batch the same time', async () => {
    const q = queue(32);
    expect(await Promise.all([q.submit((c) => c.now), q.submit((c) => c.now)])).to.deep.equal([1234, 1234]);
  });

  it('raises the store head once per batch that changed a row, not for a read-only batch, and announces it before any answer of the batch', async () => {
    let head = 0;
    const events: string[] = [];
    const q = headQueue(
      () => void (head += 1),
      () => void events.push(`head ${head}`),
    );
    await Promise.all([q.submit(() => insert('a')).then(() => events.push('answer a')), q.submit(() => insert('b')).then(() => events.push('answer b'))]);
    expect(head, 'one batch, one raise').to.equal(1);
    expect(events).to.deep.equal(['head 1', 'answer a', 'answer b']);
    await q.submit(() => reader.prepare('SELECT count(*) FROM items').pluck().get());
    expect(head, 'a read-only batch raises nothing').to.equal(1);
    await q.submit(() => insert('x')).catch(() => undefined);
    await q.submit(() => insert('c'));
    expect(head).to.be.at.least(2);
  });

  it('runs what a unit asks for when it commits after the commit and before any answer, and never for a unit or a batch that rolled back', async () => {
    let failAtCommit = false;
    const events: string[] = [];
    const q = headQueue(
      // Fails the whole transaction after every unit ran, as a full disk does at COMMIT.
      () => {
        if (failAtCommit) throw new CustodyError('storage_full', 'the disk is full');
      },
      () => void events.push('head'),
    );
    const logged = (value: string) => (context: UnitContext) => {
      insert(value);
      context.whenCommitted(() => events.push(`logged ${value}: ${committed().join(',')}`));
      return value;
    };
    const answers = [
      q.submit(logged('a')).then(() => events.push('answer a')),
      q.submit((context) => {
        context.whenCommitted(() => events.push('logged x'));
        return insert('x');
      }).catch(() => events.push('refused x')),
      q.submit(logged('b')).then(() => events.push('answer b')),
    ];
    await Promise.all(answers);
    expect(events, 'after the commit (both rows readable), before the head and the answers; nothing for x').to.deep.equal(['logged a: a,b', 'logged b: a,b', 'head', 'answer a', 'refused x', 'answer b']);
    events.length = 0;
    failAtCommit = true;
    const failed = await q.submit(logged('c')).catch((error: unknown) => error);
    expect(failed).to.have.property('code', 'storage_full');
    expect(committed()).to.deep.equal(['a', 'b']);
    expect(events, 'a batch that did not commit logs nothing').to.deep.equal([]);
  });
});
