// The review-notes journal and its lock, in process: the fence makes
// not_applied true, torn last lines are judged as readers will judge them,
// and the lock excludes other processes and dies with its holder.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { expect } from 'chai';
import { NotesJournal, RECORD_EVERY_LINES, noteDigest } from '../../executor-proc/adapters/journal.js';
import { ExclusiveFileLock } from '../../executor-proc/adapters/journal-lock.js';
import { REPO_ROOT } from '../helpers/vectors.js';

const OP = (n: number) => n.toString(16).padStart(64, '0');

/** A process that takes the lock and holds it until killed. */
async function holdLockElsewhere(lockFile: string): Promise<ChildProcess> {
  const script = `
    const Database = require('better-sqlite3');
    const db = new Database(${JSON.stringify(lockFile)});
    db.exec('BEGIN EXCLUSIVE');
    process.stdout.write('held\\n');
    setInterval(() => {}, 1000);`;
  const holder = spawn(process.execPath, ['-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  await once(holder.stdout, 'data');
  return holder;
}

describe('executor-proc review-notes journal', () => {
  let root: string;
  let file: string;
  let lock: ExclusiveFileLock;
  let journal: NotesJournal;
  const warnings: string[] = [];

  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'custody-journal-test-'));
    file = path.join(root, 'resources', 'review-notes.jsonl');
    lock = new ExclusiveFileLock(`${file}.lock`, 300);
    journal = new NotesJournal(file, lock, (event) => warnings.push(event));
    warnings.length = 0;
  });

  afterEach(() => {
    journal.close();
    lock.close();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const lines = () => fs.readFileSync(file, 'utf8').split('\n').filter((line) => line !== '');

  it('appends one line per operation, with the sha256 of the note, and finds it again', () => {
    const appended = journal.append(OP(1), 'héllo');
    expect(appended).to.deep.equal({ outcome: 'applied', existing: false, line: { operation_id: OP(1), note: 'héllo', sha256: noteDigest('héllo') } });
    expect(journal.append(OP(1), 'héllo')).to.deep.include({ outcome: 'applied', existing: true });
    expect(journal.observe(OP(1))).to.deep.equal({ outcome: 'applied', line: appended.outcome === 'applied' ? appended.line : null });
    expect(lines()).to.have.length(1);
    expect(fs.statSync(file).mode & 0o777).to.equal(0o600);
  });

  it('fences an operation it does not find, and then refuses to append it', () => {
    expect(journal.observe(OP(2))).to.deep.equal({ outcome: 'not_applied', fencedNow: true });
    expect(journal.append(OP(2), 'too late')).to.deep.equal({ outcome: 'fenced' });
    expect(journal.observe(OP(2))).to.deep.equal({ outcome: 'not_applied', fencedNow: false });
    expect(lines().map((line) => Object.keys(JSON.parse(line) as object).sort().join())).to.deep.equal(['fence,fenced_at']);
  });

  it('sees what another journal instance (another process) appended or fenced since its last look', () => {
    const other = new NotesJournal(file, new ExclusiveFileLock(`${file}.lock`), () => undefined);
    journal.append(OP(3), 'first');
    other.observe(OP(4));
    other.append(OP(5), 'by the other');
    expect(journal.append(OP(4), 'fenced elsewhere')).to.deep.equal({ outcome: 'fenced' });
    expect(journal.observe(OP(5))).to.deep.include({ outcome: 'applied' });
  });

  it('counts a complete last line without its newline, and terminates it before the next write', () => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, JSON.stringify({ operation_id: OP(6), note: 'cut', sha256: noteDigest('cut') }));
    expect(journal.observe(OP(6))).to.deep.include({ outcome: 'applied' });
    journal.append(OP(7), 'next');
    expect(lines().map((line) => (JSON.parse(line) as { operation_id: string }).operation_id)).to.deep.equal([OP(6), OP(7)]);
  });

  it('skips a torn last line that does not parse, and keeps it apart from the next entry', () => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, `{"operation_id":"${OP(8)}","no`);
    expect(journal.observe(OP(8))).to.deep.equal({ outcome: 'not_applied', fencedNow: true });
    expect(lines()).to.have.length(2);
    expect(journal.append(OP(8), 'after the fence')).to.deep.equal({ outcome: 'fenced' });
    expect(warnings).to.include('journal_line_skipped');
  });

  it('reads a journal longer than its read chunk, lines crossing chunk borders included', () => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const note = 'n'.repeat(1000);
    const body = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ operation_id: OP(1000 + i), note, sha256: noteDigest(note) })).join('\n') + '\n';
    fs.writeFileSync(file, body);
    expect(fs.statSync(file).size).to.be.above(3 * 1024 * 1024);
    for (const i of [0, 1047, 2999]) expect(journal.observe(OP(1000 + i))).to.deep.include({ outcome: 'applied' });
    expect(journal.observe(OP(5000))).to.deep.equal({ outcome: 'not_applied', fencedNow: true });
    expect(journal.append(OP(5000), 'fenced')).to.deep.equal({ outcome: 'fenced' });
    expect(warnings).to.deep.equal([]);
  });

  describe('its index (review-notes.jsonl.index)', () => {
    const note = (n: number, text = 'note') => JSON.stringify({ operation_id: OP(n), note: text, sha256: noteDigest(text) });
    /** A journal instance of a process started afresh: nothing in its memory, the lock and the index files as they are. */
    const restarted = (events: string[]) => {
      journal.close();
      lock.close();
      lock = new ExclusiveFileLock(`${file}.lock`, 300);
      journal = new NotesJournal(file, lock, (event) => events.push(event));
      return journal;
    };

    /** `count` notes written straight into the journal, for operations from `first` on: past RECORD_EVERY_LINES, the index is written. */
    const filled = (first: number, count: number) => Array.from({ length: count }, (_, i) => note(first + i)).join('\n') + '\n';

    it('is kept beside the journal, private, and a restarted process reads on from where it stopped, not the whole journal again', () => {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      // A line that does not parse, early: reading it again would say so again.
      fs.writeFileSync(file, `${note(1)}\nnot a journal line\n${filled(100, RECORD_EVERY_LINES)}${note(2)}\n`);
      expect(journal.observe(OP(2))).to.deep.include({ outcome: 'applied' });
      expect(warnings.filter((event) => event === 'journal_line_skipped')).to.have.length(1);
      expect(fs.statSync(`${file}.index`).mode & 0o777).to.equal(0o600);
      const events: string[] = [];
      const again = restarted(events);
      expect(again.observe(OP(1))).to.deep.include({ outcome: 'applied' });
      expect(again.observe(OP(100 + RECORD_EVERY_LINES - 1))).to.deep.include({ outcome: 'applied' });
      expect(again.append(OP(3), 'after the restart')).to.deep.include({ outcome: 'applied', existing: false });
      expect(again.observe(OP(4))).to.deep.equal({ outcome: 'not_applied', fencedNow: true });
      expect(events, 'nothing read twice, nothing rebuilt').to.deep.equal([]);
      // What the last process read but never wrote to the index (fewer than RECORD_EVERY_LINES lines) is read again, and found.
      const events2: string[] = [];
      const third = restarted(events2);
      expect(third.append(OP(4), 'fenced before the restart')).to.deep.equal({ outcome: 'fenced' });
      expect(third.append(OP(3), 'again')).to.deep.include({ outcome: 'applied', existing: true });
      expect(events2).to.deep.equal([]);
    });

    it('is removed and rebuilt when SQLite cannot read it (cut short, overwritten): the tool goes on, nothing in the journal lost', () => {
      journal.append(OP(1), 'one');
      journal.observe(OP(2));
      for (const [i, junk] of [Buffer.from('not a database at all'), Buffer.alloc(0)].entries()) {
        const events: string[] = [];
        journal.close();
        lock.close();
        fs.writeFileSync(`${file}.index`, junk);
        for (const suffix of ['-wal', '-shm']) fs.rmSync(`${file}.index${suffix}`, { force: true });
        lock = new ExclusiveFileLock(`${file}.lock`, 300);
        journal = new NotesJournal(file, lock, (event) => events.push(event));
        expect(journal.append(OP(1), 'one')).to.deep.include({ outcome: 'applied', existing: true });
        expect(journal.append(OP(2), 'fenced before')).to.deep.equal({ outcome: 'fenced' });
        expect(journal.append(OP(10 + i), 'new')).to.deep.include({ outcome: 'applied', existing: false });
        if (junk.length > 0) expect(events).to.include('journal_index_rebuilt');
      }
      expect(lines().filter((line) => line.includes('"operation_id"'))).to.have.length(3);
    });

    it('is rebuilt for a journal replaced by another file, cut short, or put back in place from a copy whose last line differs', () => {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      // Past RECORD_EVERY_LINES, so that the index holds a mark to be found wrong.
      fs.writeFileSync(file, filled(100, RECORD_EVERY_LINES));
      journal.append(OP(1), 'one');
      journal.append(OP(2), 'two');
      const copy = fs.readFileSync(file);
      journal.append(OP(3), 'three');
      // Replaced (another inode): only what the new file holds.
      const events: string[] = [];
      fs.writeFileSync(`${file}.new`, `${note(9)}\n`);
      fs.renameSync(`${file}.new`, file);
      const replaced = restarted(events);
      expect(replaced.observe(OP(9))).to.deep.include({ outcome: 'applied' });
      expect(replaced.observe(OP(1))).to.deep.equal({ outcome: 'not_applied', fencedNow: true });
      expect(events).to.include('journal_reindexed');
      // Put back in place (the same inode) from the copy: shorter than what was read.
      fs.writeFileSync(file, copy);
      events.length = 0;
      expect(journal.observe(OP(2))).to.deep.include({ outcome: 'applied' });
      expect(journal.observe(OP(9))).to.deep.equal({ outcome: 'not_applied', fencedNow: true });
      expect(journal.append(OP(9), 'fenced in the copy now')).to.deep.equal({ outcome: 'fenced' });
      // The same length again, its last line another operation's: the index of the old bytes is not trusted.
      const size = fs.statSync(file).size;
      const lastStart = fs.readFileSync(file, 'utf8').slice(0, -1).lastIndexOf('\n') + 1;
      const last = fs.readFileSync(file, 'utf8').slice(lastStart);
      const swapped = last.replace(/"fence":"0+9"/, `"fence":"${OP(7)}"`);
      expect(swapped.length).to.equal(last.length);
      const fd = fs.openSync(file, 'r+');
      fs.writeSync(fd, swapped, lastStart);
      fs.closeSync(fd);
      expect(fs.statSync(file).size).to.equal(size);
      expect(journal.append(OP(9), 'no longer fenced')).to.deep.include({ outcome: 'applied', existing: false });
      expect(journal.append(OP(7), 'fenced now')).to.deep.equal({ outcome: 'fenced' });
    });
  });

  it('waits for a lock held by another process, and gets it the moment that process is killed with -9', async () => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const holder = await holdLockElsewhere(`${file}.lock`);
    try {
      expect(() => journal.append(OP(9), 'blocked')).to.throw(/not acquired within 300 ms/);
    } finally {
      holder.kill('SIGKILL');
      await once(holder, 'exit');
    }
    expect(journal.append(OP(9), 'free again')).to.deep.include({ outcome: 'applied' });
  });
});
