// Group commit of a store (shared/store/group-commit.ts): the writes
// of one event-loop turn share one transaction; none is answered before that
// transaction is durable; a write that fails undoes only itself; a commit that
// fails answers nobody; and a kill after the commit (at a cutpoint) or before
// it loses nothing that was answered.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'chai';
import { GroupCommit } from '../../../shared/store/group-commit.js';
import { distPath } from '../../helpers/children.js';
import { codeOfAnswer } from '../../helpers/codes.js';

describe('shared: group commit of a store', function () {
  this.timeout(30_000);
  let dir: string;
  let file: string;
  let db: Database.Database;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'custody-group-commit-'));
    file = path.join(dir, 'group.db');
    db = new Database(file);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE writes (n INTEGER PRIMARY KEY CHECK (n >= 0))');
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Rows as another connection sees them: only what has committed. */
  const committed = () => {
    const reader = new Database(file, { readonly: true });
    try {
      return (reader.prepare('SELECT n FROM writes ORDER BY n').all() as Array<{ n: number }>).map((row) => row.n);
    } finally {
      reader.close();
    }
  };

  it('answers the first of 50 writes asked in one turn only when all 50 are committed together', async () => {
    const group = new GroupCommit(db, 256, 'supervisor');
    const insert = db.prepare('INSERT INTO writes (n) VALUES (?)');
    const seenAtFirstAnswer: number[][] = [];
    const all = Array.from({ length: 50 }, (_, i) => group.submit(() => ({ value: insert.run(i).changes, cutpoints: [] })));
    void all[0]!.then(() => seenAtFirstAnswer.push(committed()));
    expect(committed()).to.deep.equal([]);
    await Promise.all(all);
    expect(seenAtFirstAnswer).to.deep.equal([Array.from({ length: 50 }, (_, i) => i)]);
  });

  it('rolls back only the write that failed; the others of its batch commit and are answered', async () => {
    const group = new GroupCommit(db, 256, 'supervisor');
    const insert = db.prepare('INSERT INTO writes (n) VALUES (?)');
    const answers = await Promise.all([1, -1, 2].map((n) => codeOfAnswer(group.submit(() => ({ value: insert.run(n), cutpoints: [] })))));
    expect(answers[0]).to.equal('answered');
    expect(answers[1]).to.not.equal('answered');
    expect(answers[2]).to.equal('answered');
    expect(committed()).to.deep.equal([1, 2]);
  });

  it('answers no write of a batch whose commit fails, and leaves none of them', async () => {
    db.pragma('foreign_keys = ON');
    db.exec(`CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);`);
    const group = new GroupCommit(db, 256, 'supervisor');
    const insert = db.prepare('INSERT INTO writes (n) VALUES (?)');
    const good = group.submit(() => ({ value: insert.run(7), cutpoints: [] }));
    // Checked only at COMMIT: the batch's commit fails, after every savepoint succeeded.
    const dangling = group.submit(() => ({ value: db.prepare('INSERT INTO child (id, parent) VALUES (1, 99)').run(), cutpoints: [] }));
    expect(await codeOfAnswer(good)).to.not.equal('answered');
    expect(await codeOfAnswer(dangling)).to.not.equal('answered');
    expect(committed()).to.deep.equal([]);
  });

  it('ends a batch whose transaction SQLite rolled back on its own (a full disk, an I/O error): no later write commits alone, none is answered', async () => {
    const group = new GroupCommit(db, 256, 'supervisor');
    const insert = db.prepare('INSERT INTO writes (n) VALUES (?)');
    const before = group.submit(() => ({ value: insert.run(1), cutpoints: [] }));
    // What SQLite does on SQLITE_FULL or SQLITE_IOERR inside a statement: the whole transaction is gone.
    const failing = group.submit(() => {
      db.exec('ROLLBACK');
      throw new Error('disk I/O error');
    });
    const after = group.submit(() => ({ value: insert.run(2), cutpoints: [] }));
    for (const answer of [before, failing, after]) expect(await codeOfAnswer(answer)).to.not.equal('answered');
    expect(committed(), 'the write after the rollback did not commit on its own').to.deep.equal([]);
  });

  const child = (mode: string, env: NodeJS.ProcessEnv = {}) =>
    spawnSync(process.execPath, [distPath('test', 'fixtures', 'group-commit-child.js'), file, '20', mode], { env: { ...process.env, ...env }, encoding: 'utf8' });

  it('killed at the cutpoint after the batch commit: all 20 writes are durable and none was answered', () => {
    const run = child('after-commit', { CUSTODY_FAULT: 'supervisor:after_test_batch' });
    expect(run.signal).to.equal('SIGKILL');
    expect(run.stdout).to.not.include('answered');
    expect(committed()).to.deep.equal(Array.from({ length: 20 }, (_, i) => i));
  });

  it('killed inside the batch, before its commit: nothing is durable and nothing was answered', () => {
    const run = child('mid-batch');
    expect(run.signal).to.equal('SIGKILL');
    expect(run.stdout).to.equal('');
    expect(committed()).to.deep.equal([]);
  });

  it('unarmed, the same child answers all 20 after their commit', () => {
    const run = child('after-commit');
    expect(run.status).to.equal(0);
    expect(run.stdout.trim().split('\n')).to.have.length(20);
    expect(committed()).to.have.length(20);
  });
});
